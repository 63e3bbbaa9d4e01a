package handler

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// HTTP headers the http handler sets on each request.
const (
	HeaderSessionID = "X-Seqbus-Session-Id"
	HeaderSequence  = "X-Seqbus-Sequence"
	HeaderMessageID = "X-Seqbus-Message-Id"
	HeaderLast      = "X-Seqbus-Last"
)

// HTTPConfig configures the http handler.
type HTTPConfig struct {
	// URL receives one POST per message. Required.
	URL string
	// Timeout bounds each request (default 10s).
	Timeout time.Duration
	// Client is the HTTP client to use (default: a new client with Timeout).
	Client *http.Client
}

// HTTP forwards each message to a URL: the body as the request body, the session, sequence and
// message id as headers. Any status outside 2xx is an error, so the engine retries the message.
type HTTP struct {
	url    string
	client *http.Client
}

// NewHTTP returns an http handler.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	if cfg.URL == "" {
		return nil, fmt.Errorf("http handler: URL is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	client := cfg.Client
	if client == nil {
		client = &http.Client{Timeout: cfg.Timeout}
	}
	return &HTTP{url: cfg.URL, client: client}, nil
}

// Handle POSTs m to the configured URL.
func (h *HTTP) Handle(ctx context.Context, m *sequencer.Message) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(m.Body))
	if err != nil {
		return fmt.Errorf("http handler: build request: %w", err)
	}
	ct := m.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	req.Header.Set("Content-Type", ct)
	req.Header.Set(HeaderSessionID, m.SessionID)
	req.Header.Set(HeaderSequence, strconv.FormatInt(m.Sequence, 10))
	req.Header.Set(HeaderMessageID, m.MessageID)
	req.Header.Set(HeaderLast, strconv.FormatBool(m.IsLast))
	resp, err := h.client.Do(req)
	if err != nil {
		return fmt.Errorf("http handler: session %q sequence %d: %w", m.SessionID, m.Sequence, err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("http handler: session %q sequence %d: status %d: %s", m.SessionID, m.Sequence, resp.StatusCode, bytes.TrimSpace(snippet))
	}
	return nil
}

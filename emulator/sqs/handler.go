package sqs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/seqbus/seqbus/clock"
)

// Defaults of Config.
const (
	DefaultRegion    = "us-east-1"
	DefaultAccountID = "000000000000"
)

// maxRequestBytes bounds a request body: a batch of ten messages of 1 MiB each
// is refused by size rules long before, so this only guards the decoder.
const maxRequestBytes = 16 << 20

// Config configures a Handler. The zero value is usable.
type Config struct {
	// Clock supplies time and timers. Default clock.Real().
	Clock clock.Clock
	// Region is the region in queue ARNs. Default DefaultRegion.
	Region string
	// AccountID is the account in queue URLs and ARNs. Default DefaultAccountID.
	AccountID string
	// Logger receives a debug line per request. Default: discard.
	Logger *slog.Logger
}

// Handler serves the SQS JSON protocol over HTTP. It is safe for concurrent use.
type Handler struct {
	clk     clock.Clock
	region  string
	account string
	log     *slog.Logger

	mu      sync.Mutex
	queues  map[string]*queue    // by name
	deleted map[string]time.Time // name → when it was deleted
	changed chan struct{}        // closed and replaced when messages may have become receivable
}

// New returns a Handler with no queues.
func New(cfg Config) *Handler {
	return &Handler{
		clk:     cmp.Or[clock.Clock](cfg.Clock, clock.Real()),
		region:  cmp.Or(cfg.Region, DefaultRegion),
		account: cmp.Or(cfg.AccountID, DefaultAccountID),
		log:     cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		queues:  map[string]*queue{},
		deleted: map[string]time.Time{},
		changed: make(chan struct{}),
	}
}

// notifyLocked wakes every long poll. h.mu must be held.
func (h *Handler) notifyLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

const targetPrefix = "AmazonSQS."

type request struct {
	ctx    context.Context
	host   string
	sender string
	body   []byte
}

// decode unmarshals the request body into v.
func (r *request) decode(v any) error {
	if len(r.body) == 0 {
		return nil
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		return newErr("SerializationException", "SerializationException", "The request body could not be read: %v", err)
	}
	return nil
}

var operations = map[string]func(h *Handler, r *request) (any, error){
	"CreateQueue":                  (*Handler).createQueue,
	"GetQueueUrl":                  (*Handler).getQueueURL,
	"GetQueueAttributes":           (*Handler).getQueueAttributes,
	"SetQueueAttributes":           (*Handler).setQueueAttributes,
	"ListQueues":                   (*Handler).listQueues,
	"DeleteQueue":                  (*Handler).deleteQueue,
	"PurgeQueue":                   (*Handler).purgeQueue,
	"SendMessage":                  (*Handler).sendMessage,
	"SendMessageBatch":             (*Handler).sendMessageBatch,
	"ReceiveMessage":               (*Handler).receiveMessage,
	"DeleteMessage":                (*Handler).deleteMessage,
	"DeleteMessageBatch":           (*Handler).deleteMessageBatch,
	"ChangeMessageVisibility":      (*Handler).changeMessageVisibility,
	"ChangeMessageVisibilityBatch": (*Handler).changeMessageVisibilityBatch,
}

// ServeHTTP answers one SQS JSON-protocol request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodGet && req.URL.Path == "/health" {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	reqID := uuid.NewString()
	w.Header().Set("x-amzn-RequestId", reqID)
	target := req.Header.Get("X-Amz-Target")
	op, isSQS := strings.CutPrefix(target, targetPrefix)
	if req.Method != http.MethodPost || !isSQS {
		writeError(w, newErr("UnknownOperationException", "InvalidAction",
			"this local SQS serves the JSON protocol only: POST with X-Amz-Target: AmazonSQS.<Action> and Content-Type application/x-amz-json-1.0 (got %s %q, target %q)",
			req.Method, req.URL.Path, target))
		return
	}
	fn, ok := operations[op]
	if !ok {
		writeError(w, errUnsupported("%s is not modeled by this local SQS", op))
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxRequestBytes+1))
	if err != nil {
		writeError(w, newErr("SerializationException", "SerializationException", "reading the request body: %v", err))
		return
	}
	if len(body) > maxRequestBytes {
		writeError(w, errInvalidParams("The request body is larger than %d bytes.", maxRequestBytes))
		return
	}
	r := &request{ctx: req.Context(), host: req.Host, sender: senderID(req.Header.Get("Authorization")), body: body}
	out, err := fn(h, r)
	h.log.Debug("sqs: request", slog.String("action", op), slog.String("request_id", reqID), slog.Any("error", err))
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = &apiError{typ: "InternalError", queryCode: "InternalError", status: http.StatusInternalServerError, msg: err.Error()}
		}
		writeError(w, ae)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if out == nil {
		out = struct{}{}
	}
	_ = json.NewEncoder(w).Encode(out)
}

func writeError(w http.ResponseWriter, e *apiError) {
	fault := "Receiver"
	if e.sender {
		fault = "Sender"
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Query-Error", e.queryCode+";"+fault)
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + e.typ, "message": e.msg})
}

// senderID is the access key id of a SigV4 Authorization header, or "anonymous".
// Credentials are not checked.
func senderID(auth string) string {
	_, cred, ok := strings.Cut(auth, "Credential=")
	if !ok {
		return "anonymous"
	}
	key, _, _ := strings.Cut(cred, "/")
	return cmp.Or(key, "anonymous")
}

// Service is a Handler served on a listener of its own.
type Service struct {
	*Handler
	ln  net.Listener
	srv *http.Server
	err chan error
}

// Start listens on addr (HOST:PORT; port 0 picks a free one) and serves a new Handler
// until Close.
func Start(ctx context.Context, addr string, cfg Config) (*Service, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sqs: listen on %s: %w", addr, err)
	}
	h := New(cfg)
	s := &Service{Handler: h, ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, err: make(chan error, 1)}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.err <- err
	}()
	return s, nil
}

// Addr is the address the service listens on.
func (s *Service) Addr() string { return s.ln.Addr().String() }

// URL is the endpoint to give an SDK, e.g. http://127.0.0.1:9324.
func (s *Service) URL() string { return "http://" + s.Addr() }

// Close stops the listener and ends open requests, long polls included.
func (s *Service) Close() error {
	if err := s.srv.Close(); err != nil {
		return fmt.Errorf("sqs: close: %w", err)
	}
	if err := <-s.err; err != nil {
		return fmt.Errorf("sqs: serve: %w", err)
	}
	return nil
}

package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/sequencer"
)

func msg(body []byte) *sequencer.Message {
	return &sequencer.Message{
		SessionID:      "order-7",
		Sequence:       3,
		MessageID:      "m-3",
		BrokerSequence: 42,
		DeliveryCount:  2,
		Body:           body,
		Properties:     map[string]any{"seq": int64(3), "blob": []byte{1, 2}},
	}
}

func TestLogWritesOneJSONObjectPerMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		body         []byte
		wantBody     string
		wantEncoding string
	}{
		{"utf8 text", []byte(`{"amount":12}`), `{"amount":12}`, ""},
		{"unicode", []byte("héllo ✓"), "héllo ✓", ""},
		{"empty", nil, "", ""},
		{"binary", []byte{0xff, 0xfe, 0x00}, "//4A", "base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			h := handler.NewLog(&buf)
			require.NoError(t, h.Handle(context.Background(), msg(tt.body)))
			require.NoError(t, h.Handle(context.Background(), msg(tt.body)))

			lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
			require.Len(t, lines, 2)
			var got map[string]any
			require.NoError(t, json.Unmarshal([]byte(lines[0]), &got))
			require.Equal(t, "order-7", got["session_id"])
			require.EqualValues(t, 3, got["sequence"])
			require.Equal(t, "m-3", got["message_id"])
			require.EqualValues(t, 2, got["delivery_count"])
			require.Equal(t, tt.wantBody, got["body"])
			if tt.wantEncoding == "" {
				require.NotContains(t, got, "body_encoding")
			} else {
				require.Equal(t, tt.wantEncoding, got["body_encoding"])
			}
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestLogReturnsWriteErrors(t *testing.T) {
	t.Parallel()
	err := handler.NewLog(failingWriter{}).Handle(context.Background(), msg([]byte("x")))
	require.ErrorContains(t, err, "disk full")
	require.ErrorContains(t, err, "order-7")
}

func TestLogConcurrentLinesDoNotInterleave(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	h := handler.NewLog(&buf)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				require.NoError(t, h.Handle(context.Background(), msg(bytes.Repeat([]byte("a"), 300))))
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 400)
	for _, l := range lines {
		require.True(t, json.Valid([]byte(l)), l)
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    handler.Options
		wantErr string
	}{
		{name: "", opts: handler.Options{Out: io.Discard}},
		{name: "log", opts: handler.Options{Out: io.Discard}},
		{name: "noop"},
		{name: "http", opts: handler.Options{URL: "http://127.0.0.1:1/x"}},
		{name: "http", wantErr: "URL is required"},
		{name: "kafka", wantErr: `unknown handler "kafka"`},
		{name: "journal", wantErr: "needs a transactional state store"},
		{name: "journal", opts: handler.Options{Journal: sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })}},
	}
	for _, tt := range tests {
		t.Run(tt.name+tt.wantErr, func(t *testing.T) {
			t.Parallel()
			h, err := handler.New(tt.name, tt.opts)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, h)
		})
	}
	require.Equal(t, []string{"http", "journal", "log", "noop"}, handler.Names())
	require.True(t, handler.Known("log"))
	require.False(t, handler.Known("nope"))
}

func TestHTTPHandler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		status  int
		delay   time.Duration
		wantErr string
	}{
		{name: "ok", status: http.StatusOK},
		{name: "accepted", status: http.StatusAccepted},
		{name: "server error", status: http.StatusInternalServerError, wantErr: "status 500: boom"},
		{name: "client error", status: http.StatusBadRequest, wantErr: "status 400"},
		{name: "timeout", status: http.StatusOK, delay: 2 * time.Second, wantErr: "order-7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var gotBody, gotSession, gotSeq string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				gotBody, gotSession, gotSeq = string(b), r.Header.Get(handler.HeaderSessionID), r.Header.Get(handler.HeaderSequence)
				if tt.delay > 0 {
					select {
					case <-time.After(tt.delay):
					case <-r.Context().Done():
					}
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte("boom\n"))
			}))
			t.Cleanup(srv.Close)
			h, err := handler.NewHTTP(handler.HTTPConfig{URL: srv.URL, Timeout: 200 * time.Millisecond})
			require.NoError(t, err)
			err = h.Handle(context.Background(), msg([]byte("payload")))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "payload", gotBody)
			require.Equal(t, "order-7", gotSession)
			require.Equal(t, "3", gotSeq)
		})
	}
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	ok := sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	fail := sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return errors.New("nope") })
	panics := sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { panic("kaboom") })
	panicsErr := sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { panic(io.ErrUnexpectedEOF) })
	slow := sequencer.HandlerFunc(func(ctx context.Context, _ *sequencer.Message) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
			return nil
		}
	})
	tests := []struct {
		name      string
		h         sequencer.Handler
		wantErr   string
		wantIs    error
		wantPanic bool
		want      handler.MetricsSnapshot
	}{
		{name: "success", h: ok, want: handler.MetricsSnapshot{Calls: 1, Succeeded: 1}},
		{name: "failure", h: fail, wantErr: "nope", want: handler.MetricsSnapshot{Calls: 1, Failed: 1}},
		{name: "panic", h: panics, wantErr: "handler panic: kaboom", wantPanic: true, want: handler.MetricsSnapshot{Calls: 1, Failed: 1, Panics: 1}},
		{name: "panic with error", h: panicsErr, wantIs: io.ErrUnexpectedEOF, wantPanic: true, want: handler.MetricsSnapshot{Calls: 1, Failed: 1, Panics: 1}},
		{name: "timeout", h: slow, wantIs: handler.ErrTimeout, want: handler.MetricsSnapshot{Calls: 1, Failed: 1, Timeouts: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logBuf bytes.Buffer
			var mu sync.Mutex
			logger := slog.New(slog.NewJSONHandler(&lockedWriter{w: &logBuf, mu: &mu}, nil))
			var m handler.Metrics
			h := handler.Chain(tt.h, m.Middleware(), handler.WithRecover(logger), handler.WithTimeout(50*time.Millisecond))
			err := h.Handle(context.Background(), msg(nil))
			switch {
			case tt.wantErr != "":
				require.ErrorContains(t, err, tt.wantErr)
			case tt.wantIs != nil:
				require.ErrorIs(t, err, tt.wantIs)
			default:
				require.NoError(t, err)
			}
			got := m.Snapshot()
			got.TotalDuration = 0
			require.Equal(t, tt.want, got)
			mu.Lock()
			defer mu.Unlock()
			if tt.wantPanic {
				var pe *handler.PanicError
				require.ErrorAs(t, err, &pe)
				require.Contains(t, string(pe.Stack), "handler_test.go")
				require.Contains(t, logBuf.String(), "recovered panic")
				require.Contains(t, logBuf.String(), "order-7")
			} else {
				require.Empty(t, logBuf.String())
			}
		})
	}
}

func TestWithTimeoutDisabled(t *testing.T) {
	t.Parallel()
	h := handler.WithTimeout(0)(sequencer.HandlerFunc(func(ctx context.Context, _ *sequencer.Message) error {
		_, has := ctx.Deadline()
		require.False(t, has)
		return nil
	}))
	require.NoError(t, h.Handle(context.Background(), msg(nil)))
}

func TestChainOrder(t *testing.T) {
	t.Parallel()
	var order []string
	mw := func(name string) handler.Middleware {
		return func(next sequencer.Handler) sequencer.Handler {
			return sequencer.HandlerFunc(func(ctx context.Context, m *sequencer.Message) error {
				order = append(order, name)
				return next.Handle(ctx, m)
			})
		}
	}
	h := handler.Chain(sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error {
		order = append(order, "handler")
		return nil
	}), mw("a"), mw("b"))
	require.NoError(t, h.Handle(context.Background(), msg(nil)))
	require.Equal(t, []string{"a", "b", "handler"}, order)
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

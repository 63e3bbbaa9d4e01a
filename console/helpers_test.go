package console_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/console"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/internal/testio"
	"github.com/seqbus/seqbus/operator"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

const (
	queue     = "orders"
	actToken  = "act-token-0123456789abcdef"
	readToken = "read-token-0123456789abcdef"
)

// bundle is one test's emulator, state store, operator, a worker engine and the console.
type bundle struct {
	srv    *emulatortest.Server
	store  sequencer.StateStore
	op     *operator.Operator
	worker *sbadapter.Source
	sender *azservicebus.Sender
	engine *sequencer.Engine
	http   *httptest.Server
	logs   *testio.SyncBuffer

	mu      sync.Mutex
	failing map[string]error
}

type setupOptions struct {
	proxyHeader string
}

func setup(t *testing.T, opts *setupOptions) *bundle {
	t.Helper()
	if opts == nil {
		opts = &setupOptions{}
	}
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues:        map[string]broker.EntityProperties{queue: {RequiresSession: true}},
		ClientOptions: sbadapter.ClientOptions(nil),
	})
	entity := sbadapter.Entity{Queue: queue}
	b := &bundle{srv: srv, logs: &testio.SyncBuffer{}, failing: map[string]error{}}
	source, err := sbadapter.NewSource(srv.Client, sbadapter.Config{Entity: entity})
	require.NoError(t, err)
	mgmt := srv.NewClient(t, nil)
	mgmtSource, err := sbadapter.NewSource(mgmt, sbadapter.Config{Entity: entity})
	require.NoError(t, err)
	st := sbstate.New(nil)
	b.store = st
	lister := sessionstate.NewScanLister(sessionstate.ScanConfig{IDs: mgmtSource.ListSessionsWithState, Source: source, Store: st, Concurrency: 4})
	b.op, err = operator.New(operator.Config{Entity: entity, Client: mgmt, Sessions: source, Store: st, Lister: lister})
	require.NoError(t, err)
	b.worker, err = sbadapter.NewSource(srv.NewClient(t, sbadapter.ClientOptions(nil)), sbadapter.Config{Entity: entity})
	require.NoError(t, err)
	b.engine, err = sequencer.NewEngine(sequencer.EngineConfig{
		Retry: sequencer.RetryPolicy{Attempts: 1}, IdleTimeout: 300 * time.Millisecond, TombstoneTTL: time.Hour,
	}, sequencer.EngineDeps{Store: st, Handler: sequencer.HandlerFunc(b.handle)})
	require.NoError(t, err)
	b.sender, err = srv.Client.NewSender(queue, nil)
	require.NoError(t, err)

	logger := slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	con, err := console.New(console.Config{
		Operations: b.op, Entity: queue, Token: actToken, ReadToken: readToken, ProxyUserHeader: opts.proxyHeader,
		Probes:     []console.Probe{{Name: "service bus", Check: mgmtSource.Probe}},
		ActionWait: 5 * time.Second, Logger: logger,
	})
	require.NoError(t, err)
	b.http = httptest.NewServer(con)
	t.Cleanup(b.http.Close)
	return b
}

func (b *bundle) handle(_ context.Context, m *sequencer.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failing[fmt.Sprintf("%s/%d", m.SessionID, m.Sequence)]
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// park publishes 1..n for session id (the body of poison is body) and runs the engine with
// sequence poison failing with failure: the session parks there, poison is dead-lettered.
func (b *bundle) park(t *testing.T, id string, n, poison int64, body, failure string) {
	t.Helper()
	ctx := testCtx(t)
	key := fmt.Sprintf("%s/%d", id, poison)
	b.mu.Lock()
	b.failing[key] = errors.New(failure)
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.failing, key)
		b.mu.Unlock()
	}()
	for s := int64(1); s <= n; s++ {
		sid, mid := id, fmt.Sprintf("%s/%d", id, s)
		data := fmt.Appendf(nil, "%s step %d", id, s)
		if s == poison {
			data = []byte(body)
		}
		require.NoError(t, b.sender.SendMessage(ctx, &azservicebus.Message{
			SessionID: &sid, MessageID: &mid, Body: data,
			ApplicationProperties: map[string]any{"Sequence": s, "IsLast": s == n},
		}, nil))
	}
	require.Equal(t, sequencer.OutcomeParked, b.run(t, id))
}

// run runs the worker engine on session id until it releases it.
func (b *bundle) run(t *testing.T, id string) sequencer.Outcome {
	t.Helper()
	ctx := testCtx(t)
	sess, err := b.worker.Accept(ctx, id)
	require.NoError(t, err)
	out, err := b.engine.RunSession(ctx, sess, nil)
	require.NoError(t, err)
	return out
}

// state loads the stored state of session id, locking it briefly.
func (b *bundle) state(t *testing.T, id string) *sequencer.State {
	t.Helper()
	ctx := testCtx(t)
	sess, err := b.worker.Accept(ctx, id)
	require.NoError(t, err)
	defer func() { require.NoError(t, sess.Close(ctx)) }()
	st, _, err := b.store.Load(ctx, sequencer.LoadParams{Session: sess})
	require.NoError(t, err)
	return st
}

// deadLetters lists the dead letters as "session/sequence".
func (b *bundle) deadLetters(t *testing.T) []string {
	t.Helper()
	res, err := b.op.DLQList(testCtx(t), operator.DLQListParams{})
	require.NoError(t, err)
	out := []string{}
	for _, m := range res.Messages {
		out = append(out, fmt.Sprintf("%s/%d", m.SessionID, m.Sequence))
	}
	return out
}

// request is one HTTP request to the console.
type request struct {
	method, path string
	form         url.Values
	header       map[string]string
	cookie       string
}

// do sends rq without following redirects and returns the status, the headers and the body.
func (b *bundle) do(t *testing.T, rq request) (int, http.Header, string) {
	t.Helper()
	var body io.Reader
	if rq.form != nil {
		body = strings.NewReader(rq.form.Encode())
	}
	req, err := http.NewRequestWithContext(testCtx(t), cmp.Or(rq.method, http.MethodGet), b.http.URL+rq.path, body)
	require.NoError(t, err)
	if rq.form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range rq.header {
		req.Header.Set(k, v)
	}
	if rq.cookie != "" {
		req.AddCookie(&http.Cookie{Name: "__Host-seqbus-console", Value: rq.cookie})
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(data)
}

// login logs in with token and returns the login cookie's value.
func (b *bundle) login(t *testing.T, token string) string {
	t.Helper()
	status, h, _ := b.do(t, request{method: http.MethodPost, path: "/login", form: url.Values{"token": {token}}})
	require.Equal(t, http.StatusSeeOther, status)
	resp := http.Response{Header: h}
	for _, c := range resp.Cookies() {
		if c.Name == "__Host-seqbus-console" {
			require.True(t, c.Secure, "Secure")
			require.True(t, c.HttpOnly, "HttpOnly")
			require.Equal(t, http.SameSiteStrictMode, c.SameSite)
			require.Equal(t, "/", c.Path)
			return c.Value
		}
	}
	t.Fatal("no login cookie set")
	return ""
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf reads the CSRF token from the confirmation page of action on session id.
func (b *bundle) csrf(t *testing.T, cookie, action, id string) string {
	t.Helper()
	status, _, body := b.do(t, request{path: "/confirm?" + url.Values{"action": {action}, "session": {id}}.Encode(), cookie: cookie})
	require.Equal(t, http.StatusOK, status, body)
	m := csrfField.FindStringSubmatch(body)
	require.NotNil(t, m, body)
	return m[1]
}

// atBroker lists the session's messages at the broker (a peek) as "sequence state".
func (b *bundle) atBroker(t *testing.T, id string) []string {
	t.Helper()
	res, err := b.op.Show(testCtx(t), operator.ShowParams{SessionID: id, Wait: 5 * time.Second})
	require.NoError(t, err)
	require.Empty(t, res.MessagesUnavailable)
	out := []string{}
	for _, m := range res.Messages {
		out = append(out, fmt.Sprintf("%d %s", m.Sequence, m.State))
	}
	return out
}

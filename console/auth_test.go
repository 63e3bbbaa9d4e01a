package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/console"
	"github.com/seqbus/seqbus/internal/testio"
	"github.com/seqbus/seqbus/operator"
)

// fakeOps answers the console's calls from memory and records the changes asked for.
type fakeOps struct {
	console.Operations // nil: a call not overridden panics
	sessions           []operator.SessionInfo
	resumed            []string
	lists              atomic.Int64
}

func (f *fakeOps) List(_ context.Context, p operator.ListParams) (*operator.ListResult, error) {
	f.lists.Add(1)
	res := &operator.ListResult{Sessions: []operator.SessionInfo{}}
	for _, s := range f.sessions {
		if s.SessionID <= p.After || (p.Parked && s.Parked == nil) {
			continue
		}
		if p.Limit > 0 && len(res.Sessions) == p.Limit {
			res.Truncated, res.NextAfter = true, res.Sessions[len(res.Sessions)-1].SessionID
			break
		}
		res.Sessions = append(res.Sessions, s)
	}
	return res, nil
}

func (f *fakeOps) DLQList(context.Context, operator.DLQListParams) (*operator.DLQListResult, error) {
	return &operator.DLQListResult{Messages: []operator.BrokerMessage{
		{SessionID: "s1", Reason: "HandlerFailed"}, {SessionID: "s2", Reason: "HandlerFailed"}, {SessionID: "s3", Reason: "InvalidSequence"},
	}}, nil
}

func (f *fakeOps) Resume(_ context.Context, p operator.ResumeParams) (*operator.ResumeResult, error) {
	f.resumed = append(f.resumed, p.SessionID)
	return &operator.ResumeResult{Resumed: []operator.Resumed{{SessionID: p.SessionID}}}, nil
}

func newFakeConsole(t *testing.T, cfg console.Config) (*httptest.Server, *testio.SyncBuffer) {
	t.Helper()
	logs := &testio.SyncBuffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.Operations == nil {
		cfg.Operations = &fakeOps{}
	}
	con, err := console.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	return srv, logs
}

// TestLoginRateLimit: after ten failed attempts in a minute from one address, even the right
// token is refused until the minute has passed; Bearer failures count too.
func TestLoginRateLimit(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	srv, _ := newFakeConsole(t, console.Config{Token: actToken, Clock: clk})
	b := &bundle{http: srv}
	login := func(token string) int {
		status, _, _ := b.do(t, request{method: http.MethodPost, path: "/login", form: url.Values{"token": {token}}})
		return status
	}
	for range 9 {
		require.Equal(t, http.StatusUnauthorized, login("wrong"))
	}
	status, _, _ := b.do(t, request{path: "/api/overview", header: map[string]string{"Authorization": "Bearer wrong"}})
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, http.StatusTooManyRequests, login(actToken), "limited: the right token too")
	status, _, _ = b.do(t, request{path: "/api/overview", header: map[string]string{"Authorization": "Bearer " + actToken}})
	require.Equal(t, http.StatusTooManyRequests, status)
	clk.Advance(time.Minute)
	require.Equal(t, http.StatusSeeOther, login(actToken), "the window has passed")
}

// TestProxyIdentity: with the proxy header enabled, its user has the act role under that name,
// and an action still needs the CSRF token of its form.
func TestProxyIdentity(t *testing.T) {
	t.Parallel()
	ops := &fakeOps{sessions: []operator.SessionInfo{{SessionID: "s1", Parked: &operator.ParkedInfo{Sequence: 2}}}}
	srv, logs := newFakeConsole(t, console.Config{Operations: ops, ProxyUserHeader: "X-Forwarded-User"})
	b := &bundle{http: srv}
	who := map[string]string{"X-Forwarded-User": "alice@example.com"}

	status, _, page := b.do(t, request{path: "/", header: who})
	require.Equal(t, http.StatusOK, status, page)
	require.Contains(t, page, "alice@example.com (act)")
	status, _, page = b.do(t, request{path: "/confirm?action=resume&session=s1", header: who})
	require.Equal(t, http.StatusOK, status, page)
	csrf := csrfField.FindStringSubmatch(page)[1]

	form := url.Values{"action": {"resume"}, "session": {"s1"}}
	status, _, _ = b.do(t, request{method: http.MethodPost, path: "/act", form: form, header: who})
	require.Equal(t, http.StatusForbidden, status, "no CSRF token")
	form.Set("csrf", csrf)
	status, _, _ = b.do(t, request{method: http.MethodPost, path: "/act", form: form, header: map[string]string{"X-Forwarded-User": "bob"}})
	require.Equal(t, http.StatusForbidden, status, "another user's CSRF token")
	require.Empty(t, ops.resumed)
	status, _, page = b.do(t, request{method: http.MethodPost, path: "/act", form: form, header: who})
	require.Equal(t, http.StatusOK, status, page)
	require.Equal(t, []string{"s1"}, ops.resumed)
	require.Contains(t, logs.String(), `"user":"alice@example.com","via":"proxy","action":"resume"`)

	status, _, _ = b.do(t, request{path: "/"})
	require.Equal(t, http.StatusSeeOther, status, "no header: to the login form")
}

// TestAccessLogNamesNoSession: the access log names the route, not the path or query that
// carry session ids.
func TestAccessLogNamesNoSession(t *testing.T) {
	t.Parallel()
	ops := &fakeOps{sessions: []operator.SessionInfo{{SessionID: "tenant-secret-77"}}}
	srv, logs := newFakeConsole(t, console.Config{Operations: ops, ReadToken: readToken})
	b := &bundle{http: srv}
	auth := map[string]string{"Authorization": "Bearer " + readToken}
	for _, path := range []string{"/sessions?prefix=tenant-secret-77", "/deadletters?session=tenant-secret-77&reason=HandlerFailed", "/confirm?action=resume&session=tenant-secret-77"} {
		b.do(t, request{path: path, header: auth})
	}
	out := logs.String()
	require.Contains(t, out, `"msg":"console: request","method":"GET","route":"GET /sessions","status":200`)
	require.Contains(t, out, `"route":"GET /confirm","status":403`)
	require.NotContains(t, out, "tenant-secret-77")
}

// TestOverviewAndSessionsPaging: the overview counts by state and by dead-letter reason; the
// sessions list pages through a prefix filter.
func TestOverviewAndSessionsPaging(t *testing.T) {
	t.Parallel()
	ops := &fakeOps{}
	for i := range 130 {
		id := fmt.Sprintf("b-%03d", i)
		if i%2 == 0 {
			id = "a-" + id
		}
		ops.sessions = append(ops.sessions, operator.SessionInfo{SessionID: id})
	}
	parkedAt := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ops.sessions = append(ops.sessions, operator.SessionInfo{SessionID: "p-1", Parked: &operator.ParkedInfo{Sequence: 4, At: parkedAt}})
	slices.SortFunc(ops.sessions, func(a, b operator.SessionInfo) int { return strings.Compare(a.SessionID, b.SessionID) })
	srv, _ := newFakeConsole(t, console.Config{Operations: ops, ReadToken: readToken})
	b := &bundle{http: srv}
	auth := map[string]string{"Authorization": "Bearer " + readToken}

	status, _, body := b.do(t, request{path: "/api/overview", header: auth})
	require.Equal(t, http.StatusOK, status, body)
	var ov struct {
		Counts  map[string]int `json:"counts"`
		Reasons []struct {
			Reason string `json:"reason"`
			Count  int    `json:"count"`
		} `json:"dead_letters_by_reason"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &ov))
	require.Equal(t, 1, ov.Counts["parked"])
	require.Equal(t, 3, ov.Counts["dead_letters"])
	require.Len(t, ov.Reasons, 2)
	require.Equal(t, 2, ov.Reasons[0].Count)

	tests := []struct {
		name      string
		query     string
		wantFirst string
		wantCount int
		wantNext  string
	}{
		{"all, first page", "", "a-b-000", 50, "after=a-b-098"},
		{"all, third page", "after=b-035", "b-037", 48, ""},
		{"prefix, first page", "prefix=a-", "a-b-000", 50, "after=a-b-098"},
		{"prefix, second page", "prefix=a-&after=a-b-098", "a-b-100", 15, ""},
		{"state", "state=parked", "p-1", 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			status, _, page := b.do(t, request{path: "/sessions?" + tt.query, header: auth})
			require.Equal(t, http.StatusOK, status, page)
			require.Equal(t, tt.wantCount, strings.Count(page, `<tr><td><a href="/session?id=`), page)
			require.Contains(t, page, `href="/session?id=`+tt.wantFirst+`"`)
			if tt.wantNext == "" {
				require.NotContains(t, page, "Next page")
			} else {
				require.Contains(t, page, tt.wantNext)
			}
		})
	}
	status, _, _ = b.do(t, request{path: "/sessions?state=bogus", header: auth})
	require.Equal(t, http.StatusBadRequest, status)
}

// TestOverviewIsReadAtMostEveryTTL: the overview's polls are served from the last reading for a
// while; time passing or an action reads it anew.
func TestOverviewIsReadAtMostEveryTTL(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ops := &fakeOps{sessions: []operator.SessionInfo{{SessionID: "s1", Parked: &operator.ParkedInfo{Sequence: 2}}}}
	srv, _ := newFakeConsole(t, console.Config{Operations: ops, Token: actToken, Clock: clk})
	b := &bundle{http: srv}
	auth := map[string]string{"Authorization": "Bearer " + actToken}
	poll := func() {
		status, _, body := b.do(t, request{path: "/api/overview", header: auth})
		require.Equal(t, http.StatusOK, status, body)
	}
	poll()
	poll()
	require.EqualValues(t, 1, ops.lists.Load(), "the second poll is served from the first")
	clk.Advance(10 * time.Second)
	poll()
	require.EqualValues(t, 2, ops.lists.Load(), "read anew after the TTL")
	status, _, body := b.do(t, request{method: http.MethodPost, path: "/act", form: url.Values{"action": {"resume"}, "session": {"s1"}}, header: auth})
	require.Equal(t, http.StatusOK, status, body)
	poll()
	require.EqualValues(t, 3, ops.lists.Load(), "read anew after an action")
}

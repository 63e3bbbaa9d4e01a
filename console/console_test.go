package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/console"
	"github.com/seqbus/seqbus/operator"
)

func TestNewRefusesNoAuthentication(t *testing.T) {
	t.Parallel()
	op := &operator.Operator{}
	tests := []struct {
		name    string
		cfg     console.Config
		wantErr string
	}{
		{"no way to authenticate", console.Config{Operations: op}, "no way to authenticate"},
		{"no operations", console.Config{Token: actToken}, "Operations is required"},
		{"same tokens", console.Config{Operations: op, Token: actToken, ReadToken: actToken}, "must differ"},
		{"act token", console.Config{Operations: op, Token: actToken}, ""},
		{"read token", console.Config{Operations: op, ReadToken: readToken}, ""},
		{"proxy header", console.Config{Operations: op, ProxyUserHeader: "X-Forwarded-User"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := console.New(tt.cfg)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// TestRefusedChangesNothing: requests without a token, with the read token on an action, with a
// login lacking the act role, a cross-site POST and POSTs without the right CSRF token are
// refused, and the parked session, its deferred messages and its dead letter are as they were.
// The same action with the act role and its CSRF token then resumes the session.
func TestRefusedChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.park(t, "tenant-a", 3, 2, "payload", "handler bug")
	before := b.state(t, "tenant-a")
	require.NotNil(t, before.Parked)
	deadBefore := b.deadLetters(t)
	require.Equal(t, []string{"tenant-a/2"}, deadBefore)
	brokerBefore := b.atBroker(t, "tenant-a")
	require.Equal(t, []string{"3 deferred"}, brokerBefore)

	act := b.login(t, actToken)
	read := b.login(t, readToken)
	csrf := b.csrf(t, act, "resume", "tenant-a")
	resume := func(extra url.Values) url.Values {
		v := url.Values{"action": {"resume"}, "session": {"tenant-a"}}
		for k, vs := range extra {
			v[k] = vs
		}
		return v
	}
	post := func(form url.Values) request { return request{method: http.MethodPost, path: "/act", form: form} }
	withCookie := func(rq request, c string) request { rq.cookie = c; return rq }
	withHeader := func(rq request, h map[string]string) request { rq.header = h; return rq }

	t.Run("refused", func(t *testing.T) {
		tests := []struct {
			name   string
			rq     request
			status int
		}{
			{"no token, page", request{path: "/"}, http.StatusSeeOther},
			{"no token, API", request{path: "/api/overview"}, http.StatusUnauthorized},
			{"no token, action", post(resume(nil)), http.StatusUnauthorized},
			{"no token, confirmation", request{path: "/confirm?action=resume&session=tenant-a"}, http.StatusSeeOther},
			{"wrong Bearer token", withHeader(post(resume(nil)), map[string]string{"Authorization": "Bearer " + actToken + "x"}), http.StatusUnauthorized},
			{"Basic instead of Bearer", withHeader(post(resume(nil)), map[string]string{"Authorization": "Basic " + actToken}), http.StatusUnauthorized},
			{"read token on an action", withHeader(post(resume(nil)), map[string]string{"Authorization": "Bearer " + readToken}), http.StatusForbidden},
			{"read token on a confirmation", withHeader(request{path: "/confirm?action=resume&session=tenant-a"}, map[string]string{"Authorization": "Bearer " + readToken}), http.StatusForbidden},
			{"read login on an action", withCookie(post(resume(url.Values{"csrf": {csrf}})), read), http.StatusForbidden},
			{"act login without CSRF token", withCookie(post(resume(nil)), act), http.StatusForbidden},
			{"act login with a wrong CSRF token", withCookie(post(resume(url.Values{"csrf": {csrf + "x"}})), act), http.StatusForbidden},
			{"act login, another login's CSRF token", withCookie(post(resume(url.Values{"csrf": {b.csrf(t, b.login(t, actToken), "resume", "tenant-a")}})), act), http.StatusForbidden},
			{"forged cross-site POST", withHeader(withCookie(post(resume(url.Values{"csrf": {csrf}})), act),
				map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}), http.StatusForbidden},
			{"cross-origin POST without Sec-Fetch-Site", withHeader(withCookie(post(resume(url.Values{"csrf": {csrf}})), act),
				map[string]string{"Origin": "https://evil.example"}), http.StatusForbidden},
			{"unknown login cookie", withCookie(post(resume(url.Values{"csrf": {csrf}})), "forged"), http.StatusUnauthorized},
			{"proxy header while not enabled", withHeader(post(resume(nil)), map[string]string{"X-Forwarded-User": "mallory"}), http.StatusUnauthorized},
			{"GET cannot act", withCookie(request{path: "/act?action=resume&session=tenant-a&csrf=" + url.QueryEscape(csrf)}, act), http.StatusMethodNotAllowed},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				status, h, body := b.do(t, tt.rq)
				require.Equal(t, tt.status, status, body)
				require.Equal(t, "DENY", h.Get("X-Frame-Options"))
			})
		}
	})

	after := b.state(t, "tenant-a")
	require.Equal(t, before.Parked, after.Parked, "still parked")
	require.Equal(t, before.Next, after.Next)
	require.Equal(t, before.Deferred, after.Deferred, "deferred messages as they were")
	require.Equal(t, deadBefore, b.deadLetters(t), "the dead letter is still there")
	require.Equal(t, brokerBefore, b.atBroker(t, "tenant-a"), "the session's messages at the broker as they were")
	require.NotContains(t, b.logs.String(), `"msg":"console: action"`)

	status, _, body := b.do(t, withCookie(post(resume(url.Values{"csrf": {csrf}})), act))
	require.Equal(t, http.StatusOK, status, body)
	require.Nil(t, b.state(t, "tenant-a").Parked, "resumed")
	require.Contains(t, b.logs.String(), `"msg":"console: action","user":"login:act","via":"login","action":"resume","sessions":["tenant-a"]`)
}

// TestBearerActs: a script acts with the act token as a Bearer token, and gets JSON; a session
// named twice is replayed once.
func TestBearerActs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.park(t, "tenant-b", 2, 1, "payload", "handler bug")
	status, _, body := b.do(t, request{method: http.MethodPost, path: "/act",
		form:   url.Values{"action": {"replay"}, "session": {"tenant-b", "tenant-b"}},
		header: map[string]string{"Authorization": "Bearer " + actToken}})
	require.Equal(t, http.StatusOK, status, body)
	var res []operator.DLQReplayResult
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	require.Len(t, res, 1)
	require.Equal(t, []operator.ReplayedSession{{SessionID: "tenant-b", Sequences: []int64{1}, Sent: 1, Completed: 1}}, res[0].Sessions)
	require.Empty(t, b.deadLetters(t))
	require.Contains(t, b.logs.String(), `"user":"token:act","via":"bearer","action":"replay"`)
}

// TestBodyShownAsText: a body and an error with HTML and script in them are shown escaped.
func TestBodyShownAsText(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const body = `<script>alert("body")</script><img src=x onerror=alert(1)>`
	const failure = `<b onclick="x()">bad</b><script>alert(2)</script>`
	b.park(t, "tenant-c", 2, 1, body, failure)
	dl, err := b.op.DLQList(testCtx(t), operator.DLQListParams{})
	require.NoError(t, err)
	require.Len(t, dl.Messages, 1)

	auth := map[string]string{"Authorization": "Bearer " + readToken}
	for _, path := range []string{"/deadletter?seq=" + strconv.FormatInt(dl.Messages[0].BrokerSequence, 10), "/session?id=tenant-c", "/"} {
		status, h, page := b.do(t, request{path: path, header: auth})
		require.Equal(t, http.StatusOK, status, page)
		require.Equal(t, "text/html; charset=utf-8", h.Get("Content-Type"))
		require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
		require.Contains(t, h.Get("Content-Security-Policy"), "script-src 'self'")
		require.NotContains(t, h.Get("Content-Security-Policy"), "unsafe-inline")
		require.NotContains(t, page, "<script>alert", path)
		require.NotContains(t, page, "<b onclick", path)
		require.NotContains(t, page, "<img src=x", path)
		require.Contains(t, page, "&lt;b onclick=&#34;x()&#34;&gt;bad&lt;/b&gt;", path)
		if strings.HasPrefix(path, "/deadletter") {
			require.Contains(t, page, `&lt;script&gt;alert(&#34;body&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;`)
		}
		// The only script is the console's own.
		require.Equal(t, 1, strings.Count(page, "<script"), path)
	}
}

// heldShow is the operator with a session that holds messages in the state store.
type heldShow struct {
	*operator.Operator
	held *operator.HeldSummary
}

func (h heldShow) Show(ctx context.Context, p operator.ShowParams) (*operator.ShowResult, error) {
	res, err := h.Operator.Show(ctx, p)
	if err == nil {
		res.Held = h.held
	}
	return res, err
}

func TestSessionPageListsHeldMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	at := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	con, err := console.New(console.Config{Operations: heldShow{b.op, &operator.HeldSummary{
		Messages: 2, Bytes: 300,
		Listed:      []operator.HeldInfo{{Sequence: 7, MessageID: "<b>m7</b>", BrokerSequence: 70, Size: 100, HeldAt: at}},
		DeadLetters: []operator.HeldInfo{{Sequence: 5, Reason: "HandlerFailed", Description: "<i>boom</i>", DeadAt: &at}},
	}}, Entity: queue, ReadToken: readToken})
	require.NoError(t, err)
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)

	req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, srv.URL+"/session?id=tenant-h", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+readToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	page := string(body)
	require.Equal(t, http.StatusOK, resp.StatusCode, page)
	require.Contains(t, page, "Held in the state store")
	require.Contains(t, page, "2 messages, 300 bytes")
	require.Contains(t, page, "&lt;b&gt;m7&lt;/b&gt;")
	require.Contains(t, page, "2026-11-29T03:00:00Z")
	require.Contains(t, page, "Dead letters held in the state store")
	require.Contains(t, page, "&lt;i&gt;boom&lt;/i&gt;")
	require.NotContains(t, page, "<b>m7</b>")
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/internal/testio"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	"github.com/seqbus/seqbus/sessionstate/postgres"
	"github.com/seqbus/seqbus/sqsadapter"
	"github.com/seqbus/seqbus/worker"
)

// TestConsoleOnSQS runs `worker console` with SEQBUS_PROVIDER=sqs as an operator runs it next to
// the workers of an SQS FIFO queue, with the settings in the environment. Workers leave four
// groups stuck: "poisoned" parked on a message that went to the redrive dead-letter queue,
// "held" parked on a message the state store held (its dead letter stays in the store), "gap"
// waiting for a sequence that never comes and "retried" released until a retry an hour away.
// The console shows them with the sqs probe and the queue's name; a session's page says the
// broker cannot list its messages; the dead letters of both places are listed and one opens.
// The read role changes nothing. With the act role, through the confirmation forms as a browser
// posts them, a replay sends the copies back to the queue and removes the dead letters, and
// resume, skip and retry-now let a worker finish every group in order.
func TestConsoleOnSQS(t *testing.T) {
	pgtest.RequireServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	endpoint, client, queueURL := sqsQueue(t, "console")
	dlq, err := client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("console-dlq.fifo")})
	require.NoError(t, err)
	dlqURL := aws.ToString(dlq.QueueUrl)
	entity, err := worker.SQSEntity(queueURL)
	require.NoError(t, err)
	require.Equal(t, "sqs:000000000000/console.fifo", entity)
	pool, schema := pgtest.NewPoolWithSchema(t, nil)
	store, err := postgres.New(pool, &postgres.Config{Entity: entity})
	require.NoError(t, err)
	target := &groupsTarget{failing: map[string]bool{"poisoned/2": true, "held/3": true, "retried/1": true}, handled: map[string][]int64{}}
	hs := httptest.NewServer(target)
	t.Cleanup(hs.Close)

	clearEnv(t)
	for _, kv := range awsEnv(t, endpoint) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	setEnv(t, map[string]string{
		"SEQBUS_PROVIDER": "sqs", "SEQBUS_SQS_QUEUE_URL": queueURL, "SEQBUS_STATE_STORE": "postgres",
		"SEQBUS_DATABASE_URL": pgtest.SchemaDSN(schema), "SEQBUS_MIGRATE_ON_START": "true", "SEQBUS_EARLY_MESSAGES": "store",
		"SEQBUS_SESSION_IDLE_TIMEOUT": "1s", "SEQBUS_SWEEP_INTERVAL": "200ms", "SEQBUS_SHUTDOWN_TIMEOUT": "10s",
		"SEQBUS_HANDLER": "http", "SEQBUS_HANDLER_URL": hs.URL, "SEQBUS_POISON_POLICY": "park", "SEQBUS_MAX_HANDLER_ATTEMPTS": "1",
	})
	// waitStates waits until the stored states satisfy ok.
	waitStates := func(w *inProcess, what string, ok func(map[string]*sequencer.State) bool) {
		t.Helper()
		waitFor(t, time.Minute, func() bool {
			entries, err := store.List(ctx, sessionstate.ListParams{Filter: sessionstate.Filter{Ended: true}})
			if err != nil {
				return false // the worker has not migrated the schema yet
			}
			states := map[string]*sequencer.State{}
			for _, e := range entries {
				states[e.SessionID] = e.State
			}
			return ok(states)
		}, func() string { return what + "; worker: " + w.stderr.String() })
	}
	waitsOn2 := func(st *sequencer.State) bool { return st != nil && st.Next == 2 && len(st.Deferred) == 1 }

	// The workers leave the groups stuck. "held" gets its 2 once the store holds its 3.
	sendGroup(t, client, queueURL, "poisoned", 3, 1, 2, 3)
	sendGroup(t, client, queueURL, "held", 3, 1, 3)
	sendGroup(t, client, queueURL, "gap", 3, 1, 3)
	w := startInProcess(ctx, t, "run")
	waitStates(w, "held and gap wait for 2", func(st map[string]*sequencer.State) bool { return waitsOn2(st["held"]) && waitsOn2(st["gap"]) })
	sendGroup(t, client, queueURL, "held", 3, 2)
	waitStates(w, "poisoned and held parked", func(st map[string]*sequencer.State) bool {
		return st["poisoned"] != nil && st["poisoned"].Parked != nil && st["held"] != nil && st["held"].Parked != nil
	})
	w.stop(t)
	// A worker that spends the wait for a retry with the session released.
	setEnv(t, map[string]string{"SEQBUS_MAX_HANDLER_ATTEMPTS": "2", "SEQBUS_RETRY_RELEASE_AFTER": "1", "SEQBUS_RETRY_BASE": "1h", "SEQBUS_RETRY_MAX": "1h"})
	sendGroup(t, client, queueURL, "retried", 2, 1, 2)
	w = startInProcess(ctx, t, "run")
	waitStates(w, "retried released until its retry", func(st map[string]*sequencer.State) bool {
		return st["retried"] != nil && st["retried"].Retrying != nil
	})
	w.stop(t)
	require.Equal(t, []string{"1", "0"}, queueCounts(t, client, dlqURL), "poisoned's message is in the dead-letter queue")
	require.Equal(t, []string{"0", "0"}, queueCounts(t, client, queueURL), "what waits is held in the store")

	// The console, on a free port.
	const actToken, readToken = "act-token-0123456789abcdef", "read-token-0123456789abcdef"
	setEnv(t, map[string]string{"SEQBUS_CONSOLE_ADDR": "127.0.0.1:0", "SEQBUS_CONSOLE_TOKEN": actToken, "SEQBUS_CONSOLE_READ_TOKEN": readToken})
	cp := startInProcess(ctx, t, "console")
	con := &consoleClient{t: t, ctx: ctx, base: "http://" + cp.listeningAt(t)}

	// The overview: the probes, the queue's name, the stuck groups, the dead letters of both places.
	var ov struct {
		Counts    map[string]int `json:"counts"`
		Reachable []struct {
			Name  string `json:"name"`
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		} `json:"reachable"`
	}
	con.getJSON("/api/overview", readToken, &ov)
	require.Len(t, ov.Reachable, 2)
	require.Equal(t, "sqs", ov.Reachable[0].Name)
	require.True(t, ov.Reachable[0].OK, ov.Reachable[0].Error)
	require.Equal(t, "postgres", ov.Reachable[1].Name)
	require.True(t, ov.Reachable[1].OK, ov.Reachable[1].Error)
	require.Equal(t, map[string]int{"parked": 2, "blocked": 0, "retrying": 1, "gap": 1, "dead_letters": 2}, ov.Counts)
	page := con.get("/", readToken, "")
	require.Contains(t, page, `<span class="entity">sqs:000000000000/console.fifo</span>`)
	require.Contains(t, page, "sqs: reachable")
	require.Contains(t, page, "postgres: reachable")

	// The sessions, and a session's page.
	page = con.get("/sessions", readToken, "")
	for _, id := range []string{"poisoned", "held", "gap", "retried"} {
		require.Contains(t, page, `<a href="/session?id=`+id+`">`, id)
	}
	page = con.get("/session?id=poisoned", readToken, "")
	require.Contains(t, page, "the broker cannot list a session&#39;s messages (SQS has no peek)")
	require.Contains(t, page, "sequence 2, broker sequence")
	require.Contains(t, page, "Held in the state store", "its 3 waits in the store")
	require.Regexp(t, `<a href="/deadletter\?seq=\d+">2</a>`, page, "its dead letter")
	require.Contains(t, con.get("/session?id=held", readToken, ""), "Dead letters held in the state store")
	require.Contains(t, con.get("/session?id=gap", readToken, ""), "<dt>Set aside</dt><dd>1 (lowest 3)", "its 3, held in the store")

	// The dead letters: the queue's, which opens, and the store's.
	page = con.get("/deadletters", readToken, "")
	m := regexp.MustCompile(`href="/session\?id=poisoned">poisoned</a></td><td><a href="/deadletter\?seq=(\d+)">2</a></td><td>HandlerFailed</td>`).FindStringSubmatch(page)
	require.NotNil(t, m, page)
	require.Regexp(t, `href="/session\?id=held">held</a></td><td>3</td><td>HandlerFailed</td>`, page)
	page = con.get("/deadletter?seq="+m[1], readToken, "")
	require.Contains(t, page, `<a href="/session?id=poisoned">poisoned</a>`)
	require.Contains(t, page, "status 500: handler bug")
	require.Contains(t, page, `{&#34;n&#34;:2}`, "the body")
	require.Equal(t, []string{"1", "0"}, queueCounts(t, client, dlqURL), "reading gave the dead letter back")

	// The read role acts on nothing, by token or by login.
	replayPoisoned := url.Values{"action": {"replay"}, "session": {"poisoned"}}
	status, body := con.do(http.MethodPost, "/act", replayPoisoned, readToken, "")
	require.Equal(t, http.StatusForbidden, status, body)
	readLogin := con.login(readToken)
	status, body = con.do(http.MethodGet, "/confirm?"+replayPoisoned.Encode(), nil, "", readLogin)
	require.Equal(t, http.StatusForbidden, status, body)
	require.Equal(t, []string{"1", "0"}, queueCounts(t, client, dlqURL))
	require.Equal(t, []string{"0", "0"}, queueCounts(t, client, queueURL))

	// The act role, as a browser: the handler is fixed; both groups' dead letters are ticked on
	// the dead letters page and replayed, then each group is resumed, the gap skipped and the
	// retry made due.
	target.fix()
	act := con.login(actToken)
	for id, buttons := range map[string][]string{"poisoned": {"resume", "replay", "skip"}, "held": {"resume", "replay", "skip"}, "gap": {"skip"}, "retried": {"retry-now", "skip"}} {
		page = con.get("/session?id="+id, "", act)
		for _, b := range buttons {
			require.Contains(t, page, `<button type="submit" id="`+b+`">`, "%s offers %s", id, b)
		}
	}
	page = con.get("/deadletters", "", act)
	ticked := url.Values{"action": {"replay"}}
	for _, m := range regexp.MustCompile(`<input type="checkbox" name="session" value="([^"]+)"`).FindAllStringSubmatch(page, -1) {
		ticked.Add("session", m[1])
	}
	require.Equal(t, []string{"poisoned", "held"}, ticked["session"])
	page = con.confirm(act, ticked)
	require.Contains(t, page, "Done for <a href=\"/session?id=poisoned\">poisoned</a>, <a href=\"/session?id=held\">held</a>.")
	require.Equal(t, []string{"0", "0"}, queueCounts(t, client, dlqURL), "the dead letter is removed")
	require.Equal(t, []string{"2", "0"}, queueCounts(t, client, queueURL), "the copies of both are back in the queue")
	require.Contains(t, con.get("/deadletters", "", act), "No dead letter matches.")
	for _, a := range []url.Values{
		{"action": {"resume"}, "session": {"poisoned"}},
		{"action": {"resume"}, "session": {"held"}},
		{"action": {"skip"}, "session": {"gap"}},
		{"action": {"retry-now"}, "session": {"retried"}},
	} {
		require.Contains(t, con.confirm(act, a), "Done for", a)
	}
	var after struct {
		Counts   map[string]int `json:"counts"`
		Overview struct {
			Gap []struct {
				SessionID string `json:"session_id"`
			} `json:"gap"`
		} `json:"overview"`
	}
	con.getJSON("/api/overview?sessions=1", readToken, &after) // an action made it read anew
	require.Equal(t, map[string]int{"parked": 0, "blocked": 0, "retrying": 1, "gap": 1, "dead_letters": 0}, after.Counts,
		"the retry is due, not made yet; poisoned waits for its copy with its 3 held")
	require.Len(t, after.Overview.Gap, 1)
	require.Equal(t, "poisoned", after.Overview.Gap[0].SessionID)

	// A worker finishes every group, in order.
	setEnv(t, map[string]string{"SEQBUS_MAX_HANDLER_ATTEMPTS": "1", "SEQBUS_RETRY_RELEASE_AFTER": "0"})
	w = startInProcess(ctx, t, "run")
	want := map[string][]int64{"poisoned": {1, 2, 3}, "held": {1, 2, 3}, "gap": {1, 3}, "retried": {1, 2}}
	waitFor(t, time.Minute, func() bool { return target.handledAll(want) },
		func() string { return fmt.Sprintf("handled %v; worker: %s", target.snapshot(), w.stderr.String()) })
	w.stop(t)
	require.Equal(t, want, target.snapshot(), "each once, in order")
	cp.stop(t)
	for _, a := range []string{"replay", "resume", "skip", "retry-now"} {
		require.Contains(t, cp.stderr.String(), `"msg":"console: action","user":"login:act","via":"login","action":"`+a+`"`)
	}
	require.NotContains(t, cp.stderr.String(), actToken)
	require.NotContains(t, cp.stderr.String(), readToken)
}

// setEnv sets the environment variables of kv for the test.
func setEnv(t *testing.T, kv map[string]string) {
	for k, v := range kv {
		t.Setenv(k, v)
	}
}

// waitFor polls cond until it holds, and fails with what() when it still does not after d.
func waitFor(t *testing.T, d time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sendGroup sends the sequences of group to the queue, in the order given; last is the group's
// last sequence.
func sendGroup(t *testing.T, client *awssqs.Client, queueURL, group string, last int64, seqs ...int64) {
	t.Helper()
	sender, err := sqsadapter.NewSender(client, queueURL)
	require.NoError(t, err)
	var msgs []*azservicebus.Message
	for _, seq := range seqs {
		id := fmt.Sprintf("%s-%d", group, seq)
		msgs = append(msgs, &azservicebus.Message{SessionID: &group, MessageID: &id, Body: fmt.Appendf(nil, `{"n":%d}`, seq),
			ApplicationProperties: map[string]any{"Sequence": seq, "IsLast": seq == last}})
	}
	_, err = sender.SendMessages(t.Context(), msgs)
	require.NoError(t, err)
}

// queueCounts returns the approximate visible and in-flight messages of queueURL.
func queueCounts(t *testing.T, client *awssqs.Client, queueURL string) []string {
	t.Helper()
	out, err := client.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{QueueUrl: &queueURL, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	require.NoError(t, err)
	return []string{out.Attributes["ApproximateNumberOfMessages"], out.Attributes["ApproximateNumberOfMessagesNotVisible"]}
}

// groupsTarget is the http handler's target: it records each group's sequences in the order
// handled and answers 500 for the "group/sequence" keys of failing, until fixed.
type groupsTarget struct {
	mu      sync.Mutex
	failing map[string]bool
	handled map[string][]int64
}

func (g *groupsTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	group, seq := r.Header.Get(handler.HeaderSessionID), r.Header.Get(handler.HeaderSequence)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failing[group+"/"+seq] {
		http.Error(w, "handler bug", http.StatusInternalServerError)
		return
	}
	n, err := strconv.ParseInt(seq, 10, 64)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	g.handled[group] = append(g.handled[group], n)
}

func (g *groupsTarget) fix() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failing = map[string]bool{}
}

func (g *groupsTarget) snapshot() map[string][]int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string][]int64{}
	for k, v := range g.handled {
		out[k] = slices.Clone(v)
	}
	return out
}

// handledAll reports whether each group of want was handled at least as often as want lists.
func (g *groupsTarget) handledAll(want map[string][]int64) bool {
	got := g.snapshot()
	for k, v := range want {
		if len(got[k]) < len(v) {
			return false
		}
	}
	return true
}

// inProcess is a command of the CLI running in this process with the environment as set.
type inProcess struct {
	stderr *testio.SyncBuffer
	sigs   chan os.Signal
	done   chan struct{} // closed at the exit, code set
	code   int
	once   sync.Once
}

// startInProcess runs the command args; it is stopped when the test ends, if not before.
func startInProcess(ctx context.Context, t *testing.T, args ...string) *inProcess {
	t.Helper()
	p := &inProcess{stderr: &testio.SyncBuffer{}, sigs: make(chan os.Signal, 1), done: make(chan struct{})}
	c := newCLI(io.Discard, p.stderr)
	c.signals = func() (<-chan os.Signal, func()) { return p.sigs, func() {} }
	go func() {
		p.code = c.run(ctx, args)
		close(p.done)
	}()
	t.Cleanup(func() { p.terminate() })
	return p
}

// exited reports whether the command has exited.
func (p *inProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// terminate sends SIGTERM, once, and waits for the exit (up to 30s); it returns the exit code,
// -1 when the command did not stop.
func (p *inProcess) terminate() int {
	p.once.Do(func() { p.sigs <- syscall.SIGTERM })
	select {
	case <-p.done:
		return p.code
	case <-time.After(30 * time.Second):
		return -1
	}
}

// stop stops the command and requires exit code 0.
func (p *inProcess) stop(t *testing.T) {
	t.Helper()
	require.Equal(t, 0, p.terminate(), p.stderr.String())
}

// listeningAt waits for the console to listen and returns its address; it fails at once when
// the console exits instead.
func (p *inProcess) listeningAt(t *testing.T) string {
	t.Helper()
	var addr string
	waitFor(t, 20*time.Second, func() bool {
		if m := listening.FindStringSubmatch(p.stderr.String()); m != nil {
			addr = m[1]
			return true
		}
		return p.exited()
	}, func() string { return "the console does not listen: " + p.stderr.String() })
	require.NotEmpty(t, addr, "the console exited with code %d: %s", p.code, p.stderr.String())
	return addr
}

// consoleClient asks the console as a script (a Bearer token) or a browser (a login cookie)
// does.
type consoleClient struct {
	t    *testing.T
	ctx  context.Context
	base string
}

// do sends one request without following redirects; a POST carries form as a browser posts it
// from the console's own page.
func (c *consoleClient) do(method, path string, form url.Values, bearer, cookie string) (int, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(c.ctx, method, c.base+path, body)
	require.NoError(c.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if method == http.MethodPost && cookie != "" {
		req.Header.Set("Origin", c.base)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: "__Host-seqbus-console", Value: cookie})
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(c.t, err)
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp.StatusCode, string(data)
}

// get answers a page that must be 200.
func (c *consoleClient) get(path, bearer, cookie string) string {
	c.t.Helper()
	status, body := c.do(http.MethodGet, path, nil, bearer, cookie)
	require.Equal(c.t, http.StatusOK, status, body)
	return body
}

func (c *consoleClient) getJSON(path, bearer string, v any) {
	c.t.Helper()
	require.NoError(c.t, json.Unmarshal([]byte(c.get(path, bearer, "")), v))
}

// login logs in with token through the login form and returns the login cookie's value.
func (c *consoleClient) login(token string) string {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, c.base+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(c.t, err)
	require.NoError(c.t, resp.Body.Close())
	require.Equal(c.t, http.StatusSeeOther, resp.StatusCode)
	for _, ck := range resp.Cookies() {
		if ck.Name == "__Host-seqbus-console" {
			return ck.Value
		}
	}
	c.t.Fatal("no login cookie set")
	return ""
}

var hiddenField = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// confirm opens the confirmation of the action asked by ask (as its button's form asks) and
// posts its form as the browser does; it returns the done page.
func (c *consoleClient) confirm(cookie string, ask url.Values) string {
	c.t.Helper()
	page := c.get("/confirm?"+ask.Encode(), "", cookie)
	start := strings.Index(page, `<form method="post" action="/act"`)
	require.GreaterOrEqual(c.t, start, 0, page)
	form := url.Values{}
	for _, m := range hiddenField.FindAllStringSubmatch(page[start:], -1) {
		form.Add(m[1], html.UnescapeString(m[2]))
	}
	require.NotEmpty(c.t, form.Get("csrf"), page)
	status, body := c.do(http.MethodPost, "/act", form, "", cookie)
	require.Equal(c.t, http.StatusOK, status, body)
	return body
}

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/operator"
)

// buggyHandler is the application behind the http handler: it fails the sequences in bug (keys
// "session/sequence") with status 500 until fix is called, and records every sequence it
// handled successfully, per session, in the order it handled them.
type buggyHandler struct {
	mu      sync.Mutex
	bug     map[string]bool
	fixed   bool
	handled map[string][]int64
}

func newBuggyHandler(bug ...string) *buggyHandler {
	h := &buggyHandler{bug: map[string]bool{}, handled: map[string][]int64{}}
	for _, k := range bug {
		h.bug[k] = true
	}
	return h
}

func (h *buggyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get(handler.HeaderSessionID)
	seq, err := strconv.ParseInt(r.Header.Get(handler.HeaderSequence), 10, 64)
	if err != nil {
		http.Error(w, "no sequence", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.fixed && h.bug[fmt.Sprintf("%s/%d", sid, seq)] {
		http.Error(w, "handler bug", http.StatusInternalServerError)
		return
	}
	h.handled[sid] = append(h.handled[sid], seq)
}

func (h *buggyHandler) fix() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fixed = true
}

func (h *buggyHandler) sequences(id string) []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.handled[id])
}

// complete reports whether every session in ids had 1..n handled.
func (h *buggyHandler) complete(ids []string, n int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		if len(h.handled[id]) < n {
			return false
		}
	}
	return true
}

func (h *buggyHandler) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprint(h.handled)
}

// cliResult is one run of an operator command.
type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs the worker binary with args to its end.
func runCLI(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	cmd := exec.CommandContext(ctx, workerBin, args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("worker %s: %v", strings.Join(args, " "), err)
	}
	return cliResult{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
}

// cliJSON runs an operator command with --json, requires success and decodes its result.
func cliJSON[T any](t *testing.T, env []string, args ...string) T {
	t.Helper()
	r := runCLI(t, env, append(args, "--json")...)
	require.Equal(t, 0, r.code, "worker %s: %s", strings.Join(args, " "), r.stderr)
	var v T
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), r.stdout)
	return v
}

// requireNoneListed runs `worker sessions list FLAG` and requires that it lists no session
// whose state is selected. A session the listing shows busy (with Service Bus session state, a
// worker or the sweeper held its lock at that instant) has an unknown state there;
// `worker sessions show ID --wait` reads it, and it must not be selected either.
func requireNoneListed(t *testing.T, env []string, flag string, selected func(operator.SessionInfo) bool) {
	t.Helper()
	for _, s := range cliJSON[operator.ListResult](t, env, "sessions", "list", flag).Sessions {
		if s.Busy {
			s = cliJSON[operator.ShowResult](t, env, "sessions", "show", s.SessionID, "--wait", "30s").Session
		}
		require.False(t, selected(s), "sessions list %s: %+v", flag, s)
	}
}

func isParked(s operator.SessionInfo) bool   { return s.Parked != nil }
func isRetrying(s operator.SessionInfo) bool { return s.RetryAt != nil }

// TestCanonicalRecovery is the canonical recovery of docs/operations.md, with each state store: a handler bug parks
// sessions; the fix is deployed; `worker dlq replay --all`; `worker sessions resume
// --all-parked`; every session completes in order, nothing lost, nothing handled twice. The
// queue has duplicate detection on, which would drop a copy that kept its original MessageId.
//
// The two commands run back to back, as a user runs them, with the workers' default idle
// timeout: a parked session that receives its copy is held by a worker for that long, and the
// resume waits for it rather than pass it over and leave it parked.
// The workers run throughout ("running"), are stopped for both commands and started after them
// ("stopped"), or are stopped for the replay and started again right before the resume
// ("restarted").
func TestCanonicalRecovery(t *testing.T) {
	t.Parallel()
	const sessions, messages = 5, 8
	for _, store := range stores {
		for _, mode := range []string{"running", "stopped", "restarted"} {
			t.Run(store+"/"+mode, func(t *testing.T) {
				t.Parallel()
				canonicalRecovery(t, store, mode, sessions, messages)
			})
		}
	}
}

func canonicalRecovery(t *testing.T, store, mode string, sessions, messages int) {
	f := newFixtureWith(t, broker.EntityProperties{RequiresDuplicateDetection: true})
	ids := sessionIDs(sessions)
	// The bug: sessions 0, 1 and 3 fail at one sequence each.
	poisoned := map[string]int64{ids[0]: 3, ids[1]: 1, ids[3]: int64(messages)}
	var bug []string
	for id, seq := range poisoned {
		bug = append(bug, fmt.Sprintf("%s/%d", id, seq))
	}
	h := newBuggyHandler(bug...)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	env := f.baseEnv(append(storeEnv(t, store),
		"SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+hs.URL,
		"SEQBUS_MAX_HANDLER_ATTEMPTS=2", "SEQBUS_RETRY_BASE=10ms", "SEQBUS_RETRY_MAX=20ms",
		"SEQBUS_SESSION_IDLE_TIMEOUT=5s")...) // the default: how long a worker holds a session it has nothing for

	f.publish(t, demo.Plan(sessions, messages, 0, 7))
	workers := []*proc{startWorker(t, "worker-a", env), startWorker(t, "worker-b", env)}
	stopWorkers := func() {
		for _, w := range workers {
			w.stop(t)
		}
		workers = nil
	}
	startWorkers := func(round string) {
		workers = []*proc{startWorker(t, "worker-a-"+round, env), startWorker(t, "worker-b-"+round, env)}
	}

	// The bug parks the three sessions; the others complete. The test waits for that to have
	// happened before it starts the recovery.
	var parked operator.ListResult
	waitFor(t, waitLong, func() bool {
		parked = cliJSON[operator.ListResult](t, env, "sessions", "list", "--parked")
		for _, s := range parked.Sessions {
			if s.Busy {
				return false // a worker still holds it (Service Bus reads state under the lock)
			}
			if s.Deferred != messages-int(poisoned[s.SessionID]) {
				// Parked, but the later messages are still being deferred: Postgres shows each
				// commit at once, so the park can be read before the deferrals that follow it.
				return false
			}
		}
		return len(parked.Sessions) == len(poisoned) && h.complete([]string{ids[2], ids[4]}, messages)
	}, func() string {
		return fmt.Sprintf("parked (the later messages wait deferred): %+v; handled: %s", parked.Sessions, h)
	})
	// Step 1: see what is stuck.
	for _, s := range parked.Sessions {
		require.NotNil(t, s.Parked, s.SessionID)
		require.Equal(t, poisoned[s.SessionID], s.Parked.Sequence, s.SessionID)
		require.Equal(t, poisoned[s.SessionID], s.Next, s.SessionID)
		require.Contains(t, s.Parked.Reason, "status 500", s.SessionID)
	}
	table := runCLI(t, env, "sessions", "list", "--parked")
	require.Equal(t, 0, table.code, table.stderr)
	require.Contains(t, table.stdout, "SESSION")
	require.Contains(t, table.stdout, fmt.Sprintf("parked at %d: ", poisoned[ids[0]]))
	require.Contains(t, table.stdout, "3 sessions")
	dlq := cliJSON[operator.DLQListResult](t, env, "dlq", "list", "--reason", "HandlerFailed")
	require.Len(t, dlq.Messages, len(poisoned))
	for _, m := range dlq.Messages {
		require.Equal(t, poisoned[m.SessionID], m.Sequence, m.SessionID)
		require.Equal(t, "HandlerFailed", m.Reason)
		require.Contains(t, m.Description, "status 500")
	}

	// Step 2: the fix is deployed.
	h.fix()
	if mode != "running" {
		stopWorkers()
	}
	// Steps 3 and 4, back to back: the dead letters go back in order, then the sessions resume.
	replay := runCLI(t, env, "dlq", "replay", "--all")
	require.Equal(t, 0, replay.code, replay.stderr)
	require.Contains(t, replay.stdout, "3 copies of 3 sessions sent to "+queueName)
	if mode == "restarted" {
		startWorkers("2")
	}
	resume := runCLI(t, env, "sessions", "resume", "--all-parked", "--json")
	require.Equal(t, 0, resume.code, "resume: %s", resume.stderr)
	var resumed operator.ResumeResult
	require.NoError(t, json.Unmarshal([]byte(resume.stdout), &resumed), resume.stdout)
	var got []string
	for _, r := range resumed.Resumed {
		got = append(got, r.SessionID)
		require.Equal(t, poisoned[r.SessionID], r.Next, r.SessionID)
	}
	require.ElementsMatch(t, []string{ids[0], ids[1], ids[3]}, got, "every parked session resumed: %s", resume.stderr)
	require.Empty(t, resumed.Failed)
	t.Logf("resume: %d resumed (%d wake by the sweeper), %d passed over", len(resumed.Resumed), countWakes(resumed), len(resumed.PassedOver))
	if mode == "stopped" {
		startWorkers("2")
	}

	// Step 5: every session completes in order; nothing is parked, nothing is dead-lettered.
	start := time.Now()
	waitFor(t, waitLong, func() bool { return h.complete(ids, messages) }, func() string { return h.String() })
	t.Logf("the resumed sessions completed %s after the resume", time.Since(start).Round(10*time.Millisecond))
	f.requireDrained(t)
	requireNoneListed(t, env, "--parked", isParked)
	require.Empty(t, cliJSON[operator.DLQListResult](t, env, "dlq", "list").Messages)
	stopWorkers()
	for _, id := range ids {
		require.Equal(t, oneToN(1, int64(messages)), h.sequences(id), "session %s: every sequence once, in order", id)
	}
}

func countWakes(r operator.ResumeResult) int {
	n := 0
	for _, s := range r.Resumed {
		if s.Wakes {
			n++
		}
	}
	return n
}

// deadLetterAll receives every message of the queue's sessions ids and dead-letters it, as a
// handler bug would, so that the dead-letter queue holds whole sessions.
func (f *fixture) deadLetterAll(t *testing.T, ids []string, per int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(f.srv.ConnectionString(), nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, client.Close(ctx)) }()
	reason := "HandlerFailed"
	for _, id := range ids {
		r, err := client.AcceptSessionForQueue(ctx, queueName, id, nil)
		require.NoError(t, err)
		for n := 0; n < per; {
			msgs, err := r.ReceiveMessages(ctx, per-n, nil)
			require.NoError(t, err)
			for _, m := range msgs {
				require.NoError(t, r.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: &reason}))
				n++
			}
		}
		require.NoError(t, r.Close(ctx))
	}
}

// TestReplayCrashHalfWay kills `worker dlq replay --all` abruptly after it sent half of the copies
// and before it completed their dead letters (the SEQBUS_TEST_REPLAY_CRASH_AFTER hook), then runs
// it again: every sequence reaches the handler exactly once, in order, and the dead-letter queue
// ends empty. The queue has no duplicate detection: the worker alone drops the copies sent twice.
func TestReplayCrashHalfWay(t *testing.T) {
	t.Parallel()
	const sessions, messages = 6, 5
	f := newFixture(t)
	ids := sessionIDs(sessions)
	f.publish(t, demo.Plan(sessions, messages, 0, 3))
	f.deadLetterAll(t, ids, messages)
	require.EqualValues(t, sessions*messages, f.counts(t).DeadLetter)

	h := newBuggyHandler()
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	_, pgEnv := postgresEnv(t)
	env := f.baseEnv(append(pgEnv, "SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+hs.URL)...)
	w := startWorker(t, "worker", env)

	crash := runCLI(t, append(env, "SEQBUS_TEST_REPLAY_CRASH_AFTER=15"), "dlq", "replay", "--all")
	require.Equal(t, 137, crash.code, "the replay exits abruptly at the test hook: %s", crash.stderr)
	left := f.counts(t).DeadLetter
	require.Greater(t, left, int64(sessions*messages/2)-int64(messages), "the dead letters of the last batch sent are not completed")
	require.Less(t, left, int64(sessions*messages), "the first sessions were completed")

	again := runCLI(t, env, "dlq", "replay", "--all")
	require.Equal(t, 0, again.code, again.stderr)
	require.Contains(t, again.stdout, fmt.Sprintf("%d copies of", left))
	waitFor(t, waitLong, func() bool { return h.complete(ids, messages) }, func() string { return h.String() })
	f.requireDrained(t)
	w.stop(t)
	for _, id := range ids {
		require.Equal(t, oneToN(1, messages), h.sequences(id), "session %s: every sequence once, in order", id)
	}
	require.Equal(t, messages, stopStat(t, w, "duplicates"), "the copies sent twice (one session's batch) were dropped as duplicates")
}

// TestSkipWaitAndBadInput: `sessions skip --to` moves a session stuck on a gap on (the sweeper
// wakes it); `sessions resume` waits while a worker holds the session and reports when the wait
// runs out, changing nothing; bad input fails with a clear message and a non-zero exit code and
// changes nothing.
func TestSkipWaitAndBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := newBuggyHandler("parked/2")
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	env := f.baseEnv("SEQBUS_HANDLER=http", "SEQBUS_HANDLER_URL="+hs.URL,
		"SEQBUS_MAX_HANDLER_ATTEMPTS=1", "SEQBUS_RETRY_BASE=10ms", "SEQBUS_RETRY_MAX=10ms")
	var plan []demo.Publication
	for _, n := range []int64{1, 2, 5, 6} { // 3 and 4 never come
		plan = append(plan, demo.Publication{SessionID: "gap", Sequence: n, Last: n == 6})
	}
	for n := int64(1); n <= 3; n++ {
		plan = append(plan, demo.Publication{SessionID: "parked", Sequence: n, Last: n == 3})
	}
	plan = append(plan, demo.Publication{SessionID: "open", Sequence: 1}) // more to come
	f.publish(t, plan)
	w := startWorker(t, "worker", env)

	waitFor(t, waitLong, func() bool {
		gap := cliJSON[operator.ListResult](t, env, "sessions", "list", "--gap")
		parked := cliJSON[operator.ListResult](t, env, "sessions", "list", "--parked")
		return len(gap.Sessions) == 1 && !gap.Sessions[0].Busy && len(parked.Sessions) == 1 && !parked.Sessions[0].Busy
	}, func() string {
		return fmt.Sprintf("no gap and parked session: %s; list: %+v", h, runCLI(t, env, "sessions", "list"))
	})
	show := cliJSON[operator.ShowResult](t, env, "sessions", "show", "gap")
	require.Equal(t, int64(3), show.Session.Next)
	require.Equal(t, map[int64]int64{5: show.DeferredIndex[5], 6: show.DeferredIndex[6]}, show.DeferredIndex)
	require.Len(t, show.Messages, 2)
	text := runCLI(t, env, "sessions", "show", "gap")
	require.Equal(t, 0, text.code, text.stderr)
	require.Contains(t, text.stdout, "gap: waits for 3")
	require.Contains(t, text.stdout, "MESSAGES AT THE BROKER (2)")

	// skip --to 5: 3 and 4 are given up, the sweeper wakes the session for 5 and 6.
	skip := runCLI(t, env, "sessions", "skip", "gap", "--to", "5")
	require.Equal(t, 0, skip.code, skip.stderr)
	require.Contains(t, skip.stdout, "skipped gap sequences 3..4 (2); next expected 5")
	require.Contains(t, skip.stderr, `"msg":"operator: skipped sequences"`)
	waitFor(t, waitLong, func() bool { return len(h.sequences("gap")) == 4 }, func() string { return h.String() })
	require.Equal(t, []int64{1, 2, 5, 6}, h.sequences("gap"))

	// Bad input changes nothing.
	before := cliJSON[operator.ShowResult](t, env, "sessions", "show", "parked")
	tests := []struct {
		name    string
		args    []string
		code    int
		message string
	}{
		{"unknown session", []string{"sessions", "resume", "nobody"}, 1, `session "nobody": unknown session`},
		{"malformed id", []string{"sessions", "skip", strings.Repeat("x", 129)}, 2, "Service Bus allows 128"},
		{"not parked", []string{"sessions", "resume", "open"}, 1, "session is not parked (next expected sequence 2)"},
		{"ended", []string{"sessions", "skip", "gap"}, 1, "session has ended"},
		{"skip backwards", []string{"sessions", "skip", "parked", "--to", "1"}, 1, "not above the next expected sequence 2"},
		{"bad flag", []string{"sessions", "skip", "parked", "--to", "two"}, 2, `invalid value "two" for flag -to`},
		{"two ids", []string{"sessions", "resume", "parked", "gap"}, 2, "one session id expected"},
		{"resume with no mark", []string{"sessions", "resume", "--all-parked", "--json", "extra"}, 2, `unexpected argument "extra"`},
		{"replay without a session", []string{"dlq", "replay"}, 2, "give --session ID or --all"},
	}
	for _, tt := range tests {
		r := runCLI(t, env, tt.args...)
		require.Equal(t, tt.code, r.code, "%s: %s", tt.name, r.stderr)
		require.Contains(t, r.stderr, tt.message, tt.name)
		require.Empty(t, r.stdout, tt.name)
	}
	after := cliJSON[operator.ShowResult](t, env, "sessions", "show", "parked")
	require.Equal(t, before.Session, after.Session, "nothing changed")

	// While a worker holds the session, resume waits for it; when the wait runs out it says so
	// and changes nothing. (The test's receiver stands in for a worker: it holds the lock.)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(f.srv.ConnectionString(), nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, client.Close(context.Background())) }()
	held, err := client.AcceptSessionForQueue(ctx, queueName, "parked", nil)
	require.NoError(t, err)
	busy := runCLI(t, env, "sessions", "resume", "parked", "--wait", "1s")
	require.Equal(t, 1, busy.code)
	require.Contains(t, busy.stderr, "session parked: a worker holds it; waiting up to 1s for its release")
	require.Contains(t, busy.stderr, "a worker holds the session (still after waiting 1s); nothing changed")
	shown := cliJSON[operator.ShowResult](t, env, "sessions", "show", "parked")
	require.True(t, shown.Session.Busy, "its state is read under the lock, which the holder has")
	require.Equal(t, "a worker holds the session", shown.MessagesUnavailable)

	waiting := startWorker(t, "resume", env, "sessions", "resume", "parked", "--wait", "30s", "--json")
	waitFor(t, 15*time.Second, func() bool { return strings.Contains(waiting.stderr.String(), "waiting up to") },
		func() string { return "resume did not wait: " + waiting.stderr.String() })
	require.NoError(t, held.Close(ctx))
	require.Equal(t, 0, waiting.wait(t, 20*time.Second), waiting.stderr.String())
	var resumed operator.ResumeResult
	require.NoError(t, json.Unmarshal([]byte(waiting.stdout.String()), &resumed))
	require.Equal(t, "parked", resumed.Resumed[0].SessionID)
	require.Equal(t, before.Session.Parked.Sequence, resumed.Resumed[0].Next)

	// The handler is fixed and the dead letter replayed: the session completes.
	h.fix()
	replay := runCLI(t, env, "dlq", "replay", "--session", "parked")
	require.Equal(t, 0, replay.code, replay.stderr)
	waitFor(t, waitLong, func() bool { return len(h.sequences("parked")) == 3 }, func() string { return h.String() })
	require.Equal(t, []int64{1, 2, 3}, h.sequences("parked"))
	f.requireDrained(t)
	w.stop(t)
}

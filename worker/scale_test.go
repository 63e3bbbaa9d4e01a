package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	"github.com/seqbus/seqbus/sessionstate/memory"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

func TestReplicasWanted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ready, per, max, want int
	}{
		{0, 8, 100, 0},
		{1, 8, 100, 1},
		{8, 8, 100, 1},
		{9, 8, 100, 2},
		{64, 8, 100, 8},
		{200, 8, 100, 25},
		{100000, 8, 100, 100},
		{5, 1, 3, 3},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, replicasWanted(tt.ready, tt.per, tt.max), "%d ready, %d per replica, at most %d", tt.ready, tt.per, tt.max)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := func(f func(s *sequencer.State)) *sequencer.State {
		s := sequencer.NewState()
		s.Next = 3
		f(s)
		return s
	}
	tests := []struct {
		name            string
		state           *sequencer.State
		onlyMessages    readiness // the listing names only sessions with messages (Postgres)
		messagesOrState readiness // it names sessions with state too (Service Bus session state)
	}{
		{"no state", nil, ready, ready},
		{"in progress", st(func(*sequencer.State) {}), ready, peekToKnow},
		{"tombstone", st(func(s *sequencer.State) { s.EndedAt = now }), notReady, notReady},
		{"parked", st(func(s *sequencer.State) { s.Parked = &sequencer.Parked{Sequence: 3, BrokerSequence: 9} }), notReady, notReady},
		{"parked on a gap", st(func(s *sequencer.State) { s.Parked = &sequencer.Parked{Sequence: 3}; s.Deferred[4] = 10 }), peekToKnow, peekToKnow},
		{"blocked", st(func(s *sequencer.State) { s.Blocked = &sequencer.Blocked{Sequence: 3, BrokerSequence: 9} }), notReady, notReady},
		{"on a gap", st(func(s *sequencer.State) { s.GapSince = now; s.Deferred[5] = 11 }), peekToKnow, peekToKnow},
		{"stranded", st(func(s *sequencer.State) { s.Deferred[3] = 8 }), ready, ready},
	}
	for _, tt := range tests {
		require.Equal(t, tt.onlyMessages, classify(tt.state, true), "%s, listed means messages", tt.name)
		require.Equal(t, tt.messagesOrState, classify(tt.state, false), "%s, listed for messages or state", tt.name)
	}
}

// peekSession is a locked session whose messages can be peeked.
type peekSession struct {
	*storetest.Session
	msgs []azservicebus.MessageState
}

func (s *peekSession) Peek(ctx context.Context, from int64, max int) ([]*azservicebus.ReceivedMessage, error) {
	var out []*azservicebus.ReceivedMessage
	for i, st := range s.msgs {
		seq := int64(i + 1)
		if seq >= from && len(out) < max {
			out = append(out, &azservicebus.ReceivedMessage{SequenceNumber: &seq, State: st})
		}
	}
	return out, ctx.Err()
}

// peekSource is an entity's sessions: their messages, which ones another receiver holds, and
// which ones fail to lock.
type peekSource struct {
	mu      sync.Mutex
	msgs    map[string][]azservicebus.MessageState
	locked  map[string]bool
	broken  map[string]bool
	store   *memory.Store
	accepts []string
}

func (p *peekSource) AcceptNext(context.Context) (sequencer.Session, error) {
	return nil, errors.New("not used")
}

func (p *peekSource) Accept(_ context.Context, id string) (sequencer.Session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.accepts = append(p.accepts, id)
	switch {
	case p.locked[id]:
		return nil, fmt.Errorf("accept %q: %w", id, sequencer.ErrSessionLocked)
	case p.broken[id]:
		return nil, fmt.Errorf("accept %q: connection reset", id)
	}
	return &peekSession{Session: storetest.NewSession(id), msgs: p.msgs[id]}, nil
}

const (
	active   = azservicebus.MessageStateActive
	deferred = azservicebus.MessageStateDeferred
)

func repeat(st azservicebus.MessageState, n int) []azservicebus.MessageState {
	out := make([]azservicebus.MessageState, n)
	for i := range out {
		out[i] = st
	}
	return out
}

// TestReadyCounter counts an entity's sessions with both stores' ways of listing: with Postgres
// the listing names sessions with messages and the states come from a query; with Service Bus
// session state it names sessions with state too, and the state is read under the peek's lock.
func TestReadyCounter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	gap := func() *sequencer.State {
		s := sequencer.NewState()
		s.Next, s.GapSince, s.Deferred[4] = 2, now, 4
		return s
	}
	inProgress := func() *sequencer.State { s := sequencer.NewState(); s.Next = 4; return s }
	tomb := func() *sequencer.State { s := sequencer.NewState(); s.EndedAt = now; return s }
	parked := func() *sequencer.State {
		s := sequencer.NewState()
		s.Parked = &sequencer.Parked{Sequence: 1, BrokerSequence: 1}
		return s
	}

	type session struct {
		msgs   []azservicebus.MessageState
		state  *sequencer.State
		locked bool
		ready  bool
	}
	sessions := map[string]session{
		"new":                       {msgs: repeat(active, 600), ready: true},
		"gap, deferred only":        {msgs: repeat(deferred, 150), state: gap()},
		"gap, then a new one":       {msgs: append(repeat(deferred, 150), active), state: gap(), ready: true},
		"in progress":               {msgs: repeat(active, 2), state: inProgress(), ready: true},
		"tombstone, late copy":      {msgs: repeat(active, 1), state: tomb()},
		"parked":                    {msgs: repeat(active, 3), state: parked()},
		"held by a worker":          {msgs: repeat(active, 1), state: inProgress(), locked: true, ready: true},
		sessionstate.LeaseSessionID: {state: inProgress()},
	}
	// With Service Bus session state, sessions with state and no message are listed too.
	stateOnly := map[string]session{
		"idle, state only":   {state: inProgress()},
		"tombstone, nothing": {state: tomb()},
	}

	for _, store := range []string{"postgres", "servicebus"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			src := &peekSource{msgs: map[string][]azservicebus.MessageState{}, locked: map[string]bool{}, store: memory.New()}
			var listed, withState []string
			all := sessions
			if store == "servicebus" {
				all = map[string]session{}
				for id, s := range sessions {
					all[id] = s
				}
				for id, s := range stateOnly {
					all[id] = s
				}
			}
			want := 0
			for id, s := range all {
				src.msgs[id], src.locked[id] = s.msgs, s.locked
				if s.state != nil {
					_, err := src.store.Save(context.Background(), sequencer.SaveParams{Session: storetest.NewSession(id), State: s.state})
					require.NoError(t, err)
					withState = append(withState, id)
				}
				if len(s.msgs) > 0 || store == "servicebus" {
					listed = append(listed, id)
				}
				if s.ready {
					want++
				}
			}
			calls := map[string]int{}
			var (
				mu      sync.Mutex
				changed []string // the sessions whose state changed since the last evaluation
			)
			rc := &readyCounter{
				listed:      func(context.Context) ([]string, error) { return slices.Sorted(slices.Values(listed)), nil },
				source:      src,
				concurrency: 4, perSession: time.Second,
				calls: func(op string, n int) { mu.Lock(); calls[op] += n; mu.Unlock() },
			}
			if store == "postgres" {
				rc.states = listerStates(src.store)
			} else {
				rc.stated = func(context.Context) ([]string, error) { return withState, nil }
				rc.changed = func(context.Context, time.Time) ([]string, error) { return changed, nil }
				rc.now, rc.store = time.Now, src.store
			}
			n, err := rc.count(context.Background())
			require.NoError(t, err)
			require.Equal(t, want, n)
			require.NotContains(t, src.accepts, sessionstate.LeaseSessionID, "the lease session is never looked into")
			require.NotContains(t, src.accepts, "new", "a session with messages and no state needs no peek")
			if store == "postgres" {
				require.ElementsMatch(t, []string{"gap, deferred only", "gap, then a new one"}, src.accepts,
					"with Postgres only the sessions on a gap are peeked")
				// Two gap sessions: an accept, a close and two peeks (150 deferred, 100 a page) each.
				require.Equal(t, map[string]int{"list_sessions": 1, "accept": 2, "peek": 4, "close": 2}, calls)
				return
			}
			require.Equal(t, 1+1, calls["list_sessions"], "the listing and the listing of sessions with state")

			// A session whose state rules it out is not read again until its state changes.
			ruledOut := []string{"parked", "tombstone, late copy", "tombstone, nothing"}
			accepted := func() []string {
				src.mu.Lock()
				defer src.mu.Unlock()
				out := slices.Clone(src.accepts)
				src.accepts = nil
				return out
			}
			require.Subset(t, accepted(), ruledOut)
			n, err = rc.count(context.Background())
			require.NoError(t, err)
			require.Equal(t, want, n)
			again := accepted()
			for _, id := range ruledOut {
				require.NotContains(t, again, id)
			}
			require.Contains(t, again, "idle, state only", "a session in progress is peeked each time: a message may have arrived")
			changed = []string{"parked"}
			n, err = rc.count(context.Background())
			require.NoError(t, err)
			require.Equal(t, want, n)
			again = accepted()
			require.Contains(t, again, "parked", "its state changed: read again")
			require.NotContains(t, again, "tombstone, nothing")
		})
	}
}

// With more sessions in doubt than one evaluation may peek, a uniform sample of them is peeked
// and its share found ready stands for the rest: the evaluation's calls stay bounded.
func TestReadyCounterSamplesWhatItMayNotPeek(t *testing.T) {
	t.Parallel()
	const sessions, budget = 1000, 100
	src := &peekSource{msgs: map[string][]azservicebus.MessageState{}, locked: map[string]bool{}, store: memory.New()}
	var ids []string
	for i := range sessions {
		id := fmt.Sprintf("s-%04d", i)
		ids = append(ids, id)
		st := sequencer.NewState()
		st.Next = 4
		_, err := src.store.Save(context.Background(), sequencer.SaveParams{Session: storetest.NewSession(id), State: st})
		require.NoError(t, err)
		if i%4 != 0 {
			src.msgs[id] = repeat(active, 1) // three in four ready; the rest rest with state only
		}
	}
	calls := map[string]int{}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	rc := &readyCounter{
		log:     slog.New(slog.DiscardHandler),
		listed:  func(context.Context) ([]string, error) { return ids, nil },
		stated:  func(context.Context) ([]string, error) { return ids, nil },
		changed: func(context.Context, time.Time) ([]string, error) { return nil, nil },
		now:     time.Now, store: src.store, source: src,
		concurrency: 4, perSession: time.Second,
		calls:    func(op string, n int) { mu.Lock(); calls[op] += n; mu.Unlock() },
		maxPeeks: budget, sample: rng.Perm,
	}
	n, err := rc.count(context.Background())
	require.NoError(t, err)
	require.Len(t, src.accepts, budget, "no more sessions peeked than the budget")
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(src.accepts))), budget, "each sampled once")
	require.Equal(t, budget, calls["accept"])
	// 750 ready; a sample of 100 from 1,000 is within ±4 standard deviations (±0.043 × 1,000).
	require.InDelta(t, 750, n, 175, "the sample's share stands for the rest")

	rc.maxPeeks = 0
	src.accepts = nil
	n, err = rc.count(context.Background())
	require.NoError(t, err)
	require.Equal(t, 750, n, "no budget: every session in doubt peeked")
	require.Len(t, src.accepts, sessions)

	// A ready session holds a message: the entity's message count bounds the estimate.
	rc.maxPeeks = budget
	rc.active = func(context.Context) (int64, error) { return 300, nil }
	n, err = rc.count(context.Background())
	require.NoError(t, err)
	require.Equal(t, 300, n, "no more sessions ready than messages waiting")
}

func TestMaxPeeks(t *testing.T) {
	t.Parallel()
	require.Equal(t, 333, maxPeeks(100), "the default: 1,000 credits in 10 s, 3 a peek")
	require.Equal(t, 0, maxPeeks(0), "no credit bound, no peek bound")
	require.Equal(t, 3, maxPeeks(1))
}

// A session the counter cannot look into counts as ready, and the evaluation says it was
// partial; a listing that fails fails the evaluation.
func TestReadyCounterFailures(t *testing.T) {
	t.Parallel()
	src := &peekSource{msgs: map[string][]azservicebus.MessageState{}, broken: map[string]bool{"a": true}, store: memory.New()}
	st := sequencer.NewState()
	st.GapSince, st.Deferred[3] = time.Now(), 3
	_, err := src.store.Save(context.Background(), sequencer.SaveParams{Session: storetest.NewSession("a"), State: st})
	require.NoError(t, err)
	rc := &readyCounter{
		listed: func(context.Context) ([]string, error) { return []string{"a"}, nil },
		states: listerStates(src.store), source: src, perSession: time.Second, calls: func(string, int) {},
	}
	n, err := rc.count(context.Background())
	require.ErrorIs(t, err, errPartial)
	require.Equal(t, 1, n)

	rc.listed = func(context.Context) ([]string, error) { return nil, errors.New("connection refused") }
	_, err = rc.count(context.Background())
	require.ErrorContains(t, err, "list sessions: connection refused")
	require.NotErrorIs(t, err, errPartial)
}

// The signal serves its last evaluation on /scale and in the gauges; a worker that does not
// hold the sweeper lease serves 503 and reports 0, so that a max across replicas reads the
// entity's value.
func TestScaleSignal(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := newScaleMetrics(reg)
	require.NoError(t, err)
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ready, fail := 64, error(nil)
	holding := true
	s := &scaleSignal{
		count:      func(context.Context) (int, error) { return ready, fail },
		perReplica: 8, maxReplicas: 100, interval: 10 * time.Second, clock: clk, m: m,
		log: slog.New(slog.DiscardHandler), evaluates: func() bool { return holding }, why: "starting: not evaluated yet",
	}
	get := func() (int, map[string]any) {
		rec := httptest.NewRecorder()
		s.serveHTTP(rec, httptest.NewRequest(http.MethodGet, "/scale", nil))
		var body map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		return rec.Code, body
	}
	code, body := get()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "starting: not evaluated yet", body["reason"])

	s.evaluate(context.Background())
	code, body = get()
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"replicas_wanted": 8.0, "sessions_ready": 64.0, "sessions_per_replica": 8.0, "evaluated_at": "2026-03-01T12:00:00Z"}, body)
	require.Equal(t, 8.0, testutil.ToFloat64(m.replicas))
	require.Equal(t, 64.0, testutil.ToFloat64(m.ready))

	// A failed evaluation keeps the last one, its evaluated_at telling its age.
	clk.Advance(10 * time.Second)
	ready, fail = 0, errors.New("broker down")
	s.evaluate(context.Background())
	_, body = get()
	require.Equal(t, 8.0, body["replicas_wanted"])
	require.Equal(t, "2026-03-01T12:00:00Z", body["evaluated_at"])

	fail = nil
	s.evaluate(context.Background())
	_, body = get()
	require.Equal(t, 0.0, body["replicas_wanted"], "nothing waits: 0")
	require.Equal(t, "2026-03-01T12:00:10Z", body["evaluated_at"])

	ready, holding = 64, false
	s.evaluate(context.Background())
	code, body = get()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body["reason"], "sweeper lease")
	require.Zero(t, testutil.ToFloat64(m.replicas))
	require.Equal(t, 3.0, testutil.ToFloat64(m.evaluations), "a replica that does not evaluate counts none")
}

// The entity's message counts decide an evaluation when they count no message: nothing is listed.
// When they are refused for want of rights, every later evaluation lists without asking again;
// another failure lists this time and asks again the next.
func TestReadyCounterCounts(t *testing.T) {
	t.Parallel()
	denied := &azcore.ResponseError{StatusCode: http.StatusUnauthorized, ErrorCode: "401"}
	tests := []struct {
		name   string
		counts []error // the answers of two evaluations; nil: the counts below
		active int64
		want   int
		// asked: evaluations that asked for the counts; listed: evaluations that listed.
		asked, listed int
		warned        bool
	}{
		{name: "no message", active: 0, want: 0, asked: 2, listed: 0},
		{name: "messages", active: 3, want: 1, asked: 2, listed: 2},
		{name: "refused", counts: []error{denied}, want: 1, asked: 1, listed: 2, warned: true},
		{name: "unreachable", counts: []error{errors.New("dial tcp: connection refused"), errors.New("dial tcp: connection refused")}, want: 1, asked: 2, listed: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			asked, listed := 0, 0
			calls := map[string]int{}
			rc := &readyCounter{
				active: func(context.Context) (int64, error) {
					defer func() { asked++ }()
					if asked < len(tt.counts) {
						return 0, tt.counts[asked]
					}
					return tt.active, nil
				},
				log:    slog.New(slog.NewTextHandler(&logs, nil)),
				listed: func(context.Context) ([]string, error) { listed++; return []string{"new"}, nil },
				states: func(context.Context) (map[string]*sequencer.State, error) { return nil, nil },
				calls:  func(op string, n int) { calls[op] += n },
			}
			for range 2 {
				n, err := rc.count(context.Background())
				require.NoError(t, err)
				require.Equal(t, tt.want, n)
			}
			require.Equal(t, tt.asked, asked, "evaluations that asked for the counts")
			require.Equal(t, tt.asked, calls["runtime_properties"], "each ask is counted as a call")
			require.Equal(t, tt.listed, listed, "evaluations that listed")
			require.Equal(t, tt.warned, strings.Contains(logs.String(), "grant Manage rights"), logs.String())
		})
	}
}

// activeMessages reads the emulator's counts of a queue and of a subscription: active messages,
// deferred ones included (Service Bus counts them as active), not scheduled ones.
func TestActiveMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues: map[string]broker.EntityProperties{"q": {RequiresSession: true}},
		Topics: map[string]emulatortest.Topic{"t": {Subscriptions: map[string]emulatortest.Subscription{"s": {Properties: broker.EntityProperties{RequiresSession: true}}}}},
	})
	ac := srv.NewAdminClient(t)
	for _, e := range []sbadapter.Entity{{Queue: "q"}, {Topic: "t", Subscription: "s"}} {
		t.Run(e.String(), func(t *testing.T) {
			count := activeMessages(ac, e)
			n, err := count(ctx)
			require.NoError(t, err)
			require.Zero(t, n)

			sender, err := srv.Client.NewSender(cmp.Or(e.Queue, e.Topic), nil)
			require.NoError(t, err)
			defer sender.Close(ctx)
			sid := "a"
			for range 2 {
				require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{SessionID: &sid, Body: []byte("x")}, nil))
			}
			_, err = sender.ScheduleMessages(ctx, []*azservicebus.Message{{SessionID: &sid, Body: []byte("later")}}, time.Now().Add(time.Hour), nil)
			require.NoError(t, err)
			var recv *azservicebus.SessionReceiver
			if e.Queue != "" {
				recv, err = srv.Client.AcceptSessionForQueue(ctx, e.Queue, sid, nil)
			} else {
				recv, err = srv.Client.AcceptSessionForSubscription(ctx, e.Topic, e.Subscription, sid, nil)
			}
			require.NoError(t, err)
			msgs, err := recv.ReceiveMessages(ctx, 1, nil)
			require.NoError(t, err)
			require.Len(t, msgs, 1)
			require.NoError(t, recv.DeferMessage(ctx, msgs[0], nil))
			require.NoError(t, recv.Close(ctx))

			n, err = count(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 2, n, "one active and one deferred; the scheduled one is not counted")
		})
	}
	_, err := activeMessages(ac, sbadapter.Entity{Queue: "nope"})(ctx)
	require.ErrorContains(t, err, "not found")
}

func TestPaced(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		spent     int64
		perSecond int
		want      time.Duration
	}{
		{"idle: one request", 10, 100, 10 * time.Second},
		{"within the bound", 1000, 100, 10 * time.Second},
		{"a listing of 100,000 sessions", 20030, 100, 200300 * time.Millisecond},
		{"no bound", 20030, 0, 10 * time.Second},
		{"no call (not the lease holder)", 0, 100, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, paced(10*time.Second, tt.spent, tt.perSecond))
		})
	}
}

// An evaluation that made many calls is followed by the next only once the bound allows it; a
// cheap one keeps the interval.
func TestScaleSignalPaced(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := newScaleMetrics(reg)
	require.NoError(t, err)
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	var evaluations atomic.Int64
	s := &scaleSignal{
		perReplica: 8, maxReplicas: 100, interval: 10 * time.Second, creditsPerSecond: 10, clock: clk, m: m,
		log: slog.New(slog.DiscardHandler), why: "starting: not evaluated yet",
	}
	s.count = func(context.Context) (int, error) {
		if evaluations.Add(1) == 1 {
			s.spent.Add(600) // 600 credits at 10 a second: the next waits 60s
		} else {
			s.spent.Add(10) // idle: the interval
		}
		return 0, nil
	}
	svc := s.service()
	require.NoError(t, svc.Start(context.Background()))
	t.Cleanup(func() { _ = svc.StopAndCancel(context.Background()) })

	start := clk.Now()
	// next waits for the signal to sleep and returns when it wakes, after the evaluations so far.
	next := func(want int64) time.Time {
		t.Helper()
		require.Eventually(t, func() bool { return evaluations.Load() == want }, 5*time.Second, time.Millisecond)
		require.True(t, clk.WaitForTimers(1), "the signal waits for its next evaluation")
		return clk.Pending()[0]
	}
	require.Equal(t, start.Add(60*time.Second), next(1), "600 credits at 10 a second: the next evaluation 60s after the first began, not at the 10s interval")
	clk.Advance(60 * time.Second)
	require.Equal(t, start.Add(70*time.Second), next(2), "one request: the interval")
	clk.Advance(10 * time.Second)
	next(3)
}

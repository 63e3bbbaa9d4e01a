package sequencer

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The decisions of the core are functions of the state, the window and a message: these tests
// need no broker, store or handler.

// in is a message in a test: application sequence, broker sequence number, options.
type in struct {
	seq, bs     int64
	last        bool
	invalid     string
	deferred    bool
	redelivered bool
	unsequenced bool
	body        int
}

func (i in) msg() *msg {
	raw := &Message{BrokerSequence: i.bs, DeliveryCount: 1, Body: make([]byte, i.body)}
	if i.redelivered {
		raw.DeliveryCount = 2
	}
	return &msg{raw: raw, seq: i.seq, bs: i.bs, last: i.last, invalid: i.invalid, deferred: i.deferred, unsequenced: i.unsequenced}
}

// world is a state and a window in a test.
type world struct {
	next, last int64
	deferred   map[int64]int64 // State.Deferred
	skipped    map[int64]int64 // State.SkippedPoison
	inFlight   map[int64]int64 // State.InFlight
	parked     *Parked
	ended      bool
	resolving  bool
	held       []in
	fetched    []in
	missing    []int64
}

func (w world) view(cfg *EngineConfig) view {
	st := NewState()
	st.Next, st.Last, st.Parked = max(w.next, 1), w.last, w.parked
	maps.Copy(st.Deferred, w.deferred)
	st.SkippedPoison, st.InFlight = w.skipped, w.inFlight
	if w.ended {
		st.EndedAt = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	win := newWindow()
	for _, h := range w.held {
		win.put(h.msg())
	}
	for _, f := range w.fetched {
		f.deferred = true
		win.fetched[f.seq] = f.msg()
	}
	for _, k := range w.missing {
		win.missing[k] = true
	}
	return view{cfg: cfg, st: st, w: &win, resolving: w.resolving}
}

func testConfig() *EngineConfig {
	cfg := EngineConfig{Pipelining: Awaited, MaxGap: 100}.WithDefaults()
	return &cfg
}

func TestDecide(t *testing.T) {
	t.Parallel()
	parked := &Parked{Sequence: 4, BrokerSequence: 40}
	gapParked := &Parked{Sequence: 4, Reason: "gap timeout"}
	tests := []struct {
		name  string
		world world
		m     in
		want  action
	}{
		{"in order", world{next: 4}, in{seq: 4, bs: 1}, action{kind: actHandle}},
		{"early", world{next: 4}, in{seq: 6, bs: 1}, action{kind: actHold}},
		{"breaks the contract", world{next: 4}, in{invalid: "no sequence", bs: 1}, settle(settleDecision{kind: settleInvalid, desc: "no sequence"})},
		{"handled already", world{next: 4}, in{seq: 3, bs: 1}, settle(settleDecision{kind: settleDuplicate})},
		{"skipped poison back after a crash", world{next: 4, skipped: map[int64]int64{3: 30}}, in{seq: 3, bs: 30}, settle(settleDecision{kind: settleFinishSkip})},
		{"another copy of a skipped poison message", world{next: 4, skipped: map[int64]int64{3: 30}}, in{seq: 3, bs: 31}, settle(settleDecision{kind: settleDuplicate})},
		{"after the last", world{next: 4, last: 5}, in{seq: 6, bs: 1},
			settle(settleDecision{kind: settleInvalid, desc: `application property "Sequence" = 6 is after the last sequence 5`})},
		{"a second last", world{next: 4, last: 5}, in{seq: 4, bs: 1, last: true},
			settle(settleDecision{kind: settleInvalid, desc: `application property "Sequence" = 4 is marked last but 5 already was`})},
		{"too far ahead", world{next: 4}, in{seq: 105, bs: 1},
			settle(settleDecision{kind: settleInvalid, desc: `application property "Sequence" = 105 is 101 ahead of the next expected sequence 4 (max gap 100)`})},
		{"as far ahead as allowed", world{next: 4}, in{seq: 104, bs: 1}, action{kind: actHold}},
		{"late copy after the end", world{next: 6, last: 5, ended: true}, in{seq: 2, bs: 1}, settle(settleDecision{kind: settleDuplicate})},
		{"beyond the end", world{next: 6, last: 5, ended: true}, in{seq: 6, bs: 1},
			settle(settleDecision{kind: settleInvalid, desc: `application property "Sequence" = 6 is after the last sequence 5`})},

		{"another copy held", world{next: 4, held: []in{{seq: 6, bs: 1}}}, in{seq: 6, bs: 2}, settle(settleDecision{kind: settleDuplicate})},
		{"the held message itself, in order", world{next: 4, held: []in{{seq: 4, bs: 1}}}, in{seq: 4, bs: 1}, action{kind: actHandle}},
		{"another copy fetched", world{next: 4, fetched: []in{{seq: 4, bs: 1}}}, in{seq: 4, bs: 2}, settle(settleDecision{kind: settleDuplicate})},
		{"another copy deferred", world{next: 4, deferred: map[int64]int64{5: 50}}, in{seq: 5, bs: 2}, settle(settleDecision{kind: settleDuplicate})},
		{"the deferred message itself", world{next: 4, deferred: map[int64]int64{4: 40}}, in{seq: 4, bs: 40, deferred: true}, action{kind: actHandle}},
		{"a copy of a deferred message the broker lost", world{next: 4, deferred: map[int64]int64{4: 40}, missing: []int64{4}},
			in{seq: 4, bs: 2}, action{kind: actHandle}},
		{"a copy of a lost deferred message, early", world{next: 4, deferred: map[int64]int64{5: 50}, missing: []int64{5}},
			in{seq: 5, bs: 2}, settle(settleDecision{kind: settleDuplicate})},

		{"the parked message back after a crash", world{next: 4, parked: parked}, in{seq: 4, bs: 40}, settle(settleDecision{kind: settleFinishPark})},
		{"the parked message back after a crash, behind another copy", world{next: 4, parked: parked, held: []in{{seq: 4, bs: 41}}},
			in{seq: 4, bs: 40}, settle(settleDecision{kind: settleFinishPark})},
		{"the parked message back after a crash, another copy deferred", world{next: 4, parked: parked, deferred: map[int64]int64{4: 41}},
			in{seq: 4, bs: 40}, settle(settleDecision{kind: settleFinishPark})},
		{"the parked message back after a crash, another copy fetched", world{next: 4, parked: parked, fetched: []in{{seq: 4, bs: 41}}},
			in{seq: 4, bs: 40}, settle(settleDecision{kind: settleFinishPark})},
		{"a replay of the parked message", world{next: 4, parked: parked}, in{seq: 4, bs: 41}, action{kind: actHold}},
		{"later while parked", world{next: 4, parked: parked}, in{seq: 5, bs: 50}, action{kind: actHold}},
		{"the missing sequence a gap timeout parked on", world{next: 4, parked: gapParked}, in{seq: 4, bs: 41},
			action{kind: actHandle, unparks: true}},
		{"later while parked on a gap", world{next: 4, parked: gapParked}, in{seq: 5, bs: 50}, action{kind: actHold}},

		{"unsequenced", world{next: 4}, in{unsequenced: true, bs: 1}, action{kind: actPassThrough}},
		{"unsequenced while parked", world{next: 4, parked: parked}, in{unsequenced: true, bs: 1}, action{kind: actPassThrough}},
		{"unsequenced while resolving", world{next: 4, resolving: true, inFlight: map[int64]int64{4: 40}},
			in{unsequenced: true, bs: 1}, action{kind: actPassThrough}},
		{"unsequenced after the end", world{next: 6, last: 5, ended: true}, in{unsequenced: true, bs: 1}, action{kind: actPassThrough}},

		{"last, in order", world{next: 4}, in{seq: 4, bs: 1, last: true}, action{kind: actHandle, learnsLast: true}},
		{"last, early", world{next: 4}, in{seq: 7, bs: 1, last: true}, action{kind: actHold, learnsLast: true}},
		{"last, known", world{next: 4, last: 4}, in{seq: 4, bs: 1, last: true}, action{kind: actHandle}},

		{"an entry of the inherited record", world{next: 4, resolving: true, inFlight: map[int64]int64{4: 40, 5: 50}},
			in{seq: 4, bs: 40}, action{kind: actHold}},
		{"another copy of an unresolved entry", world{next: 4, resolving: true, inFlight: map[int64]int64{4: 40, 5: 50}},
			in{seq: 4, bs: 2}, action{kind: actHold}},
		{"another copy of an entry of this run's own record", world{next: 4, inFlight: map[int64]int64{4: 40, 5: 50}},
			in{seq: 4, bs: 2}, action{kind: actHandle}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.world.view(testConfig()).decide(tt.m.msg()))
		})
	}
}

func TestSettlementOf(t *testing.T) {
	t.Parallel()
	upcoming := func(ins ...in) []msg {
		out := make([]msg, len(ins))
		for i, x := range ins {
			out[i] = *x.msg()
		}
		return out
	}
	tests := []struct {
		name     string
		world    world
		m        in
		record   map[int64]int64
		upcoming []msg
		want     settlement
		entries  map[int64]int64
	}{
		{"nothing else in hand", world{next: 1}, in{seq: 1, bs: 1}, nil, nil, saveThenComplete, nil},
		{"the rest of the batch", world{next: 1}, in{seq: 1, bs: 1}, nil,
			upcoming(in{seq: 2, bs: 2}, in{seq: 3, bs: 3}, in{seq: 5, bs: 5}),
			completeInRun, map[int64]int64{1: 1, 2: 2, 3: 3}},
		{"held first, then the batch; invalid and second copies ignored", world{next: 1, held: []in{{seq: 2, bs: 9}}},
			in{seq: 1, bs: 1}, nil,
			upcoming(in{invalid: "x", bs: 3}, in{seq: 2, bs: 4}, in{seq: 3, bs: 5}, in{seq: 3, bs: 6}),
			completeInRun, map[int64]int64{1: 1, 2: 9, 3: 5}},
		{"an entry of this run's record", world{next: 2}, in{seq: 2, bs: 2}, map[int64]int64{1: 1, 2: 2}, nil, completeInRun, nil},
		{"another copy of an entry", world{next: 2}, in{seq: 2, bs: 7}, map[int64]int64{1: 1, 2: 2}, nil, saveThenComplete, nil},
		{"received deferred", world{next: 1}, in{seq: 1, bs: 1, deferred: true}, nil, upcoming(in{seq: 2, bs: 2}), saveThenComplete, nil},
		{"redelivered", world{next: 1}, in{seq: 1, bs: 1, redelivered: true}, nil, upcoming(in{seq: 2, bs: 2}), saveThenComplete, nil},
		{"a redelivered message ends the run", world{next: 1}, in{seq: 1, bs: 1}, nil,
			upcoming(in{seq: 2, bs: 2}, in{seq: 3, bs: 3, redelivered: true}), completeInRun, map[int64]int64{1: 1, 2: 2}},
		{"the last never joins", world{next: 1}, in{seq: 1, bs: 1}, nil,
			upcoming(in{seq: 2, bs: 2}, in{seq: 3, bs: 3, last: true}), completeInRun, map[int64]int64{1: 1, 2: 2}},
		{"the message before a deferred one is an anchor", world{next: 1, deferred: map[int64]int64{4: 40}}, in{seq: 1, bs: 1}, nil,
			upcoming(in{seq: 2, bs: 2}, in{seq: 3, bs: 3}), completeInRun, map[int64]int64{1: 1, 2: 2}},
		{"while resolving", world{next: 1, resolving: true, inFlight: map[int64]int64{1: 1}}, in{seq: 1, bs: 1}, nil,
			upcoming(in{seq: 2, bs: 2}), saveThenComplete, nil},
		{"while parked", world{next: 1, parked: &Parked{Sequence: 1}}, in{seq: 1, bs: 1}, nil,
			upcoming(in{seq: 2, bs: 2}), saveThenComplete, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, entries := tt.world.view(testConfig()).settlementOf(tt.m.msg(), tt.record, tt.upcoming)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.entries, entries)
		})
	}
}

func TestOverflow(t *testing.T) {
	t.Parallel()
	held := func(seqs ...int64) []in {
		var out []in
		for _, s := range seqs {
			out = append(out, in{seq: s, bs: 10 * s, body: 10})
		}
		return out
	}
	tests := []struct {
		name     string
		world    world
		limit    int
		maxBytes int
		want     []int64 // sequences deferred, in the order picked
	}{
		{"within the window", world{next: 1, held: held(2, 3)}, 2, 100, nil},
		{"the furthest ahead first", world{next: 1, held: held(2, 3, 5, 4)}, 2, 100, []int64{5, 4}},
		{"by bytes", world{next: 1, held: held(2, 3, 4)}, 10, 15, []int64{4, 3}},
		{"release: all of it", world{next: 1, held: held(2, 3)}, 0, 100, []int64{3, 2}},
		{"the message for Next stays active", world{next: 2, held: held(2, 3)}, 0, 100, []int64{3}},
		{"parked: the message for Next too", world{next: 2, held: held(2, 3), parked: &Parked{Sequence: 1}}, 0, 100, []int64{3, 2}},
		{"resolving: one stays, entries stay", world{next: 1, held: held(2, 3, 4), resolving: true,
			inFlight: map[int64]int64{1: 1, 4: 40}}, 0, 100, []int64{3, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.WindowBytes = tt.maxBytes
			var got []int64
			for _, m := range tt.world.view(cfg).overflow(tt.limit) {
				got = append(got, m.seq)
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestStateTransitions(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	state := func(next, last int64) *State {
		st := NewState()
		st.Next, st.Last = next, last
		return st
	}
	t.Run("handled", func(t *testing.T) {
		t.Parallel()
		st := state(4, 0)
		st.Deferred[4] = 40 // a copy the broker lost
		st.GapSince = now.Add(-time.Minute)
		require.Equal(t, time.Minute, st.handled(4, 41, now))
		require.Equal(t, int64(5), st.Next)
		require.Empty(t, st.Deferred)
		require.True(t, st.GapSince.IsZero())
		require.Equal(t, uint64(1), st.Counters.Handled)
		require.True(t, st.EndedAt.IsZero())
		require.Zero(t, st.handled(5, 50, now), "no gap was waited for")
	})
	t.Run("handled, the deferred message itself", func(t *testing.T) {
		t.Parallel()
		st := state(4, 0)
		st.Deferred[4] = 40
		st.handled(4, 40, now)
		require.Equal(t, map[int64]int64{4: 40}, st.Deferred, "the entry goes once the message is completed")
	})
	t.Run("handled, the last", func(t *testing.T) {
		t.Parallel()
		st := state(4, 4)
		st.handled(4, 40, now)
		require.Equal(t, now, st.EndedAt)
		require.Equal(t, int64(5), st.Next)
	})
	t.Run("skip poison, the last", func(t *testing.T) {
		t.Parallel()
		st := state(4, 4)
		st.skipPoison(4, 40, now)
		require.Equal(t, int64(5), st.Next)
		require.Equal(t, now, st.EndedAt)
		require.Equal(t, map[int64]int64{4: 40}, st.SkippedPoison)
		require.Equal(t, Counters{Skipped: 1, DeadLettered: 1}, st.Counters)
	})
	t.Run("park", func(t *testing.T) {
		t.Parallel()
		st := state(4, 0)
		st.park(4, 40, "boom", now)
		require.Equal(t, &Parked{Sequence: 4, BrokerSequence: 40, Reason: "boom", At: now}, st.Parked)
		require.Equal(t, int64(4), st.Next, "a parked session waits at the message")
		require.Equal(t, uint64(1), st.Counters.DeadLettered)
	})
	t.Run("skip a gap", func(t *testing.T) {
		t.Parallel()
		st := state(4, 0)
		st.GapSince = now.Add(-time.Hour)
		n, wait := st.skipTo(7, now)
		require.Equal(t, uint64(3), n)
		require.Equal(t, time.Hour, wait)
		require.Equal(t, int64(7), st.Next)
		require.True(t, st.GapSince.IsZero())
	})
	t.Run("an inherited entry was handled", func(t *testing.T) {
		t.Parallel()
		st := state(4, 0)
		st.InFlight = map[int64]int64{4: 40, 5: 50}
		st.passRecorded()
		require.Equal(t, int64(5), st.Next)
		require.Equal(t, map[int64]int64{5: 50}, st.InFlight)
		require.Equal(t, uint64(1), st.Counters.Handled)
	})
	t.Run("deferred and settled", func(t *testing.T) {
		t.Parallel()
		st := state(1, 0)
		st.recordDeferral(5, 50)
		st.recordDeferral(5, 50)
		require.Equal(t, uint64(1), st.Counters.Deferred, "recording the same message twice counts once")
		st.SkippedPoison = map[int64]int64{2: 20}
		st.pruneSettled(map[int64]int64{5: 51, 2: 20})
		require.Equal(t, map[int64]int64{5: 50}, st.Deferred, "another copy's settlement leaves the entry")
		require.Empty(t, st.SkippedPoison)
	})
}

func TestLeftover(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		world world
		m     in
		want  settleDecision
		ok    bool
	}{
		{"below next", world{next: 4}, in{seq: 2, bs: 1}, settleDecision{kind: settleDuplicate}, true},
		{"skipped poison", world{next: 4, skipped: map[int64]int64{2: 20}}, in{seq: 2, bs: 20}, settleDecision{kind: settleFinishSkip}, true},
		{"beyond the last", world{next: 4, last: 5}, in{seq: 7, bs: 1},
			settleDecision{kind: settleInvalid, desc: `application property "Sequence" = 7 is after the last sequence 5`}, true},
		{"breaks the contract", world{next: 4}, in{invalid: "bad", bs: 1}, settleDecision{kind: settleInvalid, desc: "bad"}, true},
		{"in order is not a leftover", world{next: 4}, in{seq: 4, bs: 1}, settleDecision{}, false},
		{"early is not a leftover", world{next: 4, last: 9}, in{seq: 6, bs: 1}, settleDecision{}, false},
		{"unsequenced is not a leftover", world{next: 4}, in{unsequenced: true, bs: 1}, settleDecision{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := tt.world.view(testConfig())
			got, ok := v.leftover(tt.m.msg())
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
			if ok {
				require.Equal(t, settle(got), v.decide(tt.m.msg()), "decide settles a leftover the same way")
			}
		})
	}
}

func TestPoisonOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy PoisonPolicy
		m      in
		want   poisonAction
	}{
		{PoisonPark, in{seq: 4, bs: 1}, poisonPark},
		{PoisonSkip, in{seq: 4, bs: 1}, poisonSkip},
		{PoisonBlock, in{seq: 4, bs: 1}, poisonBlock},
		{PoisonBlock, in{unsequenced: true, bs: 1}, poisonDeadLetter},
		{PoisonPark, in{unsequenced: true, bs: 1}, poisonDeadLetter},
	}
	for _, tt := range tests {
		cfg := EngineConfig{Pipelining: Awaited, Poison: tt.policy}.WithDefaults()
		require.Equal(t, tt.want, world{next: 4}.view(&cfg).poisonOf(tt.m.msg()), "%s, %+v", tt.policy, tt.m)
	}
}

func TestGapPolicy(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	waiting := world{next: 4, held: []in{{seq: 6, bs: 60}}}
	tests := []struct {
		name    string
		policy  GapPolicy
		timeout time.Duration
		world   world
		noGap   bool
		after   time.Duration
		want    gapAction
	}{
		{"skip once waited long enough", GapSkip, time.Minute, waiting, false, time.Minute, gapSkip},
		{"park once waited long enough", GapPark, time.Minute, waiting, false, 2 * time.Minute, gapPark},
		{"not yet", GapSkip, time.Minute, waiting, false, time.Minute - 1, gapNone},
		{"wait never acts", GapWait, time.Minute, waiting, false, time.Hour, gapNone},
		{"no timeout", GapSkip, 0, waiting, false, time.Hour, gapNone},
		{"the clock is not running", GapSkip, time.Minute, waiting, true, time.Hour, gapNone},
		{"nothing waits", GapSkip, time.Minute, world{next: 4}, false, time.Hour, gapNone},
		{"parked", GapPark, time.Minute, world{next: 4, held: waiting.held, parked: &Parked{Sequence: 4}}, false, time.Hour, gapNone},
		{"resolving a record", GapSkip, time.Minute, world{next: 4, held: waiting.held, resolving: true}, false, time.Hour, gapNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := EngineConfig{Pipelining: Awaited, GapPolicy: tt.policy, GapTimeout: tt.timeout}.WithDefaults()
			v := tt.world.view(&cfg)
			if !tt.noGap {
				v.st.GapSince = since
			}
			require.Equal(t, tt.want, v.gapPolicy(since.Add(tt.after)))
			if tt.want != gapNone {
				require.True(t, v.st.GapExpired(since.Add(tt.after), tt.timeout), "the sweeper's rule agrees")
			}
		})
	}
}

func TestRetryPolicyBackoff(t *testing.T) {
	t.Parallel()
	// The waits the engine has always used: doubling from Base, capped, no jitter; a zero Cap
	// waits nothing.
	tests := []struct {
		p       RetryPolicy
		attempt int
		want    time.Duration
	}{
		{RetryPolicy{Base: time.Second, Cap: 30 * time.Second}, 0, time.Second},
		{RetryPolicy{Base: time.Second, Cap: 30 * time.Second}, 1, time.Second},
		{RetryPolicy{Base: time.Second, Cap: 30 * time.Second}, 3, 4 * time.Second},
		{RetryPolicy{Base: time.Second, Cap: 30 * time.Second}, 6, 30 * time.Second},
		{RetryPolicy{Base: time.Second, Cap: 30 * time.Second}, 1000, 30 * time.Second},
		{RetryPolicy{Base: 3 * time.Second, Cap: time.Second}, 2, time.Second},
		{RetryPolicy{Base: time.Second}, 3, 0},
		{RetryPolicy{Cap: time.Second}, 3, 0},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.p.Backoff(tt.attempt), "%+v attempt %d", tt.p, tt.attempt)
		for range 3 {
			require.Equal(t, tt.want, tt.p.Backoff(tt.attempt), "no jitter")
		}
	}
}

func TestCallHandlerRecoversAPanic(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	err := CallHandler(t.Context(), HandlerFunc(func(context.Context, *Message) error { panic(boom) }), &Message{})
	var pe *PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "handler panic: boom", err.Error())
	require.ErrorIs(t, err, boom, "an error panic value is unwrapped")
	require.Contains(t, string(pe.Stack), "TestCallHandlerRecoversAPanic")

	err = CallHandler(t.Context(), HandlerFunc(func(context.Context, *Message) error { panic("kaboom") }), &Message{})
	require.EqualError(t, err, "handler panic: kaboom")
	require.Equal(t, boom, CallHandler(t.Context(), HandlerFunc(func(context.Context, *Message) error { return boom }), &Message{}))
	require.NoError(t, CallHandler(t.Context(), HandlerFunc(func(context.Context, *Message) error { return nil }), &Message{}))
}

func TestGoesAhead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		w    world
		m    in
		want bool
	}{
		{"an active message with one save each, pipelined", world{next: 3}, in{seq: 3, bs: 30}, true},
		{"the last message", world{next: 3}, in{seq: 3, bs: 30, last: true}, false},
		{"the last sequence known", world{next: 3, last: 3}, in{seq: 3, bs: 30}, false},
		{"before the known last", world{next: 3, last: 4}, in{seq: 3, bs: 30}, true},
		{"a deferred message", world{next: 3}, in{seq: 3, bs: 30, deferred: true}, false},
		{"named by an index entry", world{next: 3, deferred: map[int64]int64{3: 30}}, in{seq: 3, bs: 30}, false},
		{"another copy indexed", world{next: 3, deferred: map[int64]int64{3: 31}}, in{seq: 3, bs: 30}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.w.view(testConfig()).goesAhead(tt.m.msg()))
		})
	}
}

func TestTailsRun(t *testing.T) {
	t.Parallel()
	stored := pipelining{recordStored: true}
	batch := func(ins ...in) []msg {
		out := make([]msg, len(ins))
		for i, x := range ins {
			out[i] = *x.msg()
		}
		return out
	}
	tests := []struct {
		name     string
		w        world
		m        in
		how      settlement
		entries  map[int64]int64
		upcoming []msg
		f        pipelining
		want     bool
	}{
		{"the last message follows in the batch", world{next: 5}, in{seq: 5, bs: 50}, saveThenComplete, nil,
			batch(in{seq: 6, bs: 60, last: true}), stored, true},
		{"the last message is held", world{next: 5, held: []in{{seq: 6, bs: 60, last: true}}}, in{seq: 5, bs: 50}, saveThenComplete, nil,
			nil, stored, true},
		{"a run in hand up to the last", world{next: 5}, in{seq: 5, bs: 50}, completeInRun, map[int64]int64{5: 50, 6: 60},
			batch(in{seq: 6, bs: 60}, in{seq: 7, bs: 70, last: true}), stored, true},
		{"the last is not in hand", world{next: 5}, in{seq: 5, bs: 50}, saveThenComplete, nil,
			batch(in{seq: 6, bs: 60}), stored, false},
		{"no record stored", world{next: 5}, in{seq: 5, bs: 50}, saveThenComplete, nil,
			batch(in{seq: 6, bs: 60, last: true}), pipelining{}, false},
		{"an entry of the record", world{next: 5}, in{seq: 5, bs: 50}, completeInRun, nil,
			batch(in{seq: 6, bs: 60, last: true}), stored, false},
		{"the window is full", world{next: 5}, in{seq: 5, bs: 50}, saveThenComplete, nil,
			batch(in{seq: 6, bs: 60, last: true}), pipelining{recordStored: true, pending: 16}, false},
		{"redelivered", world{next: 5}, in{seq: 5, bs: 50, redelivered: true}, saveThenComplete, nil,
			batch(in{seq: 6, bs: 60, last: true}), stored, false},
		{"deferred", world{next: 5}, in{seq: 5, bs: 50, deferred: true}, saveThenComplete, nil,
			batch(in{seq: 6, bs: 60, last: true}), stored, false},
		{"indexed", world{next: 5, deferred: map[int64]int64{5: 50}}, in{seq: 5, bs: 50}, saveThenComplete, nil,
			batch(in{seq: 6, bs: 60, last: true}), stored, false},
		{"m is the last", world{next: 5}, in{seq: 5, bs: 50, last: true}, saveThenComplete, nil,
			nil, stored, false},
		{"resolving", world{next: 5, resolving: true}, in{seq: 5, bs: 50}, saveThenComplete, nil,
			batch(in{seq: 6, bs: 60, last: true}), stored, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.w.view(testConfig()).tailsRun(tt.m.msg(), tt.how, tt.entries, tt.upcoming, tt.f)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestExtensionOf(t *testing.T) {
	t.Parallel()
	record := map[int64]int64{3: 30, 4: 40}
	extension := map[int64]int64{4: 40, 5: 50, 6: 60}
	tests := []struct {
		name    string
		m       in
		pending int
		want    extensionStep
	}{
		{"an entry of the record that landed", in{seq: 4, bs: 40}, 16, extensionNone},
		{"an entry of the extension", in{seq: 5, bs: 50}, 0, extensionEarly},
		{"the last slot", in{seq: 5, bs: 50}, 15, extensionEarly},
		{"no slot left", in{seq: 5, bs: 50}, 16, extensionWait},
		{"another copy of an entry", in{seq: 5, bs: 51}, 0, extensionWait},
		{"not in the extension", in{seq: 7, bs: 70}, 0, extensionWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, world{next: 3}.view(testConfig()).extensionOf(tt.m.msg(), record, extension, tt.pending))
		})
	}
}

func TestSavesForReplay(t *testing.T) {
	t.Parallel()
	pipelined := EngineConfig{MaxPendingSettlements: 4}.WithDefaults()                   // window 5
	single := EngineConfig{Pipelining: Awaited, MaxPendingSettlements: 4}.WithDefaults() // window 1
	tests := []struct {
		name     string
		cfg      EngineConfig
		refused  int64
		inFlight int
		want     bool
	}{
		{"nothing refused", pipelined, 0, 4, false},
		{"below the window", pipelined, 1, 3, false},
		{"reaches the window", pipelined, 2, 3, true},
		{"refusals alone", pipelined, 5, 0, true},
		{"a window of one", single, 1, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, world{}.view(&tt.cfg).savesForReplay(tt.refused, tt.inFlight))
		})
	}
}

func TestAsksNextBatch(t *testing.T) {
	t.Parallel()
	runs := EngineConfig{}.WithDefaults()
	off := EngineConfig{Pipelining: Awaited}.WithDefaults()
	batch := func(ins ...in) []msg {
		out := make([]msg, len(ins))
		for i, x := range ins {
			out[i] = *x.msg()
		}
		return out
	}
	tests := []struct {
		name    string
		cfg     EngineConfig
		w       world
		cooling bool
		batch   []msg
		want    bool
	}{
		{"pipelined runs", runs, world{next: 1}, false, batch(in{seq: 1, bs: 1}, in{seq: 2, bs: 2}), true},
		{"not pipelined", off, world{next: 1}, false, batch(in{seq: 1, bs: 1}), false},
		{"resolving", runs, world{next: 1, resolving: true}, false, batch(in{seq: 1, bs: 1}), false},
		{"cooling", runs, world{next: 1}, true, batch(in{seq: 1, bs: 1}), false},
		{"the batch holds the last", runs, world{next: 1}, false, batch(in{seq: 1, bs: 1}, in{seq: 2, bs: 2, last: true}), false},
		{"all sequences left in hand", runs, world{next: 2, last: 4, deferred: map[int64]int64{4: 40}, held: []in{{seq: 3, bs: 30}}}, false,
			batch(in{seq: 2, bs: 20}), false},
		{"one sequence left out", runs, world{next: 2, last: 5, deferred: map[int64]int64{4: 40}, held: []in{{seq: 3, bs: 30}}}, false,
			batch(in{seq: 2, bs: 20}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := tt.w.view(&tt.cfg)
			v.cooling = tt.cooling
			require.Equal(t, tt.want, v.asksNextBatch(tt.batch))
		})
	}
}

func TestGathersAhead(t *testing.T) {
	t.Parallel()
	cfg := EngineConfig{Pipelining: Awaited, MaxPendingSettlements: 16}.WithDefaults() // gathers up to 12
	tests := []struct {
		name              string
		stored            bool
		upcoming, unsaved int
		want              bool
	}{
		{"more in hand, few handled", true, 3, 4, true},
		{"the stored state does not say Ahead yet", false, 3, 4, false},
		{"the end of the batch", true, 0, 4, false},
		{"three quarters handled", true, 3, 12, false},
		{"just below", true, 3, 11, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, world{}.view(&cfg).gathersAhead(tt.stored, tt.upcoming, tt.unsaved))
		})
	}
}

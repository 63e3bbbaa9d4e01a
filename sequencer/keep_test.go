package sequencer_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

// storeCfg holds every early message in the store at the end of its batch (no window), one
// message per receive, so that a batch never hands over what it holds.
var storeCfg = sequencer.EngineConfig{
	EarlyMessages: sequencer.EarlyStore, WindowMessages: sequencer.NoWindow, ReceiveBatch: 1,
	IdleTimeout: time.Millisecond, Pipelining: sequencer.Awaited,
}

// setupHolding is setup with early messages held in the store (the fake store's HeldStore view).
func setupHolding(t *testing.T, cfg sequencer.EngineConfig) *bundle {
	t.Helper()
	b := setup(t, sequencer.EngineConfig{})
	b.engine = b.newEngine(t, cfg, b.storeClient().Holding())
	return b
}

func TestEarlyStoreHoldsInsteadOfDeferring(t *testing.T) {
	t.Parallel()
	b := setupHolding(t, storeCfg)
	b.broker.PublishSeq("a", 3, true)
	b.broker.PublishSeq("a", 2, false)
	out, ok := b.runNext(t)
	require.True(t, ok)
	require.Equal(t, sequencer.OutcomeIdle, out)
	require.Equal(t, []int64{2, 3}, b.store.HeldMessages("a"), "the early messages are held")
	require.Zero(t, b.broker.Len(), "and completed at the broker")
	st, _ := b.store.Get("a")
	require.Equal(t, map[int64]int64{2: 2, 3: 1}, st.Deferred, "the index names the held copies")
	require.False(t, st.NeedsWake(), "the message for Next is not held: the broker offers the session when it comes")

	b.broker.PublishSeq("a", 1, false)
	out, ok = b.runNext(t)
	require.True(t, ok)
	require.Equal(t, sequencer.OutcomeEnded, out)
	require.Equal(t, []int64{1, 2, 3}, b.got("a"))
	require.Empty(t, b.store.HeldMessages("a"), "removed with the advance")
	calls := b.broker.Calls()
	require.Zero(t, calls["defer"])
	require.Zero(t, calls["receive_deferred"])
	require.Len(t, b.eventsOf(sequencer.EventHeldInStore), 2)
	require.Empty(t, b.eventsOf(sequencer.EventDeferred))
	require.EqualValues(t, 2, b.engine.Stats().HeldInStore)
}

// A session whose next message is held has nothing at the broker: State.NeedsWake says so, and a
// run by id (a sweeper's wake) hands it over from the store.
func TestEarlyStoreWakesWhenNextIsHeld(t *testing.T) {
	t.Parallel()
	b := setupHolding(t, storeCfg)
	b.broker.PublishSeq("a", 3, true)
	b.broker.PublishSeq("a", 2, false)
	_, ok := b.runNext(t)
	require.True(t, ok)
	st, _ := b.store.Get("a")
	require.Equal(t, uint64(1), st.SkipTo(2, b.clock.Now()), "an operator skips the missing 1")
	b.store.Put("a", st)
	require.True(t, st.NeedsWake())
	_, ok = b.runNext(t)
	require.False(t, ok, "the broker offers nothing")
	require.Equal(t, sequencer.OutcomeEnded, b.runByID(t, "a", &sequencer.RunOptions{Woken: true}))
	require.Equal(t, []int64{2, 3}, b.got("a"))
	require.Empty(t, b.store.HeldMessages("a"))
}

// Past a bound the run holds none of the batch's early messages: the window keeps them, and the
// broker keeps them once the session is released; the session goes on when Next comes.
func TestEarlyStoreHeldFull(t *testing.T) {
	t.Parallel()
	cfg := storeCfg
	cfg.ReceiveBatch = 32
	cfg.Held = sequencer.HeldLimits{SessionMessages: 1}
	b := setupHolding(t, cfg)
	b.broker.PublishSeq("a", 3, true)
	b.broker.PublishSeq("a", 2, false)
	out, ok := b.runNext(t)
	require.True(t, ok)
	require.Equal(t, sequencer.OutcomeIdle, out)
	require.Empty(t, b.store.HeldMessages("a"), "nothing held")
	active, deferred := b.broker.Pending("a")
	require.Equal(t, 2, active, "the broker keeps both")
	require.Zero(t, deferred)
	require.Len(t, b.eventsOf(sequencer.EventHeldFull), 1)
	require.EqualValues(t, 1, b.engine.Stats().HeldFull)

	b.broker.PublishSeq("a", 1, false)
	b.clock.Advance(time.Minute) // the released locks
	out, ok = b.runNext(t)
	require.True(t, ok)
	require.Equal(t, sequencer.OutcomeEnded, out, "with the message for Next in the batch nothing needs holding")
	require.Equal(t, []int64{1, 2, 3}, b.got("a"))
	require.Zero(t, b.broker.Len())
}

// A held message that keeps failing is moved to the store's dead letters with the parked mark, in
// one write; resumed with a skip, the session goes on.
func TestEarlyStorePoisonHeldMessage(t *testing.T) {
	t.Parallel()
	b := setupHolding(t, storeCfg)
	b.setFail(func(m *sequencer.Message) error {
		if m.Sequence == 2 {
			return errors.New("boom")
		}
		return nil
	})
	b.broker.PublishSeq("a", 3, true)
	b.broker.PublishSeq("a", 2, false)
	_, _ = b.runNext(t)
	b.broker.PublishSeq("a", 1, false)
	out, ok := b.runNext(t)
	require.True(t, ok)
	require.Equal(t, sequencer.OutcomeParked, out)
	dead := b.store.HeldDeadLetters()
	require.Len(t, dead, 1)
	require.Equal(t, int64(2), dead[0].Sequence)
	require.Equal(t, sequencer.ReasonHandlerFailed, dead[0].Reason)
	require.Equal(t, "boom", dead[0].Description)
	require.Empty(t, b.broker.DeadLetters(), "not dead-lettered at the broker: it left it")
	require.Equal(t, []int64{3}, b.store.HeldMessages("a"))
	st, _ := b.store.Get("a")
	require.NotNil(t, st.Parked)
	require.NotContains(t, st.Deferred, int64(2), "the index entry went with the move")

	require.Equal(t, sequencer.OutcomeEnded, b.runByID(t, "a", &sequencer.RunOptions{Resume: &sequencer.ResumeOptions{Skip: true}}))
	require.Equal(t, []int64{1, 3}, b.got("a"))
	require.Empty(t, b.store.HeldMessages("a"))
}

// Switching between defer and store loses nothing: what one kept aside, the other finds.
func TestEarlyMessagesSwitch(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name          string
		before, after sequencer.EarlyMessages
	}{
		{"defer then store", sequencer.EarlyDefer, sequencer.EarlyStore},
		{"store then defer", sequencer.EarlyStore, sequencer.EarlyDefer},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := storeCfg
			cfg.EarlyMessages = tt.before
			b := setupHolding(t, cfg)
			b.broker.PublishSeq("a", 3, true)
			b.broker.PublishSeq("a", 2, false)
			_, _ = b.runNext(t)
			cfg.EarlyMessages = tt.after
			// The worker's Postgres store holds messages whatever the mode.
			b.engine = b.newEngine(t, cfg, b.storeClient().Holding())
			b.broker.PublishSeq("a", 1, false)
			out, ok := b.runNext(t)
			require.True(t, ok)
			require.Equal(t, sequencer.OutcomeEnded, out)
			require.Equal(t, []int64{1, 2, 3}, b.got("a"))
			require.Zero(t, b.broker.Len())
			require.Empty(t, b.store.HeldMessages("a"))
		})
	}
}

func TestEarlyStoreNeedsAHeldStore(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{})
	_, err := sequencer.NewEngine(storeCfg, sequencer.EngineDeps{Store: b.storeClient(), Handler: sequencer.HandlerFunc(b.handle)})
	require.ErrorContains(t, err, "EarlyMessages store needs a state store that holds messages")
	cfg := storeCfg
	cfg.Poison = sequencer.PoisonBlock
	require.ErrorContains(t, cfg.WithDefaults().Validate(), "EarlyMessages store does not go with PoisonBlock")
	cfg = storeCfg
	cfg.Held.TotalBytes = -1
	require.ErrorContains(t, cfg.WithDefaults().Validate(), "Held limits must not be negative")
}

// noDeferral is a source whose provider cannot defer (as SQS FIFO).
type noDeferral struct{ sequencer.SessionSource }

func (noDeferral) Capabilities() sequencer.Capabilities { return sequencer.Capabilities{} }

// A Runner over a provider without deferral holds early messages in the store unless told to
// defer, which it refuses.
func TestRunnerPicksTheKeeperTheProviderSupports(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{})
	src := noDeferral{b.client}
	r, err := sequencer.NewRunner(sequencer.RunnerConfig{Source: src, Store: b.storeClient().Holding(), Handler: sequencer.HandlerFunc(b.handle)})
	require.NoError(t, err)
	require.Equal(t, sequencer.EarlyStore, r.Engine().Config().EarlyMessages)

	_, err = sequencer.NewRunner(sequencer.RunnerConfig{Source: src, Store: b.storeClient(), Handler: sequencer.HandlerFunc(b.handle)})
	require.ErrorContains(t, err, "needs a state store that holds messages", "a store without held messages cannot serve it")
	_, err = sequencer.NewRunner(sequencer.RunnerConfig{Source: src, Store: b.storeClient().Holding(), Handler: sequencer.HandlerFunc(b.handle),
		Engine: sequencer.EngineConfig{EarlyMessages: sequencer.EarlyDefer}})
	require.ErrorContains(t, err, "needs a provider that defers")

	r, err = sequencer.NewRunner(sequencer.RunnerConfig{Source: b.client, Store: b.storeClient(), Handler: sequencer.HandlerFunc(b.handle)})
	require.NoError(t, err)
	require.Equal(t, sequencer.EarlyDefer, r.Engine().Config().EarlyMessages, "a source that says nothing keeps the default")
}

// completingAtClose is a source whose sessions keep up to n completions until they close (as
// SQS FIFO deleting in batches).
type completingAtClose struct {
	sequencer.SessionSource
	n int
}

func (c completingAtClose) Capabilities() sequencer.Capabilities {
	return sequencer.Capabilities{CompletionsAtClose: c.n}
}

// A Runner refuses an engine whose replay window does not cover the completions its provider
// keeps until a session closes.
func TestRunnerRefusesAReplayWindowBelowTheCompletionsKept(t *testing.T) {
	t.Parallel()
	b := setup(t, sequencer.EngineConfig{})
	for _, tt := range []struct {
		name    string
		engine  sequencer.EngineConfig
		refused bool
	}{
		{"awaited", sequencer.EngineConfig{Pipelining: sequencer.Awaited}, true},
		{"pipelined, window 9", sequencer.EngineConfig{Pipelining: sequencer.Pipelined, MaxPendingSettlements: 8}, true},
		{"pipelined, window 10", sequencer.EngineConfig{Pipelining: sequencer.Pipelined, MaxPendingSettlements: 9}, false},
		{"pipelined, the default window", sequencer.EngineConfig{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sequencer.NewRunner(sequencer.RunnerConfig{Source: completingAtClose{b.client, 10}, Store: b.storeClient().Holding(),
				Handler: sequencer.HandlerFunc(b.handle), Engine: tt.engine})
			if tt.refused {
				require.ErrorContains(t, err, "keeps up to 10 completions of a session until the session closes")
				require.ErrorContains(t, err, "MaxPendingSettlements of at least 9")
				return
			}
			require.NoError(t, err)
		})
	}
}

// A message the store cannot keep (a property of a type it does not keep) stays at the broker,
// as past a bound; nothing is lost.
func TestEarlyStoreNotHoldable(t *testing.T) {
	t.Parallel()
	b := setupHolding(t, storeCfg)
	b.broker.Publish("a", map[string]any{"Sequence": int64(2), "Odd": struct{}{}}, nil)
	out, ok := b.runNext(t)
	require.True(t, ok)
	require.Equal(t, sequencer.OutcomeIdle, out)
	require.Empty(t, b.store.HeldMessages("a"))
	active, _ := b.broker.Pending("a")
	require.Equal(t, 1, active)
	b.broker.PublishSeq("a", 1, false)
	b.clock.Advance(time.Minute)
	cfg := storeCfg
	cfg.ReceiveBatch = 32
	b.engine = b.newEngine(t, cfg, b.storeClient().Holding())
	_, ok = b.runNext(t)
	require.True(t, ok)
	require.Equal(t, []int64{1, 2}, b.got("a"))
}

// Reversed arrival past the bound: the broker delivers the early messages first, so a run that
// released the session at the bound would meet them first again, forever; the window keeps what
// the store refuses and the run reaches the message for Next behind them.
func TestEarlyStoreHeldFullReachesNext(t *testing.T) {
	t.Parallel()
	cfg := storeCfg
	cfg.Held = sequencer.HeldLimits{SessionMessages: 2}
	b := setupHolding(t, cfg)
	for seq := int64(6); seq >= 1; seq-- {
		b.broker.PublishSeq("a", seq, seq == 6)
	}
	out, ok := b.runNext(t)
	require.True(t, ok)
	require.Equal(t, sequencer.OutcomeEnded, out)
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, b.got("a"))
	require.Len(t, b.eventsOf(sequencer.EventHeldInStore), 2, "6 and 5 were held; 4 was refused")
	require.Len(t, b.eventsOf(sequencer.EventHeldFull), 1, "once a run")
	require.Empty(t, b.store.HeldMessages("a"))
	require.Zero(t, b.broker.Len())
}

// Past WindowBytes too the run ends (OutcomeHeldFull) and the broker keeps what it did not hold.
func TestEarlyStoreHeldFullPastWindowBytes(t *testing.T) {
	t.Parallel()
	cfg := storeCfg
	cfg.Held = sequencer.HeldLimits{SessionMessages: 1}
	cfg.WindowBytes = 10
	b := setupHolding(t, cfg)
	for seq := int64(4); seq >= 2; seq-- {
		b.broker.Publish("a", map[string]any{"Sequence": seq}, []byte("0123456789"))
	}
	out, ok := b.runNext(t)
	require.True(t, ok)
	require.Equal(t, sequencer.OutcomeHeldFull, out)
	require.Equal(t, []int64{4}, b.store.HeldMessages("a"))
	active, _ := b.broker.Pending("a")
	require.Equal(t, 2, active, "3 and 2 stay at the broker")
	require.Empty(t, b.got("a"))
}

package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	"github.com/seqbus/seqbus/sessionstate/memory"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

// sessionsByID is a SessionSource over sessions that keep their state, by id.
type sessionsByID struct {
	mu       sync.Mutex
	sessions map[string]*storetest.Session
}

func (s *sessionsByID) Accept(_ context.Context, id string) (sequencer.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[id] == nil {
		s.sessions[id] = storetest.NewSession(id)
	}
	return s.sessions[id], nil
}

func (*sessionsByID) AcceptNext(context.Context) (sequencer.Session, error) { panic("not used") }

// TestReporterReportsTheRunnersSaves: the saves made through the instrumented store are reported
// into the replica's report session (accept, set state, close: counted as report_* calls): those
// that leave a state needing no sweeper as clean, the others (and failed ones) as dirty. Nothing
// is written while nothing was saved since the last report; saves older than the window leave
// the report; a report over the state bound keeps the dirty saves and the newest clean ones.
func TestReporterReportsTheRunnersSaves(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	src := &sessionsByID{sessions: map[string]*storetest.Session{}}
	calls := map[string]int{}
	rep := &reporter{
		source: countingSource{SessionSource: src, calls: func(op string, n int) { calls["report_"+op] += n }},
		id:     sessionstate.ReportSessionID("r1"), window: time.Minute, clock: clk,
		log: slog.New(slog.DiscardHandler), saves: map[string]reporterSave{},
	}
	m, err := newMetrics(prometheus.NewRegistry(), func() float64 { return 0 }, func() map[string]uint64 { return nil }, func() float64 { return 0 })
	require.NoError(t, err)
	mem := memory.New()
	store := instrument(mem, m, rep.saved)
	ctx := context.Background()
	save := func(id string, st *sequencer.State, ver int64) int64 {
		t.Helper()
		v, _ := store.Save(ctx, sequencer.SaveParams{Session: storetest.NewSession(id), State: st, ExpectedVersion: ver})
		return v
	}
	read := func() sessionstate.Report {
		t.Helper()
		b, err := src.sessions[rep.id].GetState(ctx)
		require.NoError(t, err)
		r, err := sessionstate.DecodeReport(b)
		require.NoError(t, err)
		return r
	}

	rep.write(ctx)
	require.Empty(t, calls, "nothing saved: nothing written")

	t0 := clk.Now()
	ended := sequencer.NewState()
	ended.Next, ended.Last, ended.EndedAt = 4, 3, t0
	save("ended", ended, 0)
	open := sequencer.NewState()
	open.Next = 2
	save("open", open, 0)
	gap := sequencer.NewState()
	gap.Next, gap.Deferred[3], gap.GapSince = 2, 30, t0
	save("gap", gap, 0)
	save("conflict", open, 7) // no such version: the save fails
	v := save("deleted", open, 0)
	require.NoError(t, store.Delete(ctx, sequencer.DeleteParams{Session: storetest.NewSession("deleted"), ExpectedVersion: v}))
	clk.Advance(time.Second)
	rep.write(ctx)
	require.Equal(t, map[string]int{"report_accept": 1, "report_set_state": 1, "report_close": 1}, calls)
	r := read()
	require.Equal(t, clk.Now().UnixMilli(), r.Written.UnixMilli())
	require.Equal(t, map[string]time.Time{"ended": t0, "open": t0, "deleted": t0}, r.Clean)
	require.Equal(t, map[string]time.Time{"gap": t0, "conflict": t0}, r.Dirty)

	clk.Advance(time.Second)
	rep.write(ctx)
	require.Equal(t, 1, calls["report_set_state"], "nothing saved since the last report: nothing written")

	// The gap closes later; the first saves leave the window.
	clk.Advance(40 * time.Second)
	_, gapVer, err := mem.Load(ctx, sequencer.LoadParams{Session: storetest.NewSession("gap")})
	require.NoError(t, err)
	gap.GapSince, gap.Next = time.Time{}, 4
	delete(gap.Deferred, 3)
	save("gap", gap, gapVer)
	clk.Advance(30 * time.Second)
	rep.write(ctx)
	r = read()
	require.Equal(t, map[string]time.Time{"gap": t0.Add(42 * time.Second)}, r.Clean)
	require.Empty(t, r.Dirty)

	// Over the bound: the dirty save, then the newest clean ones that fit.
	rep.maxState = 64 + 3*(2+24)
	for i, id := range []string{"c1", "c2", "c3"} {
		save(id, ended, 0)
		if i == 0 {
			parked := sequencer.NewState()
			parked.Parked = &sequencer.Parked{Sequence: 1, BrokerSequence: 3}
			save("d1", parked, 0) // needs the sweeper: dirty
		}
		clk.Advance(time.Second)
	}
	rep.write(ctx)
	r = read()
	require.Len(t, r.Dirty, 1)
	require.Contains(t, r.Dirty, "d1")
	require.Len(t, r.Clean, 2)
	require.Contains(t, r.Clean, "c3")
	require.False(t, r.Incomplete)
}

// TestReporterFailedWriteReportsLater: a report that could not be written is written at the next
// try, with the saves made meanwhile.
func TestReporterFailedWriteReportsLater(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	src := &sessionsByID{sessions: map[string]*storetest.Session{}}
	rep := &reporter{source: src, id: sessionstate.ReportSessionID("r1"), window: time.Minute, clock: clk,
		log: slog.New(slog.DiscardHandler), saves: map[string]reporterSave{}}
	sess, _ := src.Accept(context.Background(), rep.id)
	sess.(*storetest.Session).FailSetState(errors.New("broker gone"))
	rep.saved("a", nil, nil)
	rep.write(context.Background())
	sess.(*storetest.Session).FailSetState(nil)
	rep.saved("b", nil, nil)
	rep.write(context.Background())
	b, err := sess.(sbstate.StateAccessor).GetState(context.Background())
	require.NoError(t, err)
	r, err := sessionstate.DecodeReport(b)
	require.NoError(t, err)
	require.Len(t, r.Clean, 2)
}

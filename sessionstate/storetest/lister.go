package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
)

// ListerFixture is one empty store and the Lister over it, for RunLister. Each call of a
// NewListerFunc must return a fixture of its own: the suite counts every session it lists.
type ListerFixture struct {
	Store  sequencer.StateStore
	Lister sessionstate.Lister
	// Session returns a locked session with the given id; the suite saves through it and then
	// closes it (a ScanLister locks each session again to read it).
	Session func(t *testing.T, id string) sequencer.Session
}

// NewListerFunc returns a fresh ListerFixture.
type NewListerFunc func(t *testing.T) ListerFixture

// RunLister exercises a sessionstate.Lister against its contract. Subtests run in parallel.
func RunLister(t *testing.T, newFixture NewListerFunc) {
	t.Helper()
	ctx := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	// The sessions the suite stores, each with what its state says.
	states := map[string]func() *sequencer.State{
		"a-plain": func() *sequencer.State { return stateWithNext(4) },
		"b-parked": func() *sequencer.State {
			st := stateWithNext(7)
			st.Parked = &sequencer.Parked{Sequence: 7, BrokerSequence: 70, Reason: "handler failed", At: now}
			return st
		},
		"c-gap": func() *sequencer.State {
			st := stateWithNext(2)
			st.Deferred[5] = 50
			st.GapSince = now
			return st
		},
		"d-stranded": func() *sequencer.State {
			st := stateWithNext(3)
			st.Deferred[3] = 30 // the message for Next is deferred: accept-next will not offer it
			return st
		},
		"f-blocked": func() *sequencer.State {
			st := stateWithNext(6)
			st.Blocked = &sequencer.Blocked{Sequence: 6, BrokerSequence: 60, Reason: "downstream 503", Since: now, Times: 2}
			return st
		},
		"g-retrying": func() *sequencer.State {
			st := stateWithNext(4)
			st.Deferred[4] = 40 // deferred until its next attempt: not stranded, woken at its time
			st.Retrying = &sequencer.Retrying{Sequence: 4, BrokerSequence: 40, At: now.Add(30 * time.Second), Attempts: 3, Reason: "partner down"}
			return st
		},
		"e-ended": func() *sequencer.State {
			st := stateWithNext(9)
			st.Last, st.EndedAt = 8, now
			return st
		},
		// A tombstone whose index still lists a handled message deferred at the broker (its
		// completion was refused as busy): stranded, it needs one run.
		"h-ended-stale": func() *sequencer.State {
			st := stateWithNext(9)
			st.Last, st.EndedAt, st.Deferred[5] = 8, now, 50
			return st
		},
	}
	seed := func(t *testing.T, f ListerFixture) map[string]int64 {
		t.Helper()
		versions := map[string]int64{}
		for id, st := range states {
			s := f.Session(t, id)
			v, err := f.Store.Save(ctx(t), sequencer.SaveParams{Session: s, State: st()})
			require.NoError(t, err)
			require.NoError(t, s.Close(ctx(t)))
			versions[id] = v
		}
		// A session locked but never saved has no state and is not listed.
		require.NoError(t, f.Session(t, "z-stateless").Close(ctx(t)))
		return versions
	}
	ids := func(es []sessionstate.Entry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.SessionID)
		}
		return out
	}

	t.Run("ListsStoredStatesByIDWithoutEnded", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		versions := seed(t, f)
		got, err := f.Lister.List(ctx(t), sessionstate.ListParams{})
		require.NoError(t, err)
		require.Equal(t, []string{"a-plain", "b-parked", "c-gap", "d-stranded", "f-blocked", "g-retrying"}, ids(got))
		for _, e := range got {
			require.False(t, e.Busy)
			require.Equal(t, versions[e.SessionID], e.Version, e.SessionID)
			requireStateEqual(t, states[e.SessionID](), e.State)
		}
		got, err = f.Lister.List(ctx(t), sessionstate.ListParams{Filter: sessionstate.Filter{Ended: true}})
		require.NoError(t, err)
		require.Equal(t, []string{"a-plain", "b-parked", "c-gap", "d-stranded", "e-ended", "f-blocked", "g-retrying", "h-ended-stale"}, ids(got), "tombstones on request")
	})

	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		seed(t, f)
		tests := []struct {
			filter sessionstate.Filter
			want   []string
		}{
			{sessionstate.Filter{Parked: true}, []string{"b-parked"}},
			{sessionstate.Filter{Gap: true}, []string{"c-gap"}},
			{sessionstate.Filter{Stranded: true}, []string{"d-stranded", "h-ended-stale"}},
			{sessionstate.Filter{Parked: true, Gap: true}, []string{"b-parked", "c-gap"}},
			{sessionstate.Filter{Parked: true, Ended: true}, []string{"b-parked"}},
			{sessionstate.Filter{Blocked: true}, []string{"f-blocked"}},
			{sessionstate.Filter{Blocked: true, Parked: true}, []string{"b-parked", "f-blocked"}},
			{sessionstate.Filter{Retrying: true}, []string{"g-retrying"}},
			{sessionstate.Filter{Retrying: true, Stranded: true}, []string{"d-stranded", "g-retrying", "h-ended-stale"}},
		}
		for _, tt := range tests {
			got, err := f.Lister.List(ctx(t), sessionstate.ListParams{Filter: tt.filter})
			require.NoError(t, err)
			require.Equal(t, tt.want, ids(got), "%+v", tt.filter)
		}
	})

	t.Run("Pages", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		seed(t, f)
		var all []string
		after := ""
		for page := 0; ; page++ {
			require.Less(t, page, 10, "paging does not end")
			got, err := f.Lister.List(ctx(t), sessionstate.ListParams{After: after, Limit: 2, Filter: sessionstate.Filter{Ended: true}})
			require.NoError(t, err)
			require.LessOrEqual(t, len(got), 2)
			if len(got) == 0 {
				break
			}
			all = append(all, ids(got)...)
			after = got[len(got)-1].SessionID
		}
		require.Equal(t, []string{"a-plain", "b-parked", "c-gap", "d-stranded", "e-ended", "f-blocked", "g-retrying", "h-ended-stale"}, all)
	})

	t.Run("SeesTheLatestSave", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		versions := seed(t, f)
		s := f.Session(t, "b-parked")
		st := states["b-parked"]()
		st.Unpark(false, now)
		v, err := f.Store.Save(ctx(t), sequencer.SaveParams{Session: s, State: st, ExpectedVersion: versions["b-parked"]})
		require.NoError(t, err)
		require.NoError(t, s.Close(ctx(t)))
		got, err := f.Lister.List(ctx(t), sessionstate.ListParams{Filter: sessionstate.Filter{Parked: true}})
		require.NoError(t, err)
		require.Empty(t, got, "the unparked session is no longer listed as parked")
		got, err = f.Lister.List(ctx(t), sessionstate.ListParams{After: "a-plain", Limit: 1})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, v, got[0].Version)
		require.Nil(t, got[0].State.Parked)
	})
}

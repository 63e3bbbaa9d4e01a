package broker

import (
	"slices"
	"strings"
	"time"

	"github.com/google/btree"
)

// sessionIndex keeps an entity's sessions ordered two ways, so that listing them costs what a
// page returns, not what the entity ever held: byID (every session the entity has, for the
// listing of every session with messages or state, which pages by id) and byState (the sessions
// with state, ordered by when it was last set, for the listing of the sessions changed after a
// time). With 100,000 sessions a page from a plain map scan and sort took 64 ms, under the
// broker's lock (BenchmarkManySessions).
type sessionIndex struct {
	byID    *btree.BTreeG[*session]
	byState *btree.BTreeG[*session]
}

func newSessionIndex() sessionIndex {
	return sessionIndex{
		byID: btree.NewG(32, func(a, b *session) bool { return a.id < b.id }),
		byState: btree.NewG(32, func(a, b *session) bool {
			if !a.stateUpdated.Equal(b.stateUpdated) {
				return a.stateUpdated.Before(b.stateUpdated)
			}
			return a.id < b.id
		}),
	}
}

// added and removed keep byID; a session's state must be unset (setState(nil)) before it is
// removed.
func (x sessionIndex) added(ss *session)   { x.byID.ReplaceOrInsert(ss) }
func (x sessionIndex) removed(ss *session) { x.byID.Delete(ss) }

// setState sets ss's state (nil clears it) as of now, keeping byState.
func (x sessionIndex) setState(ss *session, state []byte, now time.Time) {
	if ss.state != nil {
		x.byState.Delete(ss)
	}
	ss.state, ss.stateUpdated = state, now
	if state != nil {
		x.byState.ReplaceOrInsert(ss)
	}
}

// changedScanLimit bounds how many recently changed sessions a listing gathers from byState
// (to sort them by id) before it walks byID in order instead: a listing of the few sessions
// changed since the last look costs what it returns, a listing of most of them one ordered walk
// with no sort.
const changedScanLimit = 4096

// list returns the ids of the sessions match accepts, ordered by id, after skipping skip and at
// most top (top <= 0: all). after, when not zero, says that only sessions with state set after
// it can match, so that they are gathered from byState when they are few.
func (x sessionIndex) list(after time.Time, match func(*session) bool, skip, top int) []string {
	var ids []string
	take := func(ss *session) bool {
		if !match(ss) {
			return true
		}
		if skip > 0 {
			skip--
			return true
		}
		ids = append(ids, ss.id)
		return top <= 0 || len(ids) < top
	}
	if !after.IsZero() {
		var recent []*session
		few := true
		x.byState.Descend(func(ss *session) bool {
			if !ss.stateUpdated.After(after) {
				return false
			}
			if len(recent) == changedScanLimit {
				few = false
				return false
			}
			recent = append(recent, ss)
			return true
		})
		if few {
			slices.SortFunc(recent, func(a, b *session) int { return strings.Compare(a.id, b.id) })
			for _, ss := range recent {
				if !take(ss) {
					break
				}
			}
			return ids
		}
	}
	x.byID.Ascend(take)
	return ids
}

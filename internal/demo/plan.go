package demo

import (
	"fmt"
	"math/rand/v2"
)

// Publication is one message the demo publishes.
type Publication struct {
	SessionID string
	Sequence  int64
	Last      bool
	// Duplicate is set on the extra copies of a sequence.
	Duplicate bool
}

// Plan returns what to publish: sessions × messages, each session's sequences in a shuffled
// order with duplicates extra copies of random sequences, and the sessions interleaved at random.
// The same seed gives the same plan.
func Plan(sessions, messages, duplicates int, seed uint64) []Publication {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eb0b))
	perSession := make([][]Publication, sessions)
	total := 0
	for s := range sessions {
		id := SessionID(s)
		pubs := make([]Publication, 0, messages+duplicates)
		for n := 1; n <= messages; n++ {
			pubs = append(pubs, Publication{SessionID: id, Sequence: int64(n), Last: n == messages})
		}
		for range duplicates {
			n := rng.IntN(messages) + 1
			pubs = append(pubs, Publication{SessionID: id, Sequence: int64(n), Last: n == messages, Duplicate: true})
		}
		rng.Shuffle(len(pubs), func(i, j int) { pubs[i], pubs[j] = pubs[j], pubs[i] })
		perSession[s] = pubs
		total += len(pubs)
	}
	// Interleave: repeatedly take the next message of a random session that has some left.
	out := make([]Publication, 0, total)
	live := make([]int, sessions)
	for i := range live {
		live[i] = i
	}
	next := make([]int, sessions)
	for len(live) > 0 {
		k := rng.IntN(len(live))
		s := live[k]
		out = append(out, perSession[s][next[s]])
		next[s]++
		if next[s] == len(perSession[s]) {
			live = append(live[:k], live[k+1:]...)
		}
	}
	return out
}

// SessionID names the demo's i-th session.
func SessionID(i int) string { return fmt.Sprintf("order-%03d", i+1) }

package sessionstate

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/seqbus/seqbus/sequencer"
)

// Release reports spare the Watch a read per changed session. Each replica records the last
// state it saved of each session (a save or a delete through its runner) and, every half sweep
// interval while it has any, writes a Report of those saved in the last ReportWindow into the
// state of a reserved session of its own (ReportSessionID). The sweeper's listing of changed
// sessions includes those report sessions; it reads them, and decides about each changed session
// one sweep after it was listed (when every live replica has reported the saves that made it
// change): a session whose last reported save in that window needs no sweeper is not read; one
// with no such save (a run cut short by a crash, an operator's command, a report that did not
// fit) is read.

// ReportPrefix starts the reserved session ids of the replicas' release reports.
const ReportPrefix = "seqbus.sweeper-report."

// ReportSessionID is the reserved session id of the release reports of replica.
func ReportSessionID(replica string) string { return ReportPrefix + replica }

// IsReport reports whether id is the session of a replica's release reports.
func IsReport(id string) bool { return strings.HasPrefix(id, ReportPrefix) }

// Attention is the Filter of the states a sweeper must know of: parked, blocked, on a gap,
// stranded on deferred messages, or waiting for a released retry.
var Attention = Filter{Parked: true, Blocked: true, Gap: true, Stranded: true, Retrying: true}

// NeedsSweeper reports whether a session whose stored state is st (nil: none) needs a sweeper.
// A replica reports the saves for which it does not as clean.
func NeedsSweeper(st *sequencer.State) bool { return st != nil && Attention.Match(st) }

// Report is what one replica saved of the sessions it ran, written at Written: per session id,
// its last save within the report's window, when (Clean or Dirty: whether the saved state needs
// a sweeper; a failed save counts as dirty, its outcome being unknown). Incomplete says dirty
// saves were left out (more than fit), so that no clean save of that window explains anything.
type Report struct {
	Written    time.Time
	Clean      map[string]time.Time
	Dirty      map[string]time.Time
	Incomplete bool
}

// reportJSON is a Report on the wire: times as milliseconds before Written, to stay small.
type reportJSON struct {
	Written    int64            `json:"w"`
	Clean      map[string]int64 `json:"c,omitempty"`
	Dirty      map[string]int64 `json:"d,omitempty"`
	Incomplete bool             `json:"x,omitempty"`
}

// Encode returns r in at most maxBytes (0: no bound): every dirty save, then the most recent
// clean saves that fit. A dirty save that does not fit makes the report Incomplete. dropped is
// how many saves were left out.
func (r Report) Encode(maxBytes int) (b []byte, dropped int, err error) {
	w := r.Written.UnixMilli()
	out := reportJSON{Written: w, Clean: map[string]int64{}, Dirty: map[string]int64{}, Incomplete: r.Incomplete}
	// Every entry costs about len(id)+20 bytes: `"id":-123456,`; the bound keeps a margin.
	size := 64
	fits := func(id string) bool {
		n := len(id) + 24
		if maxBytes > 0 && size+n > maxBytes {
			return false
		}
		size += n
		return true
	}
	byTime := func(m map[string]time.Time) []string {
		ids := slices.Collect(maps.Keys(m))
		slices.SortFunc(ids, func(a, b string) int { return m[b].Compare(m[a]) }) // newest first
		return ids
	}
	for _, id := range byTime(r.Dirty) {
		if !fits(id) {
			out.Incomplete = true
			dropped++
			continue
		}
		out.Dirty[id] = r.Dirty[id].UnixMilli() - w
	}
	for _, id := range byTime(r.Clean) {
		if !fits(id) {
			dropped++
			continue
		}
		out.Clean[id] = r.Clean[id].UnixMilli() - w
	}
	b, err = json.Marshal(out)
	if err != nil {
		return nil, 0, fmt.Errorf("sessionstate: encode a release report: %w", err)
	}
	return b, dropped, nil
}

// DecodeReport decodes a Report written by Encode.
func DecodeReport(b []byte) (Report, error) {
	var in reportJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return Report{}, fmt.Errorf("sessionstate: decode a release report: %w", err)
	}
	if in.Written == 0 {
		return Report{}, fmt.Errorf("sessionstate: a release report without its time")
	}
	r := Report{Written: time.UnixMilli(in.Written).UTC(), Clean: map[string]time.Time{}, Dirty: map[string]time.Time{}, Incomplete: in.Incomplete}
	for id, d := range in.Clean {
		r.Clean[id] = time.UnixMilli(in.Written + d).UTC()
	}
	for id, d := range in.Dirty {
		r.Dirty[id] = time.UnixMilli(in.Written + d).UTC()
	}
	return r, nil
}

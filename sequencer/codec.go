package sequencer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Binary layout of an encoded State (version 1). All integers are varints (encoding/binary):
// "uv" is unsigned, "sv" is zig-zag signed.
//
//	magic      2 bytes  's' 'q'
//	version    1 byte   1
//	flags      uv       bit 0: Parked present, bit 1: EndedAt set, bit 2: GapSince set,
//	                    bit 3: UpdatedAt set, bit 4: SkippedPoison present, bit 5: InFlight present,
//	                    bit 6: Blocked present, bit 7: Retrying present, bit 8: Ahead (no data),
//	                    bit 9: Parked.Held (no data)
//	next       sv
//	last       sv
//	counters   7 × uv   Handled, Deferred, Duplicates, Invalid, DeadLettered, Retries, Skipped
//	updatedAt  time     if flag 3
//	endedAt    time     if flag 1
//	gapSince   time     if flag 2
//	parked     if flag 0: sequence sv, broker sequence sv, at time, reason (uv length + bytes)
//	deferred   count uv, then per entry sorted by application sequence:
//	           application sequence: first sv, then uv delta to the previous (≥ 1)
//	           broker sequence:      sv delta to the previous entry's broker sequence
//	skipped    if flag 4: SkippedPoison, encoded like deferred
//	in flight  if flag 5: InFlight, encoded like deferred
//	blocked    if flag 6: sequence sv, broker sequence sv, since time, times uv, reason (uv length +
//	           bytes)
//	retrying   if flag 7: sequence sv, broker sequence sv, at time, attempts uv, reason (uv length +
//	           bytes)
//
// Flags a decoder does not know make the state unreadable to it: a state with Blocked (written by
// a worker that uses PoisonBlock) cannot be read by a worker from before Blocked existed, nor one
// with Retrying (RetryReleaseAfter) by a worker from before Retrying existed, nor one with Ahead
// (SaveEachMessage with Pipelined) by a worker from before Ahead existed, nor one parked with
// Parked.Held (EarlyStore) by a worker from before Parked.Held existed.
//
// A time is sv seconds since the Unix epoch followed by uv nanoseconds (< 1e9), decoded in UTC.
// Sorted application sequences are usually consecutive and broker sequence numbers grow with them,
// so a deferred entry typically takes 2–4 bytes: 5,000 entries fit in about 20 KB.
const (
	codecMagic0  = 's'
	codecMagic1  = 'q'
	codecVersion = 1

	flagParked   = 1 << 0
	flagEnded    = 1 << 1
	flagGap      = 1 << 2
	flagUpdated  = 1 << 3
	flagSkipped  = 1 << 4
	flagInFlight = 1 << 5
	flagBlocked  = 1 << 6
	flagRetrying = 1 << 7
	flagAhead    = 1 << 8
	flagHeld     = 1 << 9
	flagsKnown   = flagParked | flagEnded | flagGap | flagUpdated | flagSkipped | flagInFlight | flagBlocked | flagRetrying | flagAhead | flagHeld
	maxReasonLen = 4096
)

// ErrCorruptState is wrapped by UnmarshalBinary for any input it cannot decode.
var ErrCorruptState = errors.New("sequencer: corrupt state encoding")

// MarshalBinary encodes the state in the compact, versioned binary format described above.
// A Parked.Reason longer than 4 KiB is truncated.
func (s *State) MarshalBinary() ([]byte, error) {
	var flags uint64
	if s.Parked != nil {
		flags |= flagParked
		if s.Parked.Held {
			flags |= flagHeld
		}
	}
	if !s.EndedAt.IsZero() {
		flags |= flagEnded
	}
	if !s.GapSince.IsZero() {
		flags |= flagGap
	}
	if !s.UpdatedAt.IsZero() {
		flags |= flagUpdated
	}
	if len(s.SkippedPoison) > 0 {
		flags |= flagSkipped
	}
	if len(s.InFlight) > 0 {
		flags |= flagInFlight
	}
	if s.Blocked != nil {
		flags |= flagBlocked
	}
	if s.Retrying != nil {
		flags |= flagRetrying
	}
	if s.Ahead {
		flags |= flagAhead
	}
	b := make([]byte, 0, 64+len(s.Deferred)*4)
	b = append(b, codecMagic0, codecMagic1, codecVersion)
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendVarint(b, s.Next)
	b = binary.AppendVarint(b, s.Last)
	c := s.Counters
	for _, v := range [...]uint64{c.Handled, c.Deferred, c.Duplicates, c.Invalid, c.DeadLettered, c.Retries, c.Skipped} {
		b = binary.AppendUvarint(b, v)
	}
	if flags&flagUpdated != 0 {
		b = appendTime(b, s.UpdatedAt)
	}
	if flags&flagEnded != 0 {
		b = appendTime(b, s.EndedAt)
	}
	if flags&flagGap != 0 {
		b = appendTime(b, s.GapSince)
	}
	if p := s.Parked; p != nil {
		b = binary.AppendVarint(b, p.Sequence)
		b = binary.AppendVarint(b, p.BrokerSequence)
		b = appendTime(b, p.At)
		b = appendReason(b, p.Reason)
	}
	b = appendIndex(b, s.Deferred)
	if flags&flagSkipped != 0 {
		b = appendIndex(b, s.SkippedPoison)
	}
	if flags&flagInFlight != 0 {
		b = appendIndex(b, s.InFlight)
	}
	if bl := s.Blocked; bl != nil {
		b = binary.AppendVarint(b, bl.Sequence)
		b = binary.AppendVarint(b, bl.BrokerSequence)
		b = appendTime(b, bl.Since)
		b = binary.AppendUvarint(b, bl.Times)
		b = appendReason(b, bl.Reason)
	}
	if rt := s.Retrying; rt != nil {
		b = binary.AppendVarint(b, rt.Sequence)
		b = binary.AppendVarint(b, rt.BrokerSequence)
		b = appendTime(b, rt.At)
		b = binary.AppendUvarint(b, rt.Attempts)
		b = appendReason(b, rt.Reason)
	}
	return b, nil
}

// appendReason appends a reason text (at most 4 KiB of it) with its length.
func appendReason(b []byte, reason string) []byte {
	if len(reason) > maxReasonLen {
		reason = reason[:maxReasonLen]
	}
	b = binary.AppendUvarint(b, uint64(len(reason)))
	return append(b, reason...)
}

// UnmarshalBinary decodes a state written by MarshalBinary. It returns an error wrapping
// ErrCorruptState for any malformed input and never panics; s is only changed on success.
func (s *State) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	if len(b) < 3 || b[0] != codecMagic0 || b[1] != codecMagic1 {
		return fmt.Errorf("%w: bad magic", ErrCorruptState)
	}
	if b[2] != codecVersion {
		return fmt.Errorf("%w: unsupported version %d", ErrCorruptState, b[2])
	}
	d.b = b[3:]
	flags := d.uvarint("flags")
	if d.err == nil && flags&^flagsKnown != 0 {
		return fmt.Errorf("%w: unknown flags %#x", ErrCorruptState, flags)
	}
	var out State
	out.Ahead = flags&flagAhead != 0
	out.Next = d.varint("next")
	out.Last = d.varint("last")
	for _, p := range [...]*uint64{&out.Counters.Handled, &out.Counters.Deferred, &out.Counters.Duplicates,
		&out.Counters.Invalid, &out.Counters.DeadLettered, &out.Counters.Retries, &out.Counters.Skipped} {
		*p = d.uvarint("counters")
	}
	if flags&flagUpdated != 0 {
		out.UpdatedAt = d.time("updated_at")
	}
	if flags&flagEnded != 0 {
		out.EndedAt = d.time("ended_at")
	}
	if flags&flagGap != 0 {
		out.GapSince = d.time("gap_since")
	}
	if flags&flagParked != 0 {
		p := &Parked{}
		p.Sequence = d.varint("parked.sequence")
		p.BrokerSequence = d.varint("parked.broker_sequence")
		p.At = d.time("parked.at")
		p.Reason = d.reason("parked.reason")
		p.Held = flags&flagHeld != 0
		out.Parked = p
	} else if flags&flagHeld != 0 {
		d.fail("held flag without a parked mark")
	}
	out.Deferred = d.index("deferred")
	if flags&flagSkipped != 0 {
		out.SkippedPoison = d.index("skipped poison")
		if d.err == nil && len(out.SkippedPoison) == 0 {
			d.fail("empty skipped poison index")
		}
	}
	if flags&flagInFlight != 0 {
		out.InFlight = d.index("in flight")
		if d.err == nil && len(out.InFlight) == 0 {
			d.fail("empty in-flight index")
		}
	}
	if flags&flagBlocked != 0 {
		bl := &Blocked{}
		bl.Sequence = d.varint("blocked.sequence")
		bl.BrokerSequence = d.varint("blocked.broker_sequence")
		bl.Since = d.time("blocked.since")
		bl.Times = d.uvarint("blocked.times")
		bl.Reason = d.reason("blocked.reason")
		out.Blocked = bl
	}
	if flags&flagRetrying != 0 {
		rt := &Retrying{}
		rt.Sequence = d.varint("retrying.sequence")
		rt.BrokerSequence = d.varint("retrying.broker_sequence")
		rt.At = d.time("retrying.at")
		rt.Attempts = d.uvarint("retrying.attempts")
		rt.Reason = d.reason("retrying.reason")
		out.Retrying = rt
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return d.err
	}
	*s = out
	return nil
}

// appendIndex encodes a sequence → broker sequence map: count, then the entries sorted by key
// with delta-encoded keys and broker sequence numbers.
func appendIndex(b []byte, m map[int64]int64) []byte {
	keys := make([]int64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	var prevKey, prevBroker int64
	for i, k := range keys {
		if i == 0 {
			b = binary.AppendVarint(b, k)
		} else {
			b = binary.AppendUvarint(b, uint64(k)-uint64(prevKey))
		}
		bs := m[k]
		b = binary.AppendVarint(b, bs-prevBroker) // wraps on overflow; decoding wraps back
		prevKey, prevBroker = k, bs
	}
	return b
}

// index decodes what appendIndex wrote.
func (d *decoder) index(field string) map[int64]int64 {
	n := d.uvarint(field + " count")
	// Every entry takes at least two bytes, which bounds the allocation for hostile input.
	if d.err == nil && n > uint64(len(d.b)/2) {
		d.fail("%s count %d exceeds input", field, n)
	}
	if d.err != nil {
		return map[int64]int64{}
	}
	out := make(map[int64]int64, n)
	keyField, deltaField, brokerField := field+" key", field+" key delta", field+" broker sequence"
	var prevKey, prevBroker int64
	for i := uint64(0); d.err == nil && i < n; i++ {
		var k int64
		if i == 0 {
			k = d.varint(keyField)
		} else {
			delta := d.uvarint(deltaField)
			// The true headroom MaxInt64-prevKey lies in [0, 2^64-1], so modular arithmetic is exact.
			if d.err == nil && (delta == 0 || delta > uint64(math.MaxInt64)-uint64(prevKey)) {
				d.fail("%s key delta %d after %d", field, delta, prevKey)
			}
			k = int64(uint64(prevKey) + delta)
		}
		bs := prevBroker + d.varint(brokerField)
		if d.err == nil {
			out[k] = bs
		}
		prevKey, prevBroker = k, bs
	}
	return out
}

func appendTime(b []byte, t time.Time) []byte {
	b = binary.AppendVarint(b, t.Unix())
	return binary.AppendUvarint(b, uint64(t.Nanosecond()))
}

// decoder reads varints and remembers the first error.
type decoder struct {
	b   []byte
	err error
}

// reason reads a reason text written by appendReason.
func (d *decoder) reason(field string) string {
	n := d.uvarint(field + " length")
	if d.err == nil && (n > maxReasonLen || n > uint64(len(d.b))) {
		d.fail("%s length %d", field, n)
	}
	if d.err != nil {
		return ""
	}
	r := string(d.b[:n])
	d.b = d.b[n:]
	return r
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorruptState, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("reading %s", field)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(field string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("reading %s", field)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) time(field string) time.Time {
	sec := d.varint(field)
	nsec := d.uvarint(field)
	if d.err != nil {
		return time.Time{}
	}
	if nsec >= 1e9 {
		d.fail("%s nanoseconds %d", field, nsec)
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

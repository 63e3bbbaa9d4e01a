package operator

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/sequencer"
)

// DeadLetterQueue is a dead-letter queue that has neither peek nor sessions, read by receiving:
// the redrive dead-letter queue of an SQS FIFO queue (sqsadapter.DeadLetters). Its messages
// are described as the Service Bus SDK's, so that listing and copying them is the same.
type DeadLetterQueue interface {
	// Target names the queue replayed copies are sent to: the queue the workers read.
	Target() string
	// Receive receives every dead letter the queue offers now, each invisible to others until
	// released or deleted.
	Receive(ctx context.Context) ([]*azservicebus.ReceivedMessage, error)
	// Release makes received dead letters visible again.
	Release(ctx context.Context, msgs []*azservicebus.ReceivedMessage) error
	// Delete removes received dead letters and returns how many it removed.
	Delete(ctx context.Context, msgs []*azservicebus.ReceivedMessage) (int, error)
	// Send sends copies to Target in order and returns how many were sent before the first that
	// failed. A copy's MessageID is its deduplication id there.
	Send(ctx context.Context, copies []*azservicebus.Message) (int, error)
	// Visible counts the messages of the queue still visible (approximately): after Receive,
	// those held back behind their groups' messages in flight.
	Visible(ctx context.Context) (int, error)
	// InFlight counts the messages of the queue received and neither released nor deleted
	// (approximately), by anyone.
	InFlight(ctx context.Context) (int, error)
}

// takeQueue waits for the turn to read the DeadLetterQueue, until ctx ends; done gives it back.
// The reads of one Operator (a console's pages and actions) thus each see every dead letter
// that no other process holds.
func (o *Operator) takeQueue(ctx context.Context) (done func(), err error) {
	select {
	case o.queueTurn <- struct{}{}:
		return func() { <-o.queueTurn }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for another read of the dead-letter queue: %w", ctx.Err())
	}
}

// readQueue receives the whole dead-letter queue, counts what stayed unread, and releases
// everything again; the messages are returned in broker sequence order.
func (o *Operator) readQueue(ctx context.Context) (msgs []*azservicebus.ReceivedMessage, unread int, err error) {
	dl := o.cfg.DeadLetters
	msgs, err = dl.Receive(ctx)
	defer o.releaseQueue(ctx, msgs)
	if err != nil {
		return nil, 0, err
	}
	if unread, err = dl.Visible(ctx); err != nil {
		return nil, 0, err
	}
	slices.SortStableFunc(msgs, func(a, b *azservicebus.ReceivedMessage) int {
		return cmp.Compare(deref64(a.SequenceNumber), deref64(b.SequenceNumber))
	})
	return msgs, unread, nil
}

// releaseQueue releases msgs, even when ctx has ended; a failure is logged (they come back when
// their visibility timeout lapses).
func (o *Operator) releaseQueue(ctx context.Context, msgs []*azservicebus.ReceivedMessage) {
	if len(msgs) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := o.cfg.DeadLetters.Release(cctx, msgs); err != nil {
		o.log.WarnContext(ctx, "operator: releasing dead letters failed; they return when their visibility timeout lapses",
			slog.Int("num_messages", len(msgs)), slog.Any("error", err))
	}
}

// queueList is DLQList on a DeadLetterQueue.
func (o *Operator) queueList(ctx context.Context, p DLQListParams) (*DLQListResult, error) {
	done, err := o.takeQueue(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	msgs, unread, err := o.readQueue(ctx)
	if err != nil {
		return nil, err
	}
	res := &DLQListResult{Messages: []BrokerMessage{}, Unread: unread}
	for _, m := range msgs {
		if !matches(m, p.SessionID, p.Reason) {
			continue
		}
		if p.Limit > 0 && len(res.Messages) == p.Limit {
			res.Truncated = true
			break
		}
		res.Messages = append(res.Messages, o.brokerMessage(m))
	}
	return res, nil
}

// queueMessage is DLQMessage on a DeadLetterQueue.
func (o *Operator) queueMessage(ctx context.Context, p DLQMessageParams) (*azservicebus.ReceivedMessage, error) {
	done, err := o.takeQueue(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	msgs, _, err := o.readQueue(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if deref64(m.SequenceNumber) == p.BrokerSequence {
			return m, nil
		}
	}
	return nil, fmt.Errorf("dead letter %d of %s: %w", p.BrokerSequence, o.cfg.DeadLetters.Target(), ErrUnknownMessage)
}

// queueReplay is DLQReplay on a DeadLetterQueue. A FIFO dead-letter queue hands out a group's
// next messages only once those in flight are gone, so the replay goes in rounds: receive what
// is offered, send the copies of the selected dead letters (with the store's dead letters of
// their sessions up to the highest sequence among them, in ascending sequence), delete those
// originals, and receive again until a round offers nothing selected; the store's dead letters
// left are sent last, after a wait of up to p.Wait for dead letters another receiver has in
// flight (a replay that crashed). What is not selected stays received until the end, then is
// released.
func (o *Operator) queueReplay(ctx context.Context, p DLQReplayParams) (*DLQReplayResult, error) {
	dl := o.cfg.DeadLetters
	if p.Target != "" && p.Target != dl.Target() {
		return nil, fmt.Errorf("%w: --target: the copies of an SQS dead letter go back to the queue the workers read (%s)", ErrInvalidInput, dl.Target())
	}
	done, err := o.takeQueue(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	res := &DLQReplayResult{Target: dl.Target(), DryRun: p.DryRun, Sessions: []ReplayedSession{}}
	held, _, err := o.heldDeadLetters(ctx, p.SessionID, p.Reason, 0)
	if err != nil {
		return nil, err
	}
	storeLeft := map[string][]*sequencer.HeldDeadLetter{}
	for _, d := range held {
		storeLeft[d.SessionID] = append(storeLeft[d.SessionID], d)
	}

	if p.DryRun {
		msgs, _, err := o.readQueue(ctx)
		if err != nil {
			return nil, err
		}
		bySession := map[string][]*planned{}
		for _, m := range msgs {
			if sid := deref(m.SessionID); sid != "" && matches(m, p.SessionID, p.Reason) {
				seq, _ := o.position(m)
				bySession[sid] = append(bySession[sid], &planned{brokerSeq: deref64(m.SequenceNumber), session: sid, sequence: seq})
			}
		}
		for _, d := range held {
			bySession[d.SessionID] = append(bySession[d.SessionID], &planned{brokerSeq: d.BrokerSequence, session: d.SessionID, sequence: d.Sequence, held: d})
		}
		for _, id := range slices.Sorted(maps.Keys(bySession)) {
			ps := bySession[id]
			slices.SortStableFunc(ps, comparePlanned)
			rs := ReplayedSession{SessionID: id}
			for _, pl := range ps {
				rs.Sequences = append(rs.Sequences, pl.sequence)
			}
			res.Sessions = append(res.Sessions, rs)
		}
		return res, nil
	}

	// What is in flight before the run is held by another receiver; only then is there
	// anything to wait for (an approximate count that lags must not make every replay wait).
	elsewhere := 0
	if p.Wait > 0 {
		if elsewhere, err = dl.InFlight(ctx); err != nil {
			return nil, err
		}
	}
	qr := &queueReplayRun{o: o, res: res, index: map[string]int{}, others: map[int64]*azservicebus.ReceivedMessage{}, source: dl.Target()}
	defer func() { o.releaseQueue(ctx, slices.Collect(maps.Values(qr.others))) }()
	if err := qr.rounds(ctx, p, storeLeft); err != nil {
		return res, err
	}
	// Dead letters in flight that this run does not hold: a replay that crashed holds them
	// until their visibility timeout lapses. Wait for them up to p.Wait.
	deadline, told := o.waitUntil(p.Wait), false
	for elsewhere > 0 {
		n, err := dl.InFlight(ctx)
		if err != nil {
			return res, err
		}
		n -= len(qr.others)
		left := deadline.Sub(o.cfg.Clock.Now())
		if n <= 0 || left <= 0 {
			break
		}
		if !told {
			o.progress("%d dead letters are in flight elsewhere (a replay that crashed holds them until their visibility timeout lapses); waiting up to %s", n, left.Round(time.Second))
			told = true
		}
		if err := clock.Sleep(ctx, o.cfg.Clock, min(time.Second, left)); err != nil {
			return res, fmt.Errorf("replay: %w", err)
		}
		if err := qr.rounds(ctx, p, storeLeft); err != nil {
			return res, err
		}
	}
	for _, id := range slices.Sorted(maps.Keys(storeLeft)) {
		if len(storeLeft[id]) == 0 {
			continue
		}
		if err := qr.replay(ctx, id, nil, storeLeft[id]); err != nil {
			return res, err
		}
	}
	return res, nil
}

// rounds receives and replays until a round offers nothing selected. storeLeft holds the
// store's dead letters not sent yet, per session; each round takes those up to the highest
// sequence it sends of their session.
func (qr *queueReplayRun) rounds(ctx context.Context, p DLQReplayParams, storeLeft map[string][]*sequencer.HeldDeadLetter) error {
	for {
		msgs, err := qr.o.cfg.DeadLetters.Receive(ctx)
		if err != nil {
			qr.keep(msgs)
			return err
		}
		selected := map[string][]*azservicebus.ReceivedMessage{}
		for _, m := range msgs {
			sid := deref(m.SessionID)
			if sid == "" || !matches(m, p.SessionID, p.Reason) {
				qr.others[deref64(m.SequenceNumber)] = m
				continue
			}
			selected[sid] = append(selected[sid], m)
		}
		if len(selected) == 0 {
			return nil
		}
		for _, id := range slices.Sorted(maps.Keys(selected)) {
			ms := selected[id]
			delete(selected, id)
			top := int64(0)
			for _, m := range ms {
				seq, _ := qr.o.position(m)
				top = max(top, seq)
			}
			var fromStore []*sequencer.HeldDeadLetter
			fromStore, storeLeft[id] = cutHeld(storeLeft[id], top)
			if err := qr.replay(ctx, id, ms, fromStore); err != nil {
				for _, other := range selected {
					qr.keep(other)
				}
				return err
			}
		}
	}
}

// comparePlanned orders a session's dead letters for a replay: ascending sequence, those
// without a valid sequence last (the worker dead-letters them again).
func comparePlanned(a, b *planned) int {
	return cmp.Or(cmp.Compare(invalidLast(a), invalidLast(b)), cmp.Compare(a.sequence, b.sequence), cmp.Compare(a.brokerSeq, b.brokerSeq))
}

// cutHeld splits ds into those with a sequence up to top and the rest.
func cutHeld(ds []*sequencer.HeldDeadLetter, top int64) (upTo, rest []*sequencer.HeldDeadLetter) {
	for _, d := range ds {
		if d.Sequence <= top {
			upTo = append(upTo, d)
		} else {
			rest = append(rest, d)
		}
	}
	return upTo, rest
}

// queueReplayRun is one replay on a DeadLetterQueue.
type queueReplayRun struct {
	o      *Operator
	res    *DLQReplayResult
	index  map[string]int // session id → its entry in res.Sessions
	others map[int64]*azservicebus.ReceivedMessage
	source string
	sent   int
}

// keep holds msgs for the release at the end.
func (qr *queueReplayRun) keep(msgs []*azservicebus.ReceivedMessage) {
	for _, m := range msgs {
		qr.others[deref64(m.SequenceNumber)] = m
	}
}

// session returns the result entry of session id, adding it.
func (qr *queueReplayRun) session(id string) *ReplayedSession {
	i, ok := qr.index[id]
	if !ok {
		i = len(qr.res.Sessions)
		qr.index[id] = i
		qr.res.Sessions = append(qr.res.Sessions, ReplayedSession{SessionID: id, Sequences: []int64{}})
	}
	return &qr.res.Sessions[i]
}

// replay sends the copies of one session's received dead letters ms and of the store's dead
// letters ds (listed without bodies) in ascending sequence, then deletes the originals whose
// copies were sent.
func (qr *queueReplayRun) replay(ctx context.Context, id string, ms []*azservicebus.ReceivedMessage, ds []*sequencer.HeldDeadLetter) error {
	o := qr.o
	rs := qr.session(id)
	stored := map[int64]*sequencer.HeldDeadLetter{}
	if len(ds) > 0 {
		var err error
		if stored, err = o.storedDeadLettersOf(ctx, id); err != nil {
			qr.keep(ms)
			return fmt.Errorf("replay session %q: %w", id, err)
		}
	}
	type one struct {
		p *planned
		m *azservicebus.ReceivedMessage
	}
	var todo []one
	for _, m := range ms {
		seq, _ := o.position(m)
		todo = append(todo, one{p: &planned{brokerSeq: deref64(m.SequenceNumber), session: id, sequence: seq}, m: m})
	}
	for _, d := range ds {
		full, ok := stored[d.ID]
		if !ok {
			rs.Gone++ // removed meanwhile (a replay that ran alongside)
			continue
		}
		todo = append(todo, one{p: &planned{brokerSeq: d.BrokerSequence, session: id, sequence: d.Sequence, held: full}})
	}
	slices.SortStableFunc(todo, func(a, b one) int { return comparePlanned(a.p, b.p) })
	copies := make([]*azservicebus.Message, len(todo))
	for i, t := range todo {
		if t.m != nil {
			copies[i] = replayCopy(t.m, qr.source)
		} else {
			copies[i] = heldCopy(t.p.held, qr.source)
		}
	}
	n, sendErr := o.cfg.DeadLetters.Send(ctx, copies)
	qr.sent += n
	rs.Sent += n
	var fromQueue []*azservicebus.ReceivedMessage
	var sentItems []item
	for _, t := range todo[:n] {
		rs.Sequences = append(rs.Sequences, t.p.sequence)
		if t.m != nil {
			fromQueue = append(fromQueue, t.m)
		} else {
			sentItems = append(sentItems, item{d: t.p.held})
		}
	}
	for _, t := range todo[n:] {
		if t.m != nil {
			qr.others[t.p.brokerSeq] = t.m
		}
	}
	if n > 0 {
		if hook := o.cfg.AfterReplaySend; hook != nil {
			hook(qr.sent)
		}
	}
	deleted, err := o.cfg.DeadLetters.Delete(ctx, fromQueue)
	if err != nil {
		o.log.WarnContext(ctx, "operator: deleting replayed dead letters failed; a replay again sends copies the worker drops",
			slog.String("session_id", id), slog.Any("error", err))
	}
	failedStore := removeStoredDeadLetters(ctx, o, sentItems, rs)
	rs.Completed += deleted + len(sentItems) - failedStore
	rs.Uncompleted += len(fromQueue) - deleted + failedStore
	o.log.InfoContext(ctx, "operator: replayed dead letters", slog.String("session_id", id),
		slog.Int("num_sent", n), slog.Int("num_completed", deleted+len(sentItems)-failedStore),
		slog.Int("num_from_store", len(sentItems)), slog.Any("sequences", rs.Sequences))
	if sendErr != nil {
		return fmt.Errorf("replay session %q: send %d copies to %s (%d sent): %w", id, len(copies), qr.source, n, sendErr)
	}
	return nil
}

// storedDeadLettersOf returns the store's dead letters of session id, with their bodies, by id.
func (o *Operator) storedDeadLettersOf(ctx context.Context, id string) (map[int64]*sequencer.HeldDeadLetter, error) {
	hs := o.cfg.Store.(heldDeadLetterStore) // listed only for such a store
	out := map[int64]*sequencer.HeldDeadLetter{}
	var after int64
	for {
		page, err := hs.HeldDeadLetters(ctx, sequencer.HeldDeadLettersParams{SessionID: id, AfterID: after, Limit: heldBodyPage})
		if err != nil {
			return nil, fmt.Errorf("read the dead letters held in the state store: %w", err)
		}
		for _, d := range page {
			out[d.ID] = d
		}
		if len(page) < heldBodyPage {
			return out, nil
		}
		after = page[len(page)-1].ID
	}
}

// removeStoredDeadLetters removes the store's dead letters among sent, whose copies were sent,
// and returns how many removals failed.
func removeStoredDeadLetters(ctx context.Context, o *Operator, sent []item, rs *ReplayedSession) int {
	rp := &replay{o: o}
	return rp.removeStored(ctx, sent, rs)
}

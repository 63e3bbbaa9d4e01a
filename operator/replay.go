package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/sequencer"
)

// Tuning of a replay run.
const (
	// receiveBatch is how many dead letters one receive asks for.
	receiveBatch = 250
	// scanIdle ends the scan when the dead-letter queue offers nothing for this long although
	// planned messages are missing: they left the queue, or another receiver holds them.
	scanIdle = 3 * time.Second
	// renewBelow renews the lock of a dead letter whose lock has less than this left before its
	// copy is sent.
	renewBelow = 15 * time.Second
	// completers bounds the completions in flight.
	completers = 16
)

var errNotReplayable = errors.New("not replayable")

// replayable reports whether the copy of m can carry its body: the SDK's message holds one
// AMQP data section, and AMQP value or sequence bodies have no place in it.
func replayable(m *azservicebus.ReceivedMessage) error {
	if raw := m.RawAMQPMessage; raw != nil && len(raw.Body.Data) != 1 {
		return fmt.Errorf("dead letter %d (message id %q): %w: its body is not one AMQP data section", deref64(m.SequenceNumber), m.MessageID, errNotReplayable)
	}
	return nil
}

func deref64(n *int64) int64 {
	if n == nil {
		return 0
	}
	return *n
}

// replayCopy is the copy of dead letter m that goes back to the entity.
func replayCopy(m *azservicebus.ReceivedMessage, source string) *azservicebus.Message {
	props := maps.Clone(m.ApplicationProperties)
	if props == nil {
		props = map[string]any{}
	}
	// The broker's dead-letter fields travel as application properties; the copy is not dead.
	delete(props, "DeadLetterReason")
	delete(props, "DeadLetterErrorDescription")
	props[PropertyReplayedFromDLQ] = source
	id := ReplayMessageID(m.MessageID, deref64(m.SequenceNumber))
	c := &azservicebus.Message{
		MessageID:             &id,
		SessionID:             m.SessionID,
		Body:                  m.Body,
		ContentType:           m.ContentType,
		CorrelationID:         m.CorrelationID,
		Subject:               m.Subject,
		To:                    m.To,
		ReplyTo:               m.ReplyTo,
		ReplyToSessionID:      m.ReplyToSessionID,
		PartitionKey:          m.PartitionKey,
		ApplicationProperties: props,
	}
	if m.TimeToLive != nil && *m.TimeToLive > 0 {
		ttl := *m.TimeToLive
		c.TimeToLive = &ttl
	}
	return c
}

// replay is one DLQReplay run after its plan.
type replay struct {
	o      *Operator
	recv   *azservicebus.Receiver
	sender *azservicebus.Sender
	target string
	source string
	wait   time.Duration

	plan map[string][]*planned
	// missing counts, per session, the planned dead letters not locked yet; planned indexes the
	// plan by broker sequence number and last is the highest of them.
	missing map[string]int
	planned map[int64]*planned
	last    int64
	// locked holds the planned dead letters received (locked) and not replayed yet; others the
	// latest delivery of each message received besides them, abandoned at the end; seen the
	// planned ones ever received.
	locked map[int64]*azservicebus.ReceivedMessage
	others map[int64]*azservicebus.ReceivedMessage
	seen   map[int64]bool
	// scanning: the scan goes on. waitUntil bounds the wait for planned dead letters another
	// receiver holds; heldElsewhere lists those still held when the scan ended.
	scanning      bool
	waitUntil     time.Time
	heldElsewhere map[int64]bool
	told          bool

	sent int
	done []ReplayedSession
}

func (o *Operator) newReplay(ctx context.Context, target string, wait time.Duration, plan map[string][]*planned) (*replay, error) {
	recv, err := o.dlqReceiver()
	if err != nil {
		return nil, err
	}
	sender, err := o.cfg.Client.NewSender(target, nil)
	if err != nil {
		closeReceiver(ctx, recv)
		return nil, fmt.Errorf("open a sender to %s: %w", target, err)
	}
	rp := &replay{
		o: o, recv: recv, sender: sender, target: target, source: o.cfg.Entity.String(), wait: wait, plan: plan,
		missing: map[string]int{}, planned: map[int64]*planned{},
		locked: map[int64]*azservicebus.ReceivedMessage{}, others: map[int64]*azservicebus.ReceivedMessage{},
		seen: map[int64]bool{}, scanning: true, heldElsewhere: map[int64]bool{}, done: []ReplayedSession{},
	}
	for id, ps := range plan {
		for _, p := range ps {
			if p.held != nil {
				continue // the state store's: no lock to take
			}
			rp.missing[id]++
			rp.planned[p.brokerSeq] = p
			rp.last = max(rp.last, p.brokerSeq)
		}
	}
	return rp, nil
}

// close closes the links and abandons the dead letters the run still holds. The receiver goes
// first: while its link is open, a message abandoned comes straight back to it on the credit
// the last receive left, and a link closed with a delivery in hand keeps that message locked
// until the lock expires. The abandons then go by lock token through a fresh receiver's
// management link, which has no credit to take anything back.
func (rp *replay) close(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = rp.sender.Close(cctx)
	closeReceiver(cctx, rp.recv)
	held := append(slices.Collect(maps.Values(rp.others)), slices.Collect(maps.Values(rp.locked))...)
	if len(held) == 0 {
		return
	}
	settler, err := rp.o.dlqReceiver()
	if err != nil {
		rp.o.log.WarnContext(ctx, "operator: cannot abandon the dead letters held; they return when their locks expire",
			slog.Int("num_held", len(held)), slog.Any("error", err))
		return
	}
	defer closeReceiver(cctx, settler)
	rp.settle(cctx, held, func(ctx context.Context, m *azservicebus.ReceivedMessage) error {
		// A message with only its lock token is settled through the management link.
		return settler.AbandonMessage(ctx, &azservicebus.ReceivedMessage{LockToken: m.LockToken}, nil)
	})
}

// run replays the sessions in ids, each as soon as all its planned dead letters are locked (or
// the scan has ended), the ready ones in id order.
func (rp *replay) run(ctx context.Context, ids []string) error {
	pending := ids
	for len(pending) > 0 {
		var still []string
		for _, id := range pending {
			if rp.missing[id] > 0 && rp.scanning {
				still = append(still, id)
				continue
			}
			if err := rp.replaySession(ctx, id); err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("replay interrupted after session %q: %w", id, err)
			}
		}
		pending = still
		if len(pending) > 0 {
			if err := rp.scan(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// scan receives the next dead letters, keeping the planned ones and holding the rest. The scan
// ends when every planned dead letter is locked, or when the queue offers nothing more (or only
// what lies past the plan) and the planned ones still missing have left the queue. Missing ones
// still in the queue are locked by another receiver, typically a replay that crashed: the scan
// waits for their locks to expire, up to the replay's wait.
func (rp *replay) scan(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, scanIdle)
	msgs, err := rp.recv.ReceiveMessages(rctx, receiveBatch, nil)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("receive from the dead-letter queue of %s: %w", rp.o.cfg.Entity, err)
	}
	var highest int64
	for _, m := range msgs {
		seq := deref64(m.SequenceNumber)
		highest = max(highest, seq)
		p, planned := rp.planned[seq]
		_, waiting := rp.locked[seq]
		switch {
		case planned && !rp.seen[seq]:
			rp.seen[seq] = true
			rp.locked[seq] = m
			rp.missing[p.session]--
		case waiting:
			rp.locked[seq] = m // its first lock expired: this delivery holds the valid one
		default:
			rp.others[seq] = m // not planned, or replayed already and its completion failed
		}
	}
	missing := 0
	for _, n := range rp.missing {
		missing += n
	}
	switch {
	case missing == 0:
		rp.scanning = false
		return nil
	case len(msgs) > 0 && highest < rp.last:
		return nil // more to come
	}
	held, err := rp.stillQueued(ctx)
	if err != nil {
		return err
	}
	now := rp.o.cfg.Clock.Now()
	if rp.waitUntil.IsZero() {
		rp.waitUntil = now.Add(rp.wait)
	}
	if len(held) > 0 && len(msgs) == 0 && rp.wait > 0 && !rp.told {
		// Still queued, yet nothing came: another receiver holds them.
		rp.told = true
		rp.o.progress("%d dead letters to replay are locked by another receiver (a replay that crashed holds them until their locks expire); waiting up to %s",
			len(held), rp.waitUntil.Sub(now).Round(time.Second))
	}
	if len(held) == 0 || now.After(rp.waitUntil) {
		rp.heldElsewhere = held
		rp.scanning = false
		return nil
	}
	rp.renewHeld(ctx)
	return nil
}

// stillQueued peeks for the planned dead letters not received yet and returns those still in
// the dead-letter queue.
func (rp *replay) stillQueued(ctx context.Context) (map[int64]bool, error) {
	want := map[int64]bool{}
	from := int64(-1)
	for seq := range rp.planned {
		if !rp.seen[seq] {
			want[seq] = true
			if from < 0 || seq < from {
				from = seq
			}
		}
	}
	held := map[int64]bool{}
	for from >= 0 && from <= rp.last {
		page, err := rp.recv.PeekMessages(ctx, peekPage, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		if err != nil {
			return nil, fmt.Errorf("peek the dead-letter queue of %s from broker sequence %d: %w", rp.o.cfg.Entity, from, err)
		}
		if len(page) == 0 {
			break
		}
		for _, m := range page {
			seq := deref64(m.SequenceNumber)
			if want[seq] {
				held[seq] = true
			}
			from = max(from, seq+1)
		}
	}
	return held, nil
}

// renewHeld renews the locks of the planned dead letters held while the scan waits.
func (rp *replay) renewHeld(ctx context.Context) {
	for _, m := range rp.locked {
		_ = rp.keepLock(ctx, m) // a lock that expires brings the message back to the scan
	}
}

// item is one dead letter a session's replay sends: locked in the dead-letter queue (m), or
// held in the state store (d).
type item struct {
	m *azservicebus.ReceivedMessage
	d *sequencer.HeldDeadLetter
}

// replaySession sends the copies of one session's locked dead letters, and of its dead letters
// in the state store, in sequence order, in batches, completing (removing) each batch's
// originals after the batch was sent.
func (rp *replay) replaySession(ctx context.Context, id string) error {
	rs := ReplayedSession{SessionID: id, Sequences: []int64{}}
	stored, err := rp.storedDeadLetters(ctx, id)
	if err != nil {
		rp.done = append(rp.done, rs)
		return fmt.Errorf("replay session %q: %w", id, err)
	}
	var todo []item
	for _, p := range rp.plan[id] {
		if p.held != nil {
			d, ok := stored[p.held.ID]
			if !ok {
				rs.Gone++ // removed meanwhile (a replay that ran alongside)
				continue
			}
			todo = append(todo, item{d: d})
			continue
		}
		m, ok := rp.locked[p.brokerSeq]
		switch {
		case !ok && rp.heldElsewhere[p.brokerSeq]:
			rs.HeldElsewhere++
			continue
		case !ok:
			rs.Gone++
			continue
		}
		delete(rp.locked, p.brokerSeq)
		if err := rp.keepLock(ctx, m); err != nil {
			rp.o.log.WarnContext(ctx, "operator: dead letter lock lost before its copy was sent; left for the next replay",
				slog.String("session_id", id), slog.Int64("broker_sequence", p.brokerSeq), slog.Any("error", err))
			rs.Gone++
			continue
		}
		todo = append(todo, item{m: m})
	}
	for len(todo) > 0 {
		batch, n, err := rp.batch(ctx, todo)
		if err != nil {
			rp.keep(todo) // abandoned by close
			rp.done = append(rp.done, rs)
			return fmt.Errorf("replay session %q: %w", id, err)
		}
		if err := rp.sender.SendMessageBatch(ctx, batch, nil); err != nil {
			rp.keep(todo)
			rp.done = append(rp.done, rs)
			return fmt.Errorf("replay session %q: send %d copies to %s: %w", id, n, rp.target, err)
		}
		sent := todo[:n]
		todo = todo[n:]
		rp.sent += n
		rs.Sent += n
		var fromQueue []*azservicebus.ReceivedMessage
		for _, it := range sent {
			if it.d != nil {
				rs.Sequences = append(rs.Sequences, it.d.Sequence)
				continue
			}
			seq, _ := rp.o.position(it.m)
			rs.Sequences = append(rs.Sequences, seq)
			fromQueue = append(fromQueue, it.m)
		}
		if hook := rp.o.cfg.AfterReplaySend; hook != nil {
			hook(rp.sent)
		}
		failed := rp.settle(ctx, fromQueue, func(ctx context.Context, m *azservicebus.ReceivedMessage) error {
			return rp.recv.CompleteMessage(ctx, m, nil)
		})
		failed += rp.removeStored(ctx, sent, &rs)
		rs.Completed += n - failed
		rs.Uncompleted += failed
	}
	rp.o.log.InfoContext(ctx, "operator: replayed dead letters", slog.String("session_id", id),
		slog.Int("num_sent", rs.Sent), slog.Int("num_completed", rs.Completed), slog.Int("num_gone", rs.Gone),
		slog.Int("num_uncompleted", rs.Uncompleted), slog.Int("num_held_elsewhere", rs.HeldElsewhere),
		slog.Int("num_from_store", rs.FromStore), slog.Any("sequences", rs.Sequences))
	rp.done = append(rp.done, rs)
	return nil
}

// storedDeadLetters returns the session's dead letters in the state store, with their bodies,
// by id, when the plan has any.
func (rp *replay) storedDeadLetters(ctx context.Context, id string) (map[int64]*sequencer.HeldDeadLetter, error) {
	if !slices.ContainsFunc(rp.plan[id], func(p *planned) bool { return p.held != nil }) {
		return nil, nil
	}
	hs := rp.o.cfg.Store.(heldDeadLetterStore) // the plan lists them only for such a store
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

// removeStored removes the state store's dead letters among sent, whose copies were sent, and
// returns how many removals failed (they stay, and a replay sends them again, which the worker
// drops as duplicates).
func (rp *replay) removeStored(ctx context.Context, sent []item, rs *ReplayedSession) int {
	failed := 0
	for _, it := range sent {
		if it.d == nil {
			continue
		}
		rs.FromStore++
		hs := rp.o.cfg.Store.(heldDeadLetterStore)
		if err := hs.RemoveHeldDeadLetter(ctx, sequencer.RemoveHeldDeadLetterParams{ID: it.d.ID}); err != nil {
			rp.o.log.WarnContext(ctx, "operator: removing a replayed dead letter from the state store failed",
				slog.String("session_id", it.d.SessionID), slog.Int64("id", it.d.ID), slog.Any("error", err))
			failed++
		}
	}
	return failed
}

// keep hands the dead-letter queue's messages among items to close, which abandons them.
func (rp *replay) keep(items []item) {
	for _, it := range items {
		if it.m != nil {
			rp.others[deref64(it.m.SequenceNumber)] = it.m
		}
	}
}

// keepLock renews m's lock when little of it is left.
func (rp *replay) keepLock(ctx context.Context, m *azservicebus.ReceivedMessage) error {
	if m.LockedUntil != nil && m.LockedUntil.Sub(rp.o.cfg.Clock.Now()) > renewBelow {
		return nil
	}
	return rp.recv.RenewMessageLock(ctx, m, nil)
}

// batch builds the next batch from the head of items: as many as fit, at least one.
func (rp *replay) batch(ctx context.Context, items []item) (*azservicebus.MessageBatch, int, error) {
	b, err := rp.sender.NewMessageBatch(ctx, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("new message batch: %w", err)
	}
	n := 0
	for _, it := range items {
		var err error
		if it.d != nil {
			err = b.AddMessage(heldCopy(it.d, rp.source), nil)
		} else {
			err = b.AddMessage(replayCopy(it.m, rp.source), nil)
		}
		if errors.Is(err, azservicebus.ErrMessageTooLarge) && n > 0 {
			break
		}
		if err != nil {
			if it.d != nil {
				return nil, 0, fmt.Errorf("dead letter %d in the state store (message id %q): %w", it.d.ID, it.d.MessageID, err)
			}
			return nil, 0, fmt.Errorf("dead letter %d (message id %q): %w", deref64(it.m.SequenceNumber), it.m.MessageID, err)
		}
		n++
	}
	return b, n, nil
}

// settle runs fn on every message, a few at a time, and returns how many failed.
func (rp *replay) settle(ctx context.Context, msgs []*azservicebus.ReceivedMessage, fn func(context.Context, *azservicebus.ReceivedMessage) error) int {
	var (
		mu     sync.Mutex
		failed int
		wg     sync.WaitGroup
		sem    = make(chan struct{}, completers)
	)
	for _, m := range msgs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, m); err != nil {
				rp.o.log.WarnContext(ctx, "operator: settling a dead letter failed", slog.Int64("broker_sequence", deref64(m.SequenceNumber)),
					slog.String("session_id", deref(m.SessionID)), slog.Any("error", err))
				mu.Lock()
				failed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed
}

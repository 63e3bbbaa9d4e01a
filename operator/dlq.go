package operator

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/publisher"
	"github.com/seqbus/seqbus/sequencer"
)

// PropertyReplayedFromDLQ is the application property a replayed copy carries: the path of the
// entity whose dead-letter queue it came from ("orders", "topic/Subscriptions/sub"). A topic's
// other subscriptions can keep copies out with a rule such as
// "[seqbus-replayed-from-dlq] IS NULL".
const PropertyReplayedFromDLQ = "seqbus-replayed-from-dlq"

// ReplayMessageID is the MessageId of the replayed copy of a dead-lettered message: the original
// id with the dead-lettered message's broker sequence number, "<id>/dlq-<n>" (the original id
// replaced by its hex SHA-256 when that would exceed Service Bus's 128 characters).
//
// A copy cannot keep the original id: with duplicate detection on the entity, the broker drops a
// message whose id it saw within the detection window, so a copy of a message dead-lettered a
// few minutes ago would vanish without an error. The id is deterministic, so a replay that runs
// again after a crash (its copy sent, the dead letter not completed yet) sends a copy with the
// same id, which duplicate detection drops and the worker would drop as a duplicate anyway; a
// message dead-lettered again after its replay has a new broker sequence number, so its next
// replay is not mistaken for the first.
func ReplayMessageID(originalID string, brokerSequence int64) string {
	suffix := "/dlq-" + strconv.FormatInt(brokerSequence, 10)
	if utf8.RuneCountInString(originalID)+len(suffix) <= publisher.MaxMessageIDLength {
		return originalID + suffix
	}
	sum := sha256.Sum256([]byte(originalID))
	return hex.EncodeToString(sum[:]) + suffix
}

// peekPage is how many messages one peek asks for.
const peekPage = 250

// DLQListParams select the dead letters DLQList returns.
type DLQListParams struct {
	// SessionID and Reason, when set, keep only the dead letters of that session and with that
	// dead-letter reason (HandlerFailed, InvalidSequence, MaxDeliveryCountExceeded, …).
	SessionID string
	Reason    string
	// Limit bounds the messages returned (0: all).
	Limit int
}

// DLQListResult lists dead letters in the order of the dead-letter queue.
type DLQListResult struct {
	Messages  []BrokerMessage `json:"messages"`
	Truncated bool            `json:"truncated,omitempty"`
	// Unread counts, on a DeadLetterQueue (SQS), the dead letters the listing could not read:
	// a FIFO queue hands out no message of a group while one of its messages is in flight, so a
	// group's messages after the first ones received stay unread (SQS's approximate count).
	Unread int `json:"unread,omitempty"`
	// Held are the dead letters of messages the state store held (early messages kept by the
	// store, which the broker no longer has), in the order they were dead-lettered; nil with a
	// store that holds no messages. Limit bounds them apart from Messages; Truncated says
	// either was cut.
	Held []HeldInfo `json:"held,omitempty"`
}

// DLQList peeks the entity's dead-letter queue (nothing is locked or settled) and returns the
// dead letters that match p.
func (o *Operator) DLQList(ctx context.Context, p DLQListParams) (*DLQListResult, error) {
	if p.SessionID != "" {
		if err := checkSessionID(p.SessionID); err != nil {
			return nil, err
		}
	}
	if p.Limit < 0 {
		return nil, fmt.Errorf("%w: limit must not be negative, got %d", ErrInvalidInput, p.Limit)
	}
	var (
		res *DLQListResult
		err error
	)
	if o.cfg.DeadLetters != nil {
		res, err = o.queueList(ctx, p)
	} else {
		res, err = o.peekList(ctx, p)
	}
	if err != nil {
		return nil, err
	}
	held, more, err := o.heldDeadLetters(ctx, p.SessionID, p.Reason, p.Limit)
	if err != nil {
		return nil, err
	}
	if held != nil {
		res.Held = []HeldInfo{}
		for _, d := range held {
			res.Held = append(res.Held, deadInfo(d))
		}
		res.Truncated = res.Truncated || more
	}
	return res, nil
}

// peekList peeks the dead-letter queue of the Service Bus entity for DLQList.
func (o *Operator) peekList(ctx context.Context, p DLQListParams) (*DLQListResult, error) {
	res := &DLQListResult{Messages: []BrokerMessage{}}
	err := o.peekDLQ(ctx, func(m *azservicebus.ReceivedMessage) bool {
		if !matches(m, p.SessionID, p.Reason) {
			return true
		}
		if p.Limit > 0 && len(res.Messages) == p.Limit {
			res.Truncated = true
			return false
		}
		res.Messages = append(res.Messages, o.brokerMessage(m))
		return true
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func matches(m *azservicebus.ReceivedMessage, sessionID, reason string) bool {
	return (sessionID == "" || deref(m.SessionID) == sessionID) && (reason == "" || deref(m.DeadLetterReason) == reason)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// dlqReceiver opens a peek-lock receiver on the entity's dead-letter queue.
func (o *Operator) dlqReceiver() (*azservicebus.Receiver, error) {
	opts := &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}
	e := o.cfg.Entity
	var (
		r   *azservicebus.Receiver
		err error
	)
	if e.Queue != "" {
		r, err = o.cfg.Client.NewReceiverForQueue(e.Queue, opts)
	} else {
		r, err = o.cfg.Client.NewReceiverForSubscription(e.Topic, e.Subscription, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("open the dead-letter queue of %s: %w", e, err)
	}
	return r, nil
}

func closeReceiver(ctx context.Context, r *azservicebus.Receiver) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = r.Close(cctx)
}

// peekDLQ peeks the whole dead-letter queue in order, calling fn for each message until fn
// returns false.
func (o *Operator) peekDLQ(ctx context.Context, fn func(m *azservicebus.ReceivedMessage) bool) error {
	r, err := o.dlqReceiver()
	if err != nil {
		return err
	}
	defer closeReceiver(ctx, r)
	var from int64
	for {
		page, err := r.PeekMessages(ctx, peekPage, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		if err != nil {
			return fmt.Errorf("peek the dead-letter queue of %s from broker sequence %d: %w", o.cfg.Entity, from, err)
		}
		if len(page) == 0 {
			return nil
		}
		for _, m := range page {
			if !fn(m) {
				return nil
			}
			if m.SequenceNumber != nil {
				from = max(from, *m.SequenceNumber+1)
			}
		}
	}
}

// position reads a message's application sequence and last mark with the engine's parser
// (contract.Parse): sequence 0 and not last when the message breaks the contract.
func (o *Operator) position(m *azservicebus.ReceivedMessage) (sequence int64, last bool) {
	sequence, last, _ = contract.Parse(m.ApplicationProperties, o.cfg.SequenceProperty, o.cfg.LastProperty)
	return sequence, last
}

var messageStates = map[azservicebus.MessageState]string{
	azservicebus.MessageStateActive:    "active",
	azservicebus.MessageStateDeferred:  "deferred",
	azservicebus.MessageStateScheduled: "scheduled",
}

func (o *Operator) brokerMessage(m *azservicebus.ReceivedMessage) BrokerMessage {
	seq, last := o.position(m)
	b := BrokerMessage{
		SessionID: deref(m.SessionID), MessageID: m.MessageID, DeliveryCount: m.DeliveryCount,
		Sequence: seq, Last: last,
		State:  cmp.Or(messageStates[m.State], "unknown"),
		Reason: deref(m.DeadLetterReason), Description: deref(m.DeadLetterErrorDescription),
	}
	if m.SequenceNumber != nil {
		b.BrokerSequence = *m.SequenceNumber
	}
	if m.EnqueuedTime != nil {
		b.EnqueuedAt = *m.EnqueuedTime
	}
	return b
}

// DLQReplayParams say which dead letters DLQReplay sends back: those of SessionID, or of every
// session (All), optionally only with one dead-letter reason.
type DLQReplayParams struct {
	SessionID string
	All       bool
	Reason    string
	// Target is the queue or topic the copies are sent to. For a queue it defaults to the queue
	// itself. A subscription's dead letters need it: Service Bus cannot send to one subscription,
	// and a copy sent to the topic reaches every subscription whose rules match it.
	Target string
	// DryRun lists what would be sent and changes nothing.
	DryRun bool
	// Wait bounds the wait for dead letters that another receiver holds locked (a replay that
	// crashed holds them until their locks expire, the entity's lock duration); 0 does not wait.
	Wait time.Duration
}

// ReplayedSession is what DLQReplay did for one session.
type ReplayedSession struct {
	SessionID string `json:"session_id"`
	// Sequences are the application sequences of the copies sent (in the order sent, which is
	// ascending), or that would be sent in a dry run.
	Sequences []int64 `json:"sequences"`
	// Sent counts the copies sent; Completed the dead letters completed after their copy was sent.
	Sent      int `json:"sent"`
	Completed int `json:"completed"`
	// Gone counts planned dead letters that had left the dead-letter queue by the time they
	// were to be locked, or whose lock expired before their copy was sent: not sent.
	Gone int `json:"gone,omitempty"`
	// Uncompleted counts dead letters whose copy was sent but whose completion failed (their
	// lock expired): they stay in the dead-letter queue, and a replay sends them again, which
	// duplicate detection and the worker drop.
	Uncompleted int `json:"uncompleted,omitempty"`
	// HeldElsewhere counts planned dead letters another receiver still held locked when the
	// wait ran out: not sent; a replay run later sends them.
	HeldElsewhere int `json:"held_elsewhere,omitempty"`
	// FromStore counts the copies sent of dead letters the state store held (included in Sent;
	// Completed counts them once removed from the store).
	FromStore int `json:"from_store,omitempty"`
}

// DLQReplayResult is what DLQReplay did, session by session in the order replayed.
type DLQReplayResult struct {
	Target   string            `json:"target"`
	DryRun   bool              `json:"dry_run,omitempty"`
	Sessions []ReplayedSession `json:"sessions"`
	// Skipped lists dead letters that cannot be replayed (no session id, a body the copy cannot
	// carry), which stay in the dead-letter queue.
	Skipped []Failure `json:"skipped,omitempty"`
}

// planned is one dead letter to replay: in the dead-letter queue, or held is set (one of the
// state store's, listed without its body).
type planned struct {
	brokerSeq int64
	session   string
	sequence  int64
	held      *sequencer.HeldDeadLetter
}

// invalidLast orders the messages without a valid sequence after the others.
func invalidLast(p *planned) int {
	if p.sequence == 0 {
		return 1
	}
	return 0
}

// DLQReplay sends dead letters back to the entity (or p.Target), session by session (each once
// all its dead letters are locked, in id order among those), each session's copies in ascending
// application sequence, with their SessionId, body and
// properties kept, a new MessageId (ReplayMessageID) and PropertyReplayedFromDLQ added. A dead
// letter is completed only after its copy was sent: a crash in the middle loses nothing, and a
// replay run again sends only copies that duplicate detection or the worker drop as duplicates.
//
// It first peeks the dead-letter queue to plan (nothing locked), then receives it in order,
// locking what it replays and holding the messages in front of them (other sessions') until the
// end, when it abandons them; the dead letters the plan did not know (dead-lettered meanwhile)
// are left for the next run. Planned dead letters that another receiver holds locked (a replay
// that crashed) are waited for up to p.Wait, until their locks expire.
//
// With a store that holds early messages, the store's dead letters of the selected sessions
// (DLQListResult.Held) are replayed with the dead-letter queue's, merged into each session's
// ascending order: a copy is built from the stored message as from a dead letter (its id by
// ReplayMessageID from the broker sequence number it was held with) and the stored dead letter
// removed only after its copy was sent.
func (o *Operator) DLQReplay(ctx context.Context, p DLQReplayParams) (*DLQReplayResult, error) {
	if p.All == (p.SessionID != "") {
		return nil, fmt.Errorf("%w: give a session id or all sessions, one of the two", ErrInvalidInput)
	}
	if p.SessionID != "" {
		if err := checkSessionID(p.SessionID); err != nil {
			return nil, err
		}
	}
	if o.cfg.DeadLetters != nil {
		return o.queueReplay(ctx, p)
	}
	target := p.Target
	if target == "" {
		if o.cfg.Entity.Queue == "" {
			return nil, fmt.Errorf("replay the dead letters of subscription %s: %w: Service Bus sends to a queue or a topic, and a copy sent to topic %q reaches every subscription whose rules match it; name the target explicitly (--target %s after checking its other subscriptions)",
				o.cfg.Entity, ErrReplayTarget, o.cfg.Entity.Topic, o.cfg.Entity.Topic)
		}
		target = o.cfg.Entity.Queue
	}
	res := &DLQReplayResult{Target: target, DryRun: p.DryRun, Sessions: []ReplayedSession{}}

	// Plan: peek everything, keep what p selects, group by session, order by sequence.
	bySession := map[string][]*planned{}
	err := o.peekDLQ(ctx, func(m *azservicebus.ReceivedMessage) bool {
		sid := deref(m.SessionID)
		if m.SequenceNumber == nil || !matches(m, p.SessionID, p.Reason) {
			return true
		}
		if sid == "" {
			res.Skipped = append(res.Skipped, Failure{Error: fmt.Sprintf("dead letter %d (message id %q) has no session id; not replayed", *m.SequenceNumber, m.MessageID)})
			return true
		}
		if err := replayable(m); err != nil {
			res.Skipped = append(res.Skipped, Failure{SessionID: sid, Error: err.Error()})
			return true
		}
		seq, _ := o.position(m)
		bySession[sid] = append(bySession[sid], &planned{brokerSeq: *m.SequenceNumber, session: sid, sequence: seq})
		return true
	})
	if err != nil {
		return nil, err
	}
	held, _, err := o.heldDeadLetters(ctx, p.SessionID, p.Reason, 0)
	if err != nil {
		return nil, err
	}
	for _, d := range held {
		bySession[d.SessionID] = append(bySession[d.SessionID], &planned{brokerSeq: d.BrokerSequence, session: d.SessionID, sequence: d.Sequence, held: d})
	}
	ids := slices.Sorted(maps.Keys(bySession))
	for _, id := range ids {
		slices.SortStableFunc(bySession[id], func(a, b *planned) int {
			// Messages without a valid sequence go last: the worker dead-letters them again.
			return cmp.Or(cmp.Compare(invalidLast(a), invalidLast(b)), cmp.Compare(a.sequence, b.sequence), cmp.Compare(a.brokerSeq, b.brokerSeq))
		})
	}
	if p.DryRun || len(ids) == 0 {
		for _, id := range ids {
			rs := ReplayedSession{SessionID: id}
			for _, pl := range bySession[id] {
				rs.Sequences = append(rs.Sequences, pl.sequence)
			}
			res.Sessions = append(res.Sessions, rs)
		}
		return res, nil
	}

	rp, err := o.newReplay(ctx, target, p.Wait, bySession)
	if err != nil {
		return nil, err
	}
	defer rp.close(ctx)
	if err := rp.run(ctx, ids); err != nil {
		res.Sessions = rp.done
		return res, err
	}
	res.Sessions = rp.done
	return res, nil
}

// ErrUnknownMessage: the dead-letter queue holds no message with the broker sequence number asked
// for (it was replayed, completed or never there).
var ErrUnknownMessage = errors.New("unknown dead letter")

// DLQMessageParams name one dead letter by its broker sequence number.
type DLQMessageParams struct {
	BrokerSequence int64
	// MaxBody bounds the bytes of the body returned (default 4096); BodySize tells the whole.
	MaxBody int
}

// DLQMessage is one dead letter with its properties and the start of its body.
type DLQMessage struct {
	BrokerMessage
	// Properties are the application properties.
	Properties  map[string]any `json:"properties"`
	ContentType string         `json:"content_type,omitempty"`
	// Body is the start of the body (at most MaxBody bytes), BodySize its whole length and
	// BodyTruncated whether Body stops short of it. The bytes are the message's, unchanged: a
	// caller that shows them must show them as text.
	Body          []byte `json:"body"`
	BodySize      int    `json:"body_size"`
	BodyTruncated bool   `json:"body_truncated,omitempty"`
}

// DLQMessage peeks the dead letter with broker sequence number p.BrokerSequence (nothing is
// locked); ErrUnknownMessage when the dead-letter queue holds none.
func (o *Operator) DLQMessage(ctx context.Context, p DLQMessageParams) (*DLQMessage, error) {
	if p.BrokerSequence <= 0 {
		return nil, fmt.Errorf("%w: broker sequence number must be positive, got %d", ErrInvalidInput, p.BrokerSequence)
	}
	if p.MaxBody <= 0 {
		p.MaxBody = 4096
	}
	var (
		m   *azservicebus.ReceivedMessage
		err error
	)
	if o.cfg.DeadLetters != nil {
		m, err = o.queueMessage(ctx, p)
	} else {
		m, err = o.peekMessage(ctx, p)
	}
	if err != nil {
		return nil, err
	}
	res := &DLQMessage{
		BrokerMessage: o.brokerMessage(m), Properties: maps.Clone(m.ApplicationProperties),
		ContentType: deref(m.ContentType), BodySize: len(m.Body),
	}
	if res.Properties == nil {
		res.Properties = map[string]any{}
	}
	res.Body = m.Body[:min(len(m.Body), p.MaxBody)]
	res.BodyTruncated = len(m.Body) > p.MaxBody
	return res, nil
}

// peekMessage peeks the Service Bus dead letter p names for DLQMessage.
func (o *Operator) peekMessage(ctx context.Context, p DLQMessageParams) (*azservicebus.ReceivedMessage, error) {
	r, err := o.dlqReceiver()
	if err != nil {
		return nil, err
	}
	defer closeReceiver(ctx, r)
	from := p.BrokerSequence
	page, err := r.PeekMessages(ctx, 1, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
	if err != nil {
		return nil, fmt.Errorf("peek dead letter %d of %s: %w", p.BrokerSequence, o.cfg.Entity, err)
	}
	if len(page) == 0 || page[0].SequenceNumber == nil || *page[0].SequenceNumber != p.BrokerSequence {
		return nil, fmt.Errorf("dead letter %d of %s: %w", p.BrokerSequence, o.cfg.Entity, ErrUnknownMessage)
	}
	return page[0], nil
}

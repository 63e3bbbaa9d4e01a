package sqsadapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/seqbus/seqbus/sequencer"
)

// Dead-letter attributes: the reason and description a dead-lettered copy carries, as Service
// Bus names them.
const (
	DeadLetterReasonAttribute      = "DeadLetterReason"
	DeadLetterDescriptionAttribute = "DeadLetterErrorDescription"
)

// Session is a message group held by this process. It is a sequencer.Session; SQS has neither
// deferral nor a peek, so it is no DeferringSession and no HoldingSession. Its state is guarded
// by its Source's mutex.
type Session struct {
	src     *Source
	g       *group
	id      string
	renewed time.Time // the nominal lock while nothing of the group is held
	closed  bool
}

var _ sequencer.Session = (*Session)(nil)

// ID returns the message group id.
func (s *Session) ID() string { return s.id }

// LockedUntil returns the earliest visibility expiry of the group's held messages; with none
// held, the accept or last renewal plus Visibility.
func (s *Session) LockedUntil() time.Time {
	s.src.mu.Lock()
	defer s.src.mu.Unlock()
	until := s.renewed
	first := true
	for _, h := range s.g.held {
		if first || h.until.Before(until) {
			until, first = h.until, false
		}
	}
	return until
}

// Receive returns up to limit messages of the group received for it, without waiting: SQS
// serves a group's next messages only once none of it is in flight, and then to whichever receive
// comes next, in this process or another. So with nothing received for it, a session has nothing
// to wait for: Receive returns an empty slice at once, the engine ends the session as idle (what
// it holds early goes to the store) and its slot asks for the next group (AcceptNext). ctx is
// not used.
func (s *Session) Receive(_ context.Context, limit int) ([]*sequencer.Message, error) {
	limit = max(limit, 1)
	s.src.mu.Lock()
	defer s.src.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("sqsadapter: receive group %q: session closed: %w", s.id, sequencer.ErrLockLost)
	}
	k := min(len(s.g.buf), limit)
	out := make([]*sequencer.Message, k) // not nil: empty means idle
	copy(out, s.g.buf)
	s.g.buf = slices.Delete(s.g.buf, 0, k)
	return out, nil
}

// held returns m's receipt when the session still holds it with that receipt handle, else an
// error wrapping sequencer.ErrLockLost (settled, released, or received again after a lapse).
func (s *Session) held(what string, m *sequencer.Message) (*Received, error) {
	rec, err := raw(m)
	if err != nil {
		return nil, err
	}
	s.src.mu.Lock()
	defer s.src.mu.Unlock()
	h := s.g.held[m.MessageID]
	switch {
	case s.closed:
		return nil, fmt.Errorf("sqsadapter: %s message %q of group %q: session closed: %w", what, m.MessageID, s.id, sequencer.ErrLockLost)
	case rec.GroupID != s.id:
		return nil, fmt.Errorf("sqsadapter: %s message %q: it belongs to group %q, not %q", what, m.MessageID, rec.GroupID, s.id)
	case h == nil || h.handle != rec.ReceiptHandle || h.kept:
		return nil, fmt.Errorf("sqsadapter: %s message %q of group %q: no longer held (settled, released or its visibility lapsed): %w",
			what, m.MessageID, s.id, sequencer.ErrLockLost)
	case !time.Now().Before(h.until):
		// SQS may have given it to someone else: a completion kept now would be no answer of
		// the lock, and a call would fail on the receipt handle.
		return nil, fmt.Errorf("sqsadapter: %s message %q of group %q: its visibility lapsed at %s: %w",
			what, m.MessageID, s.id, h.until.Format(time.RFC3339Nano), sequencer.ErrLockLost)
	}
	h.settling++ // until drop or settleErr: a renewal alongside may find it gone
	return rec, nil
}

// drop forgets m (settled or released) if it is still held with rec's handle.
func (s *Session) drop(rec *Received, id string) {
	s.src.mu.Lock()
	if h := s.g.held[id]; h != nil && h.handle == rec.ReceiptHandle {
		delete(s.g.held, id)
	}
	s.src.mu.Unlock()
}

// deleteKept deletes completions kept for later (Complete): one DeleteMessage, or a
// DeleteMessageBatch per 10. A delete that fails is logged, not returned: the completion was
// reported, and the message SQS delivers again is a duplicate the engine completes then (or,
// before the engine's save covered it, a replay within its window).
func (s *Session) deleteKept(ctx context.Context, kept []heldMsg) {
	warn := func(n int, err error) {
		s.src.log.WarnContext(ctx, "sqsadapter: deleting completed messages (they come back)",
			slog.String("group", s.id), slog.Int("messages", n), slog.Any("error", err))
	}
	if len(kept) == 1 {
		if _, err := s.src.cfg.Client.DeleteMessage(ctx, &sqs.DeleteMessageInput{
			QueueUrl: aws.String(s.src.cfg.QueueURL), ReceiptHandle: aws.String(kept[0].handle)}); err != nil {
			warn(1, mapErr("complete", true, err))
		}
		return
	}
	for lo := 0; lo < len(kept); lo += 10 {
		batch := kept[lo:min(lo+10, len(kept))]
		entries := make([]types.DeleteMessageBatchRequestEntry, len(batch))
		for i, h := range batch {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h.handle)}
		}
		out, err := s.src.cfg.Client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{
			QueueUrl: aws.String(s.src.cfg.QueueURL), Entries: entries})
		if err != nil {
			warn(len(batch), mapErr("complete", true, err))
			continue
		}
		for _, f := range out.Failed {
			warn(1, &batchErr{aws.ToString(f.Code), aws.ToString(f.Message)})
		}
	}
}

// settleErr maps a failed settlement; a lost lock forgets the message.
func (s *Session) settleErr(what string, m *sequencer.Message, rec *Received, err error) error {
	err = mapErr(fmt.Sprintf("sqsadapter: %s message %q of group %q", what, m.MessageID, s.id), true, err)
	if errors.Is(err, sequencer.ErrLockLost) {
		s.drop(rec, m.MessageID)
		return err
	}
	s.src.mu.Lock()
	if h := s.g.held[m.MessageID]; h != nil && h.handle == rec.ReceiptHandle && h.settling > 0 {
		h.settling--
	}
	s.src.mu.Unlock()
	return err
}

// Complete deletes the message from the queue, or keeps it in flight until the session closes
// (Config.Deletes). With DeleteEach it keeps the completion that would leave nothing of the
// group in flight: a group with nothing in flight is anyone's at SQS, so the delete that frees
// it waits for Close, after the engine's last save of the session; a kept completion is deleted
// at the session's next settlement or at Close, before anything else, so deletes land in the
// order of the Complete calls. Completions alongside each other (an engine with
// MaxPendingSettlements above 1) may each find the other still held and delete at once: with
// DeleteEach, settle one at a time. With DeleteAtClose it keeps every completion, and Close,
// Abandon and DeadLetter delete those kept first. Either way a completion is kept only while the
// message's visibility lasts (a lapsed one is sequencer.ErrLockLost, as a call would be).
func (s *Session) Complete(ctx context.Context, m *sequencer.Message) error {
	rec, err := s.held("complete", m)
	if err != nil {
		return err
	}
	s.src.mu.Lock()
	var kept []heldMsg
	atClose := s.src.cfg.Deletes == DeleteAtClose
	if !atClose {
		kept = s.g.takeKept()
	}
	h := s.g.held[m.MessageID]
	keep := h != nil && h.handle == rec.ReceiptHandle && !s.closed && (atClose || len(s.g.held) == 1)
	if keep {
		h.settling--
		h.kept = true
	}
	s.src.mu.Unlock()
	s.deleteKept(ctx, kept)
	if keep {
		return nil
	}
	if _, err := s.src.cfg.Client.DeleteMessage(ctx, &sqs.DeleteMessageInput{
		QueueUrl: aws.String(s.src.cfg.QueueURL), ReceiptHandle: aws.String(rec.ReceiptHandle)}); err != nil {
		return s.settleErr("complete", m, rec, err)
	}
	s.drop(rec, m.MessageID)
	return nil
}

// Abandon makes the message visible again at once, together with the group's messages received
// but not yet returned by Receive: SQS delivers the group again from the abandoned message on,
// in order, once nothing of the group is in flight (messages Receive returned and that are not
// settled keep it back until they are).
func (s *Session) Abandon(ctx context.Context, m *sequencer.Message) error {
	rec, err := s.held("abandon", m)
	if err != nil {
		return err
	}
	s.src.mu.Lock()
	if h := s.g.held[m.MessageID]; h == nil || h.handle != rec.ReceiptHandle || s.closed {
		// Settled, released or closed alongside since the check above.
		s.src.mu.Unlock()
		return fmt.Errorf("sqsadapter: abandon message %q of group %q: no longer held: %w", m.MessageID, s.id, sequencer.ErrLockLost)
	}
	kept := s.g.takeKept()
	rel := []heldMsg{*s.g.held[m.MessageID]}
	for _, b := range s.g.buf {
		if h := s.g.held[b.MessageID]; h != nil {
			rel = append(rel, *h)
			delete(s.g.held, b.MessageID)
		}
	}
	s.g.buf = nil
	s.src.mu.Unlock()
	s.deleteKept(ctx, kept)
	if len(rel) > 1 {
		if err := s.src.release(ctx, "abandon", rel[1:]); err != nil {
			s.src.log.WarnContext(ctx, "sqsadapter: releasing the group's later messages", slog.String("group", s.id), slog.Any("error", err))
		}
	}
	if _, err := s.src.cfg.Client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(s.src.cfg.QueueURL), ReceiptHandle: aws.String(rec.ReceiptHandle), VisibilityTimeout: 0}); err != nil {
		return s.settleErr("abandon", m, rec, err)
	}
	s.drop(rec, m.MessageID)
	return nil
}

// DeadLetter sends a copy of the message to the queue's dead-letter queue (same group, a
// deduplication id derived from the message id, its attributes plus DeadLetterReason and
// DeadLetterErrorDescription) and then deletes it from the queue.
func (s *Session) DeadLetter(ctx context.Context, m *sequencer.Message, p sequencer.DeadLetterParams) error {
	rec, err := s.held("dead-letter", m)
	if err != nil {
		return err
	}
	s.src.mu.Lock()
	kept := s.g.takeKept()
	s.src.mu.Unlock()
	s.deleteKept(ctx, kept)
	attrs := deadLetterAttributes(rec.Message.MessageAttributes, p)
	if len(attrs) < len(rec.Message.MessageAttributes)+2 && (p.Reason != "" || p.Description != "") {
		s.src.log.WarnContext(ctx, "sqsadapter: dead-letter reason left out: the message has too many attributes",
			slog.String("message_id", m.MessageID), slog.String("group", s.id), slog.String("reason", p.Reason), slog.String("description", p.Description))
	}
	if _, err := s.src.cfg.Client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:               aws.String(s.src.dlqURL),
		MessageGroupId:         aws.String(s.id),
		MessageDeduplicationId: aws.String(deadLetterDedupID(m.MessageID)),
		MessageBody:            rec.Message.Body,
		MessageAttributes:      attrs,
	}); err != nil {
		return s.settleErr("dead-letter (send to the dead-letter queue)", m, rec, err)
	}
	if _, err := s.src.cfg.Client.DeleteMessage(ctx, &sqs.DeleteMessageInput{
		QueueUrl: aws.String(s.src.cfg.QueueURL), ReceiptHandle: aws.String(rec.ReceiptHandle)}); err != nil {
		return s.settleErr("dead-letter (delete after the copy)", m, rec, err)
	}
	s.drop(rec, m.MessageID)
	return nil
}

// deadLetterDedupID is the deduplication id of a message's dead-lettered copy: a copy sent again
// within SQS's 5 minutes (after a failed delete) is dropped by the dead-letter queue.
func deadLetterDedupID(messageID string) string {
	id := "dl-" + messageID
	if len(id) > 128 {
		id = id[:128]
	}
	return id
}

// deadLetterAttributes are the message's attributes plus the reason and the description (those
// that are not empty), as far as SQS's 10 attributes allow: short of room, the description is left
// out first, then the reason.
func deadLetterAttributes(orig map[string]types.MessageAttributeValue, p sequencer.DeadLetterParams) map[string]types.MessageAttributeValue {
	out := make(map[string]types.MessageAttributeValue, len(orig)+2)
	for k, v := range orig {
		out[k] = v
	}
	for _, a := range []struct{ name, value string }{{DeadLetterReasonAttribute, p.Reason}, {DeadLetterDescriptionAttribute, p.Description}} {
		if _, taken := orig[a.name]; a.value == "" || (!taken && len(out) >= MaxAttributes) {
			continue
		}
		out[a.name] = str(typeString, a.value)
	}
	return out
}

// RenewLock extends the visibility of every held message of the group to Visibility from now
// and returns LockedUntil. A message whose visibility already lapsed makes it
// sequencer.ErrLockLost.
func (s *Session) RenewLock(ctx context.Context) (time.Time, error) {
	s.src.mu.Lock()
	if s.closed {
		s.src.mu.Unlock()
		return time.Time{}, fmt.Errorf("sqsadapter: renew group %q: session closed: %w", s.id, sequencer.ErrLockLost)
	}
	ids := make([]string, 0, len(s.g.held))
	for id := range s.g.held {
		ids = append(ids, id)
	}
	hs := make([]heldMsg, len(ids))
	for i, id := range ids {
		hs[i] = *s.g.held[id]
	}
	start := time.Now()
	if len(ids) == 0 {
		s.renewed = start.Add(s.src.cfg.Visibility)
	}
	s.src.mu.Unlock()
	var errs []error
	for lo := 0; lo < len(ids); lo += 10 {
		hi := min(lo+10, len(ids))
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, 0, hi-lo)
		for i := lo; i < hi; i++ {
			entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(fmt.Sprint(i)),
				ReceiptHandle: aws.String(hs[i].handle), VisibilityTimeout: int32(s.src.cfg.Visibility / time.Second)})
		}
		out, err := s.src.cfg.Client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
			QueueUrl: aws.String(s.src.cfg.QueueURL), Entries: entries})
		if err != nil {
			errs = append(errs, mapErr(fmt.Sprintf("sqsadapter: renew group %q", s.id), false, err))
			continue
		}
		until := s.src.expiry(start)
		s.src.mu.Lock()
		for _, ok := range out.Successful {
			var i int
			if _, err := fmt.Sscan(aws.ToString(ok.Id), &i); err == nil && i >= lo && i < hi {
				if h := s.g.held[ids[i]]; h != nil && h.handle == hs[i].handle {
					h.until = until
				}
			}
		}
		s.src.mu.Unlock()
		for _, f := range out.Failed {
			var i int
			if _, err := fmt.Sscan(aws.ToString(f.Id), &i); err == nil && i >= lo && i < hi && !s.holds(ids[i], hs[i].handle) {
				continue // being settled or gone meanwhile (a Complete alongside the renewal)
			}
			k := codeKind(aws.ToString(f.Code), aws.ToString(f.Message))
			errs = append(errs, wrapKind(fmt.Sprintf("sqsadapter: renew group %q", s.id), false, k,
				&batchErr{aws.ToString(f.Code), aws.ToString(f.Message)}))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return time.Time{}, err
	}
	return s.LockedUntil(), nil
}

// holds reports whether the session still holds message id with handle and no settlement of it
// is under way.
func (s *Session) holds(id, handle string) bool {
	s.src.mu.Lock()
	defer s.src.mu.Unlock()
	h := s.g.held[id]
	return h != nil && h.handle == handle && h.settling == 0
}

// Close deletes the completions kept (see Complete) and releases the group: every other held
// message becomes visible again at once, in order. Later settlements of its messages fail with
// sequencer.ErrLockLost.
func (s *Session) Close(ctx context.Context) error {
	s.src.mu.Lock()
	if s.closed {
		s.src.mu.Unlock()
		return nil
	}
	s.closed = true
	kept := s.g.takeKept()
	rel := s.g.releases()
	s.g.held = map[string]*heldMsg{}
	s.g.buf = nil
	s.g.sess = nil
	if s.src.groups[s.id] == s.g {
		delete(s.src.groups, s.id)
	}
	s.src.mu.Unlock()
	s.deleteKept(ctx, kept)
	if len(rel) == 0 {
		return nil
	}
	if err := s.src.release(ctx, "session closed", rel); err != nil {
		return fmt.Errorf("sqsadapter: close group %q: %w", s.id, err)
	}
	return nil
}

package sqsadapter

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/seqbus/seqbus/sequencer"
)

// Config configures a Source.
type Config struct {
	// Client is the SQS client (required).
	Client *sqs.Client
	// QueueURL is the FIFO queue to consume (required). It needs a RedrivePolicy: dead-lettered
	// messages go to its dead-letter queue.
	QueueURL string
	// Visibility is the group's lock: the visibility timeout of every received message, renewed
	// by RenewLock (default DefaultVisibility; whole seconds, 1s to 12h).
	Visibility time.Duration
	// Wait is the long poll of each ReceiveMessage (default 20s; whole seconds, 1s to 20s).
	Wait time.Duration
	// MaxMessages is the most messages one ReceiveMessage asks for (default and at most
	// MaxReceive).
	MaxMessages int
	// Linger is how long the messages of a received group wait for AcceptNext before they are
	// released to the queue (default Visibility/3; less than Visibility).
	Linger time.Duration
	// Deletes says when a completion is deleted (default DeleteEach).
	Deletes Deletes
	// Logger receives the adapter's log lines (default slog.Default()).
	Logger *slog.Logger
}

// DefaultVisibility is a group's lock when Config.Visibility is zero.
const DefaultVisibility = 30 * time.Second

// MaxReceive is the most messages SQS returns to one ReceiveMessage, and so the most a session
// holds (a session is one receive long).
const MaxReceive = 10

// Deletes is when a session's completions are deleted from the queue.
type Deletes int

const (
	// DeleteEach deletes each completion at once (DeleteMessage), but for the one that would
	// leave nothing of the group in flight: that one is deleted at Close, after the engine's
	// last save, and nothing is handled after it in the session. A crash hands over again at
	// most the message in hand, as with any broker: an engine of any replay window fits.
	DeleteEach Deletes = iota
	// DeleteAtClose keeps every completion of a session and deletes them at Close, with one
	// DeleteMessageBatch per 10: about one call per session for its receive and one for its
	// deletes instead of one per message. A crash or a lapsed lock before Close brings every
	// message the session handled back (Capabilities.CompletionsAtClose), so the engine must
	// hand them over again as a replay: a sequencer.Runner refuses an engine whose replay window
	// does not cover a whole session (Pipelined, MaxPendingSettlements of at least MaxMessages
	// - 1).
	DeleteAtClose
)

func (d Deletes) String() string {
	switch d {
	case DeleteEach:
		return "each"
	case DeleteAtClose:
		return "at-close"
	}
	return fmt.Sprintf("Deletes(%d)", int(d))
}

func (c *Config) setDefaults() error {
	if c.Client == nil {
		return fmt.Errorf("%w: Client is required", ErrConfig)
	}
	if c.QueueURL == "" {
		return fmt.Errorf("%w: QueueURL is required", ErrConfig)
	}
	c.Visibility = cmp.Or(c.Visibility, DefaultVisibility)
	if c.Visibility < time.Second || c.Visibility > 12*time.Hour || c.Visibility%time.Second != 0 {
		return fmt.Errorf("%w: Visibility %s: want whole seconds from 1s to 12h", ErrConfig, c.Visibility)
	}
	c.Wait = cmp.Or(c.Wait, 20*time.Second)
	if c.Wait < time.Second || c.Wait > 20*time.Second || c.Wait%time.Second != 0 {
		return fmt.Errorf("%w: Wait %s: want whole seconds from 1s to 20s", ErrConfig, c.Wait)
	}
	c.MaxMessages = cmp.Or(c.MaxMessages, MaxReceive)
	if c.MaxMessages < 1 || c.MaxMessages > MaxReceive {
		return fmt.Errorf("%w: MaxMessages %d: want 1 to %d", ErrConfig, c.MaxMessages, MaxReceive)
	}
	c.Linger = cmp.Or(c.Linger, c.Visibility/3)
	if c.Linger <= 0 || c.Linger >= c.Visibility {
		return fmt.Errorf("%w: Linger %s: want more than 0 and less than Visibility %s", ErrConfig, c.Linger, c.Visibility)
	}
	if c.Deletes != DeleteEach && c.Deletes != DeleteAtClose {
		return fmt.Errorf("%w: Deletes %s: want DeleteEach or DeleteAtClose", ErrConfig, c.Deletes)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Source hands out SQS FIFO message groups as sequencer sessions. One receive loop per Source
// receives for all of them; see the package documentation.
type Source struct {
	cfg    Config
	dlqURL string
	log    *slog.Logger

	mu      sync.Mutex
	groups  map[string]*group // every group this Source holds messages of or has a session for
	offers  []*group          // groups without a session, in arrival order, for AcceptNext
	waiters int               // AcceptNext calls waiting
	changed chan struct{}     // closed and replaced when offers arrive or the Source closes
	closed  bool

	kick   chan struct{} // wakes the receive loop when there may be demand
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// group is one message group held by this Source.
type group struct {
	id      string
	buf     []*sequencer.Message // received, not yet returned by Receive, in order
	held    map[string]*heldMsg  // by message id: every received message not settled or released
	sess    *Session             // nil: waiting for AcceptNext (offered)
	offered time.Time            // when it was offered; zero when not offered
}

type heldMsg struct {
	handle   string
	seq      int64 // BrokerSequence, for releasing in order
	until    time.Time
	settling int // settlements under way
	// kept: completed by the session and deleted when it closes or settles again (see
	// Session.Complete); no longer the session's to settle.
	kept bool
}

func newGroup(id string) *group {
	return &group{id: id, held: map[string]*heldMsg{}}
}

// takeKept removes the kept completions from g.held and returns them in order, for their delete.
func (g *group) takeKept() []heldMsg {
	var out []heldMsg
	for id, h := range g.held {
		if h.kept {
			out = append(out, *h)
			delete(g.held, id)
		}
	}
	slices.SortFunc(out, func(a, b heldMsg) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// releases returns the held messages of g in order, for a release.
func (g *group) releases() []heldMsg {
	out := make([]heldMsg, 0, len(g.held))
	for _, h := range g.held {
		out = append(out, *h)
	}
	slices.SortFunc(out, func(a, b heldMsg) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// New checks that cfg.QueueURL is a FIFO queue with a redrive policy, finds its dead-letter
// queue and starts the receive loop. Close stops it.
func New(cfg Config) (*Source, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := cfg.Client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(cfg.QueueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameFifoQueue, types.QueueAttributeNameRedrivePolicy},
	})
	if err != nil {
		return nil, mapErr(fmt.Sprintf("sqsadapter: queue %s", cfg.QueueURL), false, err)
	}
	if out.Attributes[string(types.QueueAttributeNameFifoQueue)] != "true" {
		return nil, fmt.Errorf("%w: queue %s is not a FIFO queue: SQS keeps order only in FIFO queues (names ending in .fifo)", ErrConfig, cfg.QueueURL)
	}
	dlqURL, err := deadLetterQueue(ctx, cfg.Client, cfg.QueueURL, out.Attributes[string(types.QueueAttributeNameRedrivePolicy)])
	if err != nil {
		return nil, err
	}
	lctx, lcancel := context.WithCancel(context.Background())
	s := &Source{
		cfg: cfg, dlqURL: dlqURL, log: cfg.Logger,
		groups: map[string]*group{}, changed: make(chan struct{}),
		kick: make(chan struct{}, 1), cancel: lcancel,
	}
	s.wg.Add(2)
	go s.receiveLoop(lctx)
	go s.lingerLoop(lctx)
	return s, nil
}

// deadLetterQueue reads the queue's RedrivePolicy and returns the URL of its dead-letter queue.
func deadLetterQueue(ctx context.Context, c *sqs.Client, queueURL, policy string) (string, error) {
	if policy == "" {
		return "", fmt.Errorf("%w: queue %s has no RedrivePolicy: seqbus dead-letters poison messages and needs a FIFO dead-letter queue (set RedrivePolicy with deadLetterTargetArn and maxReceiveCount)", ErrConfig, queueURL)
	}
	p, err := ParseRedrivePolicy(policy)
	if err != nil {
		return "", fmt.Errorf("%w (queue %s)", err, queueURL)
	}
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(p.Name)}
	if p.Account != "" {
		in.QueueOwnerAWSAccountId = aws.String(p.Account)
	}
	out, err := c.GetQueueUrl(ctx, in)
	if err != nil {
		return "", mapErr(fmt.Sprintf("sqsadapter: dead-letter queue %s of %s", p.DeadLetterTargetARN, queueURL), false, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

var _ sequencer.CapableSource = (*Source)(nil)

// Capabilities implements sequencer.CapableSource: SQS FIFO offers no deferral, no peek, no
// session state and no lock of a group beyond its messages in flight, so a Runner holds early
// messages in the state store, and a session ends once nothing of its group is in flight. With
// DeleteAtClose a session keeps up to MaxMessages completions until it closes.
func (s *Source) Capabilities() sequencer.Capabilities {
	if s.cfg.Deletes == DeleteAtClose {
		return sequencer.Capabilities{CompletionsAtClose: s.cfg.MaxMessages}
	}
	return sequencer.Capabilities{}
}

// DeadLetterQueueURL returns the URL of the queue's dead-letter queue, where DeadLetter sends.
func (s *Source) DeadLetterQueueURL() string { return s.dlqURL }

// QueueURL returns the queue the Source consumes.
func (s *Source) QueueURL() string { return s.cfg.QueueURL }

func (s *Source) wakeLoop() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// broadcastLocked wakes the AcceptNext calls waiting. s.mu must be held.
func (s *Source) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// AcceptNext returns a session for the next group received without one, waiting until ctx ends
// (then sequencer.ErrNoSession).
func (s *Source) AcceptNext(ctx context.Context) (sequencer.Session, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, fmt.Errorf("sqsadapter: accept next: %w", ErrClosed)
		}
		for len(s.offers) > 0 {
			g := s.offers[0]
			s.offers = s.offers[1:]
			if g.sess == nil && !g.offered.IsZero() && s.groups[g.id] == g {
				sess := s.newSessionLocked(g)
				s.mu.Unlock()
				return sess, nil
			}
		}
		s.waiters++
		ch := s.changed
		s.mu.Unlock()
		s.wakeLoop()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		s.mu.Lock()
		s.waiters--
		s.mu.Unlock()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sqsadapter: accept next: %w: %w", sequencer.ErrNoSession, ctx.Err())
		}
	}
}

// Accept returns a session for the group sessionID, at once, with what this Source holds of the
// group without a session and whatever of it the receive loop gets while it is open (a Receive
// with nothing received for the session returns at once, see Session.Receive).
// It returns sequencer.ErrSessionLocked when this Source already has a session for the group. A
// group another consumer holds is not known here: SQS serves its messages to no one else until
// they are settled or their visibility lapses, so the session receives them only then.
func (s *Source) Accept(ctx context.Context, sessionID string) (sequencer.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqsadapter: accept %q: %w", sessionID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("sqsadapter: accept %q: %w", sessionID, ErrClosed)
	}
	g := s.groups[sessionID]
	if g != nil && g.sess != nil {
		return nil, fmt.Errorf("sqsadapter: accept %q: %w", sessionID, sequencer.ErrSessionLocked)
	}
	if g == nil {
		g = newGroup(sessionID)
		s.groups[sessionID] = g
	}
	return s.newSessionLocked(g), nil
}

// newSessionLocked gives g a session. s.mu must be held.
func (s *Source) newSessionLocked(g *group) *Session {
	g.offered = time.Time{}
	sess := &Session{src: s, g: g, id: g.id, renewed: time.Now().Add(s.cfg.Visibility)}
	g.sess = sess
	return sess
}

// demandLocked reports whether a receive is wanted: an AcceptNext waits with nothing offered.
// Only a free slot asks: a receive cannot be aimed at one group, and a group received for a
// process with no slot free waits for one (up to Linger) while nobody else may have it. A
// session never asks (see Session.Receive). s.mu must be held.
func (s *Source) demandLocked() bool {
	return s.waiters > len(s.offers)
}

// receiveLoop receives while there is demand and routes what arrives by group.
func (s *Source) receiveLoop(ctx context.Context) {
	defer s.wg.Done()
	backoff := time.Duration(0)
	attempt := attemptID() // kept through a failed receive: its retry may get the lost answer
	for {
		if !s.awaitDemand(ctx) {
			return
		}
		out, err := s.cfg.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(s.cfg.QueueURL),
			ReceiveRequestAttemptId:     aws.String(attempt),
			MaxNumberOfMessages:         int32(s.cfg.MaxMessages),
			WaitTimeSeconds:             int32(s.cfg.Wait / time.Second),
			VisibilityTimeout:           int32(s.cfg.Visibility / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			s.log.WarnContext(ctx, "sqsadapter: receiving", slog.String("queue", s.cfg.QueueURL),
				slog.Any("error", mapErr("receive", false, err)), slog.Duration("retry_in", backoff))
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		backoff, attempt = 0, attemptID()
		s.route(ctx, out.Messages, s.expiry(time.Now()))
	}
}

// attemptID returns a new ReceiveRequestAttemptId. The SDK retries a receive whose answer it did
// not get (a cut connection) with the same input: with the same attempt id, a FIFO queue answers
// the retry with the messages it gave the lost attempt, where without one those stay in flight,
// seen by nobody, and hold their group back until their visibility lapses.
func attemptID() string { return rand.Text() }

// awaitDemand waits until a receive is wanted; false when ctx ended.
func (s *Source) awaitDemand(ctx context.Context) bool {
	for {
		s.mu.Lock()
		demand := s.demandLocked()
		s.mu.Unlock()
		if demand {
			return true
		}
		select {
		case <-s.kick:
		case <-ctx.Done():
			return false
		}
	}
}

// expiry is when the visibility of a message received (or changed) at t ends, a little early:
// SQS starts it before its answer arrives.
func (s *Source) expiry(t time.Time) time.Time {
	return t.Add(s.cfg.Visibility - min(s.cfg.Visibility/10, time.Second))
}

// route hands received messages to their groups: to the group's session if it has one, else
// offered to AcceptNext.
func (s *Source) route(ctx context.Context, msgs []types.Message, until time.Time) {
	if len(msgs) == 0 {
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		var rel []heldMsg
		for _, m := range msgs {
			rel = append(rel, heldMsg{handle: aws.ToString(m.ReceiptHandle)})
		}
		_ = s.release(context.WithoutCancel(ctx), "closed", rel)
		return
	}
	offered := false
	for _, m := range msgs {
		msg, bad := toMessage(m)
		if bad != nil {
			s.log.WarnContext(ctx, "sqsadapter: message attributes", slog.String("message_id", msg.MessageID),
				slog.String("group", msg.SessionID), slog.Any("error", bad))
		}
		rec := msg.Raw.(*Received)
		g := s.groups[msg.SessionID]
		if g == nil {
			g = newGroup(msg.SessionID)
			s.groups[g.id] = g
		}
		if _, again := g.held[msg.MessageID]; again {
			// Its visibility lapsed and SQS delivered it again: the new receipt handle is the
			// one that settles it.
			g.buf = slices.DeleteFunc(g.buf, func(b *sequencer.Message) bool { return b.MessageID == msg.MessageID })
		}
		g.held[msg.MessageID] = &heldMsg{handle: rec.ReceiptHandle, seq: msg.BrokerSequence, until: until}
		g.buf = append(g.buf, msg)
		if g.sess == nil && g.offered.IsZero() {
			g.offered = time.Now()
			s.offers = append(s.offers, g)
			offered = true
		}
	}
	if offered {
		s.broadcastLocked()
	}
	s.mu.Unlock()
}

// lingerLoop releases the groups that waited Linger for AcceptNext, so that SQS serves them
// again (to this or another consumer) rather than letting them lapse.
func (s *Source) lingerLoop(ctx context.Context) {
	defer s.wg.Done()
	tick := time.NewTicker(max(s.cfg.Linger/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		var rel []heldMsg
		s.mu.Lock()
		s.offers = slices.DeleteFunc(s.offers, func(g *group) bool {
			if g.sess != nil || g.offered.IsZero() || s.groups[g.id] != g {
				return true
			}
			if now.Sub(g.offered) < s.cfg.Linger {
				return false
			}
			rel = append(rel, g.releases()...)
			delete(s.groups, g.id)
			g.offered = time.Time{}
			return true
		})
		s.mu.Unlock()
		if len(rel) > 0 {
			s.wakeLoop() // fewer offers: AcceptNext calls waiting may want a receive
			if err := s.release(ctx, "not accepted", rel); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "sqsadapter: releasing messages", slog.Any("error", err))
			}
		}
	}
}

// release makes messages visible again at once (visibility 0), in the order given, in batches
// of 10. Handles that expired meanwhile are no error: those messages are visible already.
func (s *Source) release(ctx context.Context, why string, msgs []heldMsg) error {
	var errs []error
	for chunk := range slices.Chunk(msgs, 10) {
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(chunk))
		for i, h := range chunk {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(fmt.Sprint(i)), ReceiptHandle: aws.String(h.handle), VisibilityTimeout: 0}
		}
		out, err := s.cfg.Client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
			QueueUrl: aws.String(s.cfg.QueueURL), Entries: entries})
		if err != nil {
			errs = append(errs, mapErr("release ("+why+")", false, err))
			continue
		}
		for _, f := range out.Failed {
			if k := codeKind(aws.ToString(f.Code), aws.ToString(f.Message)); k != kindLockLost {
				errs = append(errs, wrapKind("release ("+why+")", false, k, &batchErr{aws.ToString(f.Code), aws.ToString(f.Message)}))
			}
		}
	}
	s.log.Debug("sqsadapter: released messages", slog.String("queue", s.cfg.QueueURL), slog.String("why", why), slog.Int("messages", len(msgs)))
	return errors.Join(errs...)
}

// Close stops the receive loop, closes the open sessions and releases every message the
// Source holds.
func (s *Source) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var sessions []*Session
	var rel []heldMsg
	for _, g := range s.groups {
		if g.sess != nil {
			sessions = append(sessions, g.sess)
		} else {
			rel = append(rel, g.releases()...)
			delete(s.groups, g.id)
		}
	}
	s.offers = nil
	s.broadcastLocked()
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	var errs []error
	for _, sess := range sessions {
		errs = append(errs, sess.Close(ctx))
	}
	if len(rel) > 0 {
		errs = append(errs, s.release(ctx, "source closed", rel))
	}
	return errors.Join(errs...)
}

package publisher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/seqbus/seqbus/contract"
)

// Sender is the part of *azservicebus.Sender a Publisher uses.
type Sender interface {
	SendMessage(ctx context.Context, message *azservicebus.Message, options *azservicebus.SendMessageOptions) error
}

var _ Sender = (*azservicebus.Sender)(nil)

// BatchSender is the part of *azservicebus.Sender that sends batches. PublishBatch uses
// it when the Publisher's Sender has it too.
type BatchSender interface {
	NewMessageBatch(ctx context.Context, options *azservicebus.MessageBatchOptions) (*azservicebus.MessageBatch, error)
	SendMessageBatch(ctx context.Context, batch *azservicebus.MessageBatch, options *azservicebus.SendMessageBatchOptions) error
}

var _ BatchSender = (*azservicebus.Sender)(nil)

// MessagesSender sends a list of messages in order, in as few calls as it can, and returns how
// many of the leading ones the broker accepted (all of them when err is nil). PublishBatch uses
// it when the Publisher's Sender has it and is no BatchSender: a sender to another broker (the
// SQS FIFO sender of package sqsadapter) packs its own batches.
type MessagesSender interface {
	SendMessages(ctx context.Context, msgs []*azservicebus.Message) (sent int, err error)
}

// Counter hands out the sequence numbers of sessions.
type Counter interface {
	// Next returns the next sequence of the session (1 for its first message).
	Next(ctx context.Context, sessionID string) (int64, error)
	// End is called once the session's last message is sent.
	End(ctx context.Context, sessionID string) error
}

// LastCounter is a Counter that hands out a session's last sequence and ends the session
// in one step, so no number can be handed out after the last one. A Publisher calls
// NextLast for a last message whose sequence it allocates, and then not End.
type LastCounter interface {
	Counter
	NextLast(ctx context.Context, sessionID string) (int64, error)
}

// Config configures a Publisher. A nil *Config means all defaults, which need a
// Strategy: New refuses a Config without one.
type Config struct {
	// Strategy builds the session ids. Required.
	Strategy Strategy
	// SequenceProperty and LastProperty name the application properties the worker
	// reads (defaults "Sequence" and "IsLast", as sequencer.EngineConfig).
	SequenceProperty string
	LastProperty     string
	// Counter numbers the messages of each session. Default: a MemoryCounter, which is
	// right for tests and a single process only (see MemoryCounter); outbox.Counter
	// keeps the numbers in Postgres.
	Counter Counter
}

// ErrNoStrategy is returned by New for a Config without a Strategy.
var ErrNoStrategy = errors.New("publisher: Config.Strategy is required")

// Publisher sends the messages of sequenced sessions. It is safe for concurrent use.
type Publisher struct {
	sender Sender
	cfg    Config
	none   bool // the Strategy is None: messages go out without a session
}

// New returns a Publisher sending through s.
func New(s Sender, cfg *Config) (*Publisher, error) {
	if s == nil {
		return nil, errors.New("publisher: nil Sender")
	}
	if cfg == nil || cfg.Strategy == nil {
		return nil, ErrNoStrategy
	}
	c := *cfg
	c.SequenceProperty = cmp.Or(c.SequenceProperty, contract.SequenceProperty)
	c.LastProperty = cmp.Or(c.LastProperty, contract.LastProperty)
	if c.Counter == nil {
		c.Counter = NewMemoryCounter()
	}
	_, none := c.Strategy.(None)
	return &Publisher{sender: s, cfg: c, none: none}, nil
}

// PublishOptions adjust one Publish.
type PublishOptions struct {
	// Last marks the message as the last of its session.
	Last bool
}

// Published says what Publish gave the message.
type Published struct {
	SessionID string // "" without a session
	Sequence  int64  // 0 without a session
}

// Publish sets the message's session id (unless it already has one), its Sequence
// (unless already set, so that retrying the same message keeps its number; any Go
// integer type counts), its IsLast property when opts.Last, and its MessageId (unless
// set: MessageID(session, sequence), so duplicate detection absorbs a retried send),
// then sends it. A message without a session id must carry the application properties
// the strategy needs (ErrNoSessionKey otherwise); a message with one is sent under it
// and the strategy is not consulted. A session id ValidateSessionID refuses, an empty
// one included, is an error (ErrInvalidSessionID) and nothing is sent; only a
// Publisher whose Strategy is None sends without a session.
func (p *Publisher) Publish(ctx context.Context, msg *azservicebus.Message, opts *PublishOptions) (Published, error) {
	if opts == nil {
		opts = &PublishOptions{}
	}
	id, err := p.sessionID(msg)
	if err != nil {
		return Published{}, err
	}
	res, ended, err := p.number(ctx, msg, id, opts.Last)
	if err != nil {
		return Published{}, err
	}
	if err := p.sender.SendMessage(ctx, msg, nil); err != nil {
		return res, fmt.Errorf("publisher: send (session %q, sequence %d): %w", res.SessionID, res.Sequence, err)
	}
	return res, p.end(ctx, id, opts.Last, ended)
}

// number gives a message with a session id its sequence, last mark and MessageId; one
// without (id "", only with None) is left alone. ended reports that the counter ended
// the session while numbering it.
func (p *Publisher) number(ctx context.Context, msg *azservicebus.Message, id string, last bool) (Published, bool, error) {
	if id == "" {
		return Published{}, false, nil
	}
	if msg.ApplicationProperties == nil {
		msg.ApplicationProperties = map[string]any{}
	}
	ended := false
	seq, has := asInt64(msg.ApplicationProperties[p.cfg.SequenceProperty])
	if !has {
		var err error
		if lc, ok := p.cfg.Counter.(LastCounter); ok && last {
			seq, err = lc.NextLast(ctx, id)
			ended = true
		} else {
			seq, err = p.cfg.Counter.Next(ctx, id)
		}
		if err != nil {
			return Published{}, false, fmt.Errorf("publisher: session %q: next sequence: %w", id, err)
		}
		msg.ApplicationProperties[p.cfg.SequenceProperty] = seq
	}
	if last {
		msg.ApplicationProperties[p.cfg.LastProperty] = true
	}
	msg.SessionID = &id
	if msg.MessageID == nil {
		mid := MessageID(id, seq)
		msg.MessageID = &mid
	}
	return Published{SessionID: id, Sequence: seq}, ended, nil
}

// end tells the counter that a session's last message is sent, unless it ended the
// session when it numbered the message.
func (p *Publisher) end(ctx context.Context, id string, last, ended bool) error {
	if !last || ended || id == "" {
		return nil
	}
	if err := p.cfg.Counter.End(ctx, id); err != nil {
		return fmt.Errorf("publisher: session %q: end: %w", id, err)
	}
	return nil
}

// sessionID is the message's own session id when it has one (the strategy is not
// consulted then), or the strategy's; "" only with None.
func (p *Publisher) sessionID(msg *azservicebus.Message) (string, error) {
	id := ""
	if msg.SessionID != nil && *msg.SessionID != "" {
		id = *msg.SessionID
	} else {
		sid, ok, err := p.cfg.Strategy.SessionID(msg.ApplicationProperties)
		if err != nil {
			return "", fmt.Errorf("publisher: session id: %w", err)
		}
		if !ok {
			return "", fmt.Errorf("%w (application properties %v)", ErrNoSessionKey, keys(msg.ApplicationProperties))
		}
		if p.none {
			return "", nil
		}
		id = sid
	}
	if err := ValidateSessionID(id); err != nil {
		return "", fmt.Errorf("publisher: %w", err)
	}
	return id, nil
}

// BatchItem is one message of PublishBatch.
type BatchItem struct {
	Message *azservicebus.Message
	// Last marks the message as the last of its session.
	Last bool
}

// PublishBatchOptions adjust one PublishBatch. The struct is empty, for future expansion.
type PublishBatchOptions struct{}

// PublishBatch publishes items grouped per session, as Pub/Sub's ordering-key publisher
// batches per key. First every message gets its session id; if one cannot, nothing is
// numbered or sent. Then each message is numbered as Publish numbers it, in the order
// of items, so a session's messages keep their order. Then each session's messages go
// out in order, in as few SendMessageBatch calls as fit when the Sender is a
// BatchSender (in the calls of a MessagesSender; one SendMessage each otherwise),
// session after session in order of first appearance.
//
// A session whose numbering or send fails stops there: its later messages are not sent,
// so that they cannot overtake the failed one; other sessions go on. The result has one
// Published per item (zero for an item that was not numbered), and err is then a
// *BatchError naming, per failed session, the items not sent. Those keep their Sequence
// and MessageId, so passing them to PublishBatch again resends them with the same
// numbers.
func (p *Publisher) PublishBatch(ctx context.Context, items []BatchItem, _ *PublishBatchOptions) ([]Published, error) {
	ids := make([]string, len(items))
	for i, it := range items {
		if it.Message == nil {
			return nil, fmt.Errorf("publisher: batch item %d: nil Message", i)
		}
		id, err := p.sessionID(it.Message)
		if err != nil {
			return nil, fmt.Errorf("batch item %d: %w", i, err)
		}
		ids[i] = id
	}

	type group struct {
		id       string
		items    []int // indexes into items, in order
		numbered int   // items[:numbered] got their numbers
		ended    bool  // the counter ended the session while numbering
		err      error
	}
	var order []*group
	groups := map[string]*group{}
	for i, id := range ids {
		g := groups[id]
		if g == nil {
			g = &group{id: id}
			groups[id] = g
			order = append(order, g)
		}
		g.items = append(g.items, i)
	}

	res := make([]Published, len(items))
	for i, id := range ids {
		g := groups[id]
		if g.err != nil {
			continue
		}
		pub, ended, err := p.number(ctx, items[i].Message, id, items[i].Last)
		if err != nil {
			g.err = err
			continue
		}
		res[i] = pub
		g.ended = g.ended || ended
		g.numbered++
	}

	var failed []SessionError
	for _, g := range order {
		msgs := make([]*azservicebus.Message, g.numbered)
		for k, i := range g.items[:g.numbered] {
			msgs[k] = items[i].Message
		}
		sent, err := p.send(ctx, msgs)
		if err != nil {
			err = fmt.Errorf("publisher: send session %q from sequence %d: %w", g.id, res[g.items[sent]].Sequence, err)
		} else {
			err = g.err
		}
		if err == nil && sent > 0 && items[g.items[sent-1]].Last {
			err = p.end(ctx, g.id, true, g.ended)
		}
		if err != nil {
			failed = append(failed, SessionError{SessionID: g.id, Unsent: slices.Clone(g.items[sent:]), Err: err})
		}
	}
	if len(failed) > 0 {
		return res, &BatchError{Sessions: failed}
	}
	return res, nil
}

// send sends msgs in order and returns how many of the leading ones went out.
func (p *Publisher) send(ctx context.Context, msgs []*azservicebus.Message) (int, error) {
	if bs, ok := p.sender.(BatchSender); ok {
		return SendInBatches(ctx, bs, msgs)
	}
	if ms, ok := p.sender.(MessagesSender); ok {
		return ms.SendMessages(ctx, msgs)
	}
	for i, m := range msgs {
		if err := p.sender.SendMessage(ctx, m, nil); err != nil {
			return i, err
		}
	}
	return len(msgs), nil
}

// SendInBatches sends msgs in order, in as few batches as the sender's link allows, and
// returns how many of the leading messages the broker accepted (all of them when err is
// nil). A batch is all or nothing, so after an error the messages from the returned
// index on were not sent by this call. A message too large for an empty batch is an
// error wrapping azservicebus.ErrMessageTooLarge.
func SendInBatches(ctx context.Context, s BatchSender, msgs []*azservicebus.Message) (int, error) {
	sent := 0
	for sent < len(msgs) {
		batch, err := s.NewMessageBatch(ctx, nil)
		if err != nil {
			return sent, fmt.Errorf("new message batch: %w", err)
		}
		n := 0
		for _, m := range msgs[sent:] {
			if err := batch.AddMessage(m, nil); err != nil {
				if errors.Is(err, azservicebus.ErrMessageTooLarge) && n > 0 {
					break // the batch is full: send it and start the next
				}
				return sent, fmt.Errorf("message %d of %d (%d bytes of body): %w", sent+n+1, len(msgs), len(m.Body), err)
			}
			n++
		}
		if err := s.SendMessageBatch(ctx, batch, nil); err != nil {
			return sent, err
		}
		sent += n
	}
	return sent, nil
}

// SessionError is one session a PublishBatch could not publish completely.
type SessionError struct {
	SessionID string
	// Unsent lists the indexes (into PublishBatch's items) of the session's messages that
	// were not sent, in order.
	Unsent []int
	Err    error
}

// BatchError is PublishBatch's error when some sessions failed.
type BatchError struct {
	Sessions []SessionError // in order of first appearance
}

func (e *BatchError) Error() string {
	parts := make([]string, len(e.Sessions))
	for i, s := range e.Sessions {
		parts[i] = fmt.Sprintf("%v (%d messages not sent)", s.Err, len(s.Unsent))
	}
	return fmt.Sprintf("publisher: %d sessions failed: %s", len(e.Sessions), strings.Join(parts, "; "))
}

// Unwrap returns each session's error, for errors.Is and errors.As.
func (e *BatchError) Unwrap() []error {
	errs := make([]error, len(e.Sessions))
	for i, s := range e.Sessions {
		errs[i] = s.Err
	}
	return errs
}

// asInt64 reads a Sequence property the caller set, of any Go integer type.
func asInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case int32:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint8:
		return int64(x), true
	}
	return 0, false
}

func keys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// MemoryCounter is a Counter in memory, for tests and a single process: its numbers
// live as long as the process, so a restarted publisher, or a second instance, hands
// out numbers again (the worker then drops real messages as duplicates). Use
// outbox.Counter (Postgres) wherever more than one process publishes into a session or
// a process can restart mid-session. It is safe for concurrent use.
type MemoryCounter struct {
	mu   sync.Mutex
	next map[string]int64
}

// NewMemoryCounter returns an empty MemoryCounter.
func NewMemoryCounter() *MemoryCounter { return &MemoryCounter{next: map[string]int64{}} }

// Next implements Counter.
func (c *MemoryCounter) Next(_ context.Context, sessionID string) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next[sessionID]++
	return c.next[sessionID], nil
}

// End implements Counter: it forgets the session.
func (c *MemoryCounter) End(_ context.Context, sessionID string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.next, sessionID)
	return nil
}

// Sessions returns how many sessions the counter tracks.
func (c *MemoryCounter) Sessions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.next)
}

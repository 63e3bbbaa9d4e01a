package publisher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// Sender is the part of *azservicebus.Sender a Publisher uses.
type Sender interface {
	SendMessage(ctx context.Context, message *azservicebus.Message, options *azservicebus.SendMessageOptions) error
}

var _ Sender = (*azservicebus.Sender)(nil)

// Counter hands out the sequence numbers of sessions.
type Counter interface {
	// Next returns the next sequence of the session (1 for its first message).
	Next(ctx context.Context, sessionID string) (int64, error)
	// End forgets a session whose last message was published.
	End(ctx context.Context, sessionID string) error
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
	// Counter numbers the messages of each session. Default: a MemoryCounter.
	Counter Counter
}

// ErrNoStrategy is returned by New for a Config without a Strategy.
var ErrNoStrategy = errors.New("publisher: Config.Strategy is required")

// Publisher sends the messages of sequenced sessions. It is safe for concurrent use.
type Publisher struct {
	sender Sender
	cfg    Config
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
	c.SequenceProperty = cmp.Or(c.SequenceProperty, "Sequence")
	c.LastProperty = cmp.Or(c.LastProperty, "IsLast")
	if c.Counter == nil {
		c.Counter = NewMemoryCounter()
	}
	return &Publisher{sender: s, cfg: c}, nil
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

// Publish sets the message's session id (unless it already has one) and, for a message
// with a session, its Sequence (unless already set, so that retrying the same message
// keeps its number; any Go integer type counts) and IsLast properties, then sends it.
// A message without a session id must carry the application properties the strategy
// needs (ErrNoSessionKey otherwise); a message with one is sent under it and the
// strategy is not consulted.
func (p *Publisher) Publish(ctx context.Context, msg *azservicebus.Message, opts *PublishOptions) (Published, error) {
	if opts == nil {
		opts = &PublishOptions{}
	}
	id, err := p.sessionID(msg)
	if err != nil {
		return Published{}, err
	}
	var res Published
	if id != "" {
		if msg.ApplicationProperties == nil {
			msg.ApplicationProperties = map[string]any{}
		}
		seq, has := asInt64(msg.ApplicationProperties[p.cfg.SequenceProperty])
		if !has {
			if seq, err = p.cfg.Counter.Next(ctx, id); err != nil {
				return Published{}, fmt.Errorf("publisher: session %s: next sequence: %w", id, err)
			}
			msg.ApplicationProperties[p.cfg.SequenceProperty] = seq
		}
		if opts.Last {
			msg.ApplicationProperties[p.cfg.LastProperty] = true
		}
		msg.SessionID = &id
		res = Published{SessionID: id, Sequence: seq}
	}
	if err := p.sender.SendMessage(ctx, msg, nil); err != nil {
		return res, fmt.Errorf("publisher: send (session %q, sequence %d): %w", res.SessionID, res.Sequence, err)
	}
	if opts.Last && id != "" {
		if err := p.cfg.Counter.End(ctx, id); err != nil {
			return res, fmt.Errorf("publisher: session %s: end: %w", id, err)
		}
	}
	return res, nil
}

// sessionID is the message's own session id when it has one (the strategy is not
// consulted then), or the strategy's.
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
		id = sid
	}
	if err := checkLength(id); err != nil {
		return "", err
	}
	return id, nil
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

// MemoryCounter is a Counter in memory. It is safe for concurrent use.
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

// End implements Counter.
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

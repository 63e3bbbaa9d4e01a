package broker

import (
	"fmt"
	"strings"
)

// SessionIDRule says which session entities refuse a $management operation on a session's
// messages (receive-by-sequence-number, update-disposition, peek-message) whose request
// carries no session-id. The zero value is SessionIDOnPartitioned.
type SessionIDRule int

const (
	// SessionIDOnPartitioned refuses such requests on session entities with partitioning
	// enabled (a queue's EnablePartitioning, or its topic's for a subscription): the
	// service refused them there (see the package documentation of emulator).
	SessionIDOnPartitioned SessionIDRule = iota
	// SessionIDAlways refuses them on every session entity: the strict case, for
	// entities without partitioning, whose behaviour no public source states.
	SessionIDAlways
)

// String returns the rule's name as ParseSessionIDRule accepts it.
func (r SessionIDRule) String() string {
	switch r {
	case SessionIDOnPartitioned:
		return "partitioned"
	case SessionIDAlways:
		return "always"
	}
	return fmt.Sprintf("SessionIDRule(%d)", int(r))
}

// ParseSessionIDRule reads "partitioned" or "always" (any case).
func ParseSessionIDRule(s string) (SessionIDRule, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "partitioned":
		return SessionIDOnPartitioned, nil
	case "always":
		return SessionIDAlways, nil
	}
	return 0, fmt.Errorf("%w: session-id rule %q: want partitioned or always", ErrInvalidConfig, s)
}

// MarshalText implements encoding.TextMarshaler (flag.TextVar).
func (r SessionIDRule) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseSessionIDRule.
func (r *SessionIDRule) UnmarshalText(text []byte) error {
	v, err := ParseSessionIDRule(string(text))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

func (r SessionIDRule) validate() error {
	switch r {
	case SessionIDOnPartitioned, SessionIDAlways:
		return nil
	}
	return fmt.Errorf("%w: unknown %v", ErrInvalidConfig, r)
}

// NeedsSessionID reports whether a $management request on one of this entity's session
// messages must name the session with session-id (see SessionIDRule).
func (e *Entity) NeedsSessionID() bool {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if e.sessions == nil {
		return false
	}
	switch e.b.sessionIDRule {
	case SessionIDAlways:
		return true
	default:
		return e.partitionedLocked()
	}
}

// Partitioned reports whether the entity has partitioning enabled: a queue's or topic's
// EnablePartitioning, a subscription's topic's, a dead-letter queue's parent's.
func (e *Entity) Partitioned() bool {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	return e.partitionedLocked()
}

func (e *Entity) partitionedLocked() bool {
	switch {
	case e.parent != nil:
		return e.parent.partitionedLocked()
	case e.topic != nil:
		return e.topic.props.EnablePartitioning
	}
	return e.props.EnablePartitioning
}

// SessionIDRule returns the broker's rule for session-id on $management requests.
func (b *Broker) SessionIDRule() SessionIDRule {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sessionIDRule
}

// tightenSessionIDRuleLocked applies r if it is stricter than the broker's rule (a
// Config.json may ask for SessionIDAlways after the broker was built); a rule is never
// loosened.
func (b *Broker) tightenSessionIDRuleLocked(r SessionIDRule) {
	if r > b.sessionIDRule {
		b.sessionIDRule = r
	}
}

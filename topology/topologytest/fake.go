package topologytest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/seqbus/seqbus/topology"
)

// ErrNotFound and ErrExists are returned (wrapped) by Fake.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
)

// Fake is an in-memory topology.Admin. Like Service Bus it reports the default lock
// duration (1 minute), maximum delivery count (10) and session and dead-lettering flags
// (false) of queues and subscriptions created without them; it keeps other properties
// as written (overlaid on update, as the real adapter does), gives subscriptions
// created without rules the $Default rule, refuses forwarding to a missing entity, and
// records the calls that change something.
type Fake struct {
	mu     sync.Mutex
	ns     topology.Namespace
	writes int
	// Calls lists the changing calls made, e.g. "CreateTopic orders".
	Calls []string
}

var _ topology.Admin = (*Fake)(nil)

// NewFake returns an empty namespace.
func NewFake() *Fake { return &Fake{} }

// Writes returns how many changing calls were made.
func (f *Fake) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

func (f *Fake) record(format string, args ...any) {
	f.writes++
	f.Calls = append(f.Calls, fmt.Sprintf(format, args...))
}

func (f *Fake) ListQueues(context.Context) ([]*topology.Queue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*topology.Queue, len(f.ns.Queues))
	for i, q := range f.ns.Queues {
		c := *q
		out[i] = &c
	}
	return out, nil
}

func (f *Fake) ListTopics(context.Context) ([]*topology.Topic, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*topology.Topic, len(f.ns.Topics))
	for i, t := range f.ns.Topics {
		out[i] = &topology.Topic{Name: t.Name, Props: t.Props}
	}
	return out, nil
}

func (f *Fake) ListSubscriptions(_ context.Context, topic string) ([]*topology.Subscription, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.ns.Topic(topic)
	if t == nil {
		return nil, fmt.Errorf("topic %q: %w", topic, ErrNotFound)
	}
	out := make([]*topology.Subscription, len(t.Subscriptions))
	for i, s := range t.Subscriptions {
		out[i] = &topology.Subscription{Name: s.Name, Props: s.Props}
	}
	return out, nil
}

func (f *Fake) ListRules(_ context.Context, topic, sub string) ([]*topology.Rule, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.sub(topic, sub)
	if err != nil {
		return nil, err
	}
	out := make([]*topology.Rule, len(s.Rules))
	for i, r := range s.Rules {
		c := *r
		out[i] = &c
	}
	return out, nil
}

func (f *Fake) sub(topic, sub string) (*topology.Subscription, error) {
	t := f.ns.Topic(topic)
	if t == nil {
		return nil, fmt.Errorf("topic %q: %w", topic, ErrNotFound)
	}
	s := t.Subscription(sub)
	if s == nil {
		return nil, fmt.Errorf("subscription %q/%q: %w", topic, sub, ErrNotFound)
	}
	return s, nil
}

func (f *Fake) checkTarget(p topology.Properties) error {
	for _, t := range []*string{p.ForwardTo, p.ForwardDeadLetteredMessagesTo} {
		if t != nil && *t != "" && f.ns.Queue(*t) == nil && f.ns.Topic(*t) == nil {
			return fmt.Errorf("forwarding target %q: %w", *t, ErrNotFound)
		}
	}
	return nil
}

func (f *Fake) exists(name string) bool { return f.ns.Queue(name) != nil || f.ns.Topic(name) != nil }

func (f *Fake) CreateQueue(_ context.Context, q *topology.Queue) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.exists(q.Name) {
		return fmt.Errorf("queue %q: %w", q.Name, ErrExists)
	}
	if err := f.checkTarget(q.Props); err != nil {
		return err
	}
	f.record("CreateQueue %s", q.Name)
	f.ns.Queues = append(f.ns.Queues, &topology.Queue{Name: q.Name, Props: withDefaults(q.Props)})
	return nil
}

func (f *Fake) UpdateQueue(_ context.Context, q *topology.Queue) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	lq := f.ns.Queue(q.Name)
	if lq == nil {
		return fmt.Errorf("queue %q: %w", q.Name, ErrNotFound)
	}
	if err := f.checkTarget(q.Props); err != nil {
		return err
	}
	f.record("UpdateQueue %s", q.Name)
	lq.Props.Merge(q.Props)
	return nil
}

func (f *Fake) DeleteQueue(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.ns.Queues)
	f.ns.Queues = deleteNamed(f.ns.Queues, name, func(q *topology.Queue) string { return q.Name })
	if len(f.ns.Queues) == n {
		return fmt.Errorf("queue %q: %w", name, ErrNotFound)
	}
	f.record("DeleteQueue %s", name)
	return nil
}

func (f *Fake) CreateTopic(_ context.Context, t *topology.Topic) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.exists(t.Name) {
		return fmt.Errorf("topic %q: %w", t.Name, ErrExists)
	}
	f.record("CreateTopic %s", t.Name)
	f.ns.Topics = append(f.ns.Topics, &topology.Topic{Name: t.Name, Props: t.Props})
	return nil
}

func (f *Fake) UpdateTopic(_ context.Context, t *topology.Topic) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	lt := f.ns.Topic(t.Name)
	if lt == nil {
		return fmt.Errorf("topic %q: %w", t.Name, ErrNotFound)
	}
	f.record("UpdateTopic %s", t.Name)
	lt.Props.Merge(t.Props)
	return nil
}

func (f *Fake) DeleteTopic(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.ns.Topics)
	f.ns.Topics = deleteNamed(f.ns.Topics, name, func(t *topology.Topic) string { return t.Name })
	if len(f.ns.Topics) == n {
		return fmt.Errorf("topic %q: %w", name, ErrNotFound)
	}
	f.record("DeleteTopic %s", name)
	return nil
}

func (f *Fake) CreateSubscription(_ context.Context, topic string, s *topology.Subscription) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.ns.Topic(topic)
	if t == nil {
		return fmt.Errorf("topic %q: %w", topic, ErrNotFound)
	}
	if t.Subscription(s.Name) != nil {
		return fmt.Errorf("subscription %q/%q: %w", topic, s.Name, ErrExists)
	}
	if err := f.checkTarget(s.Props); err != nil {
		return err
	}
	f.record("CreateSubscription %s/%s", topic, s.Name)
	rules := []*topology.Rule{{Name: topology.DefaultRuleName}}
	if s.Rules != nil {
		rules = make([]*topology.Rule, len(s.Rules))
		for i, r := range s.Rules {
			rules[i] = &topology.Rule{Name: r.Name, Filter: r.Filter, Action: r.Action}
		}
	}
	t.Subscriptions = append(t.Subscriptions, &topology.Subscription{Name: s.Name, Props: withDefaults(s.Props), Rules: rules})
	return nil
}

func (f *Fake) UpdateSubscription(_ context.Context, topic string, s *topology.Subscription) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ls, err := f.sub(topic, s.Name)
	if err != nil {
		return err
	}
	if err := f.checkTarget(s.Props); err != nil {
		return err
	}
	f.record("UpdateSubscription %s/%s", topic, s.Name)
	ls.Props.Merge(s.Props)
	return nil
}

func (f *Fake) DeleteSubscription(_ context.Context, topic, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.ns.Topic(topic)
	if t == nil {
		return fmt.Errorf("topic %q: %w", topic, ErrNotFound)
	}
	n := len(t.Subscriptions)
	t.Subscriptions = deleteNamed(t.Subscriptions, name, func(s *topology.Subscription) string { return s.Name })
	if len(t.Subscriptions) == n {
		return fmt.Errorf("subscription %q/%q: %w", topic, name, ErrNotFound)
	}
	f.record("DeleteSubscription %s/%s", topic, name)
	return nil
}

func (f *Fake) CreateRule(_ context.Context, topic, sub string, r *topology.Rule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.sub(topic, sub)
	if err != nil {
		return err
	}
	if s.Rule(r.Name) != nil {
		return fmt.Errorf("rule %q: %w", r.Name, ErrExists)
	}
	f.record("CreateRule %s/%s/%s", topic, sub, r.Name)
	s.Rules = append(s.Rules, &topology.Rule{Name: r.Name, Filter: r.Filter, Action: r.Action})
	return nil
}

func (f *Fake) UpdateRule(_ context.Context, topic, sub string, r *topology.Rule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.sub(topic, sub)
	if err != nil {
		return err
	}
	lr := s.Rule(r.Name)
	if lr == nil {
		return fmt.Errorf("rule %q: %w", r.Name, ErrNotFound)
	}
	f.record("UpdateRule %s/%s/%s", topic, sub, r.Name)
	lr.Filter, lr.Action = r.Filter, r.Action
	return nil
}

func (f *Fake) DeleteRule(_ context.Context, topic, sub, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.sub(topic, sub)
	if err != nil {
		return err
	}
	n := len(s.Rules)
	s.Rules = deleteNamed(s.Rules, name, func(r *topology.Rule) string { return r.Name })
	if len(s.Rules) == n {
		return fmt.Errorf("rule %q: %w", name, ErrNotFound)
	}
	f.record("DeleteRule %s/%s/%s", topic, sub, name)
	return nil
}

func deleteNamed[T any](list []T, name string, nameOf func(T) string) []T {
	out := list[:0:0]
	for _, x := range list {
		if !strings.EqualFold(nameOf(x), name) {
			out = append(out, x)
		}
	}
	return out
}

// withDefaults fills in the properties Service Bus always reports for queues and
// subscriptions.
func withDefaults(p topology.Properties) topology.Properties {
	lock, count, no := time.Minute, int32(10), false
	d := topology.Properties{
		LockDuration: &lock, MaxDeliveryCount: &count,
		RequiresSession: &no, DeadLetteringOnMessageExpiration: &no,
	}
	d.Merge(p)
	return d
}

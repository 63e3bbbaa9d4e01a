package broker

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/seqbus/seqbus/clock"
)

// Config configures a Broker. The zero value is usable: wall clock, 256 KiB messages,
// no logging.
type Config struct {
	// Clock supplies time and timers. Default clock.Real().
	Clock clock.Clock
	// MaxMessageSize is the largest encoded message accepted, in bytes. Default 256 KiB.
	MaxMessageSize int64
	// Logger receives the broker's events. Default: discard.
	Logger *slog.Logger
	// SQL replaces the built-in SQL rule language (sqlrule). Nil: built-in.
	SQL SQLCompiler
	// SessionIDRule says which session entities refuse $management operations on a
	// session's messages without session-id. Default SessionIDOnPartitioned.
	SessionIDRule SessionIDRule
}

// Broker is an in-memory Service Bus namespace. All methods are safe for concurrent use.
type Broker struct {
	cfg Config
	clk clock.Clock
	log *slog.Logger

	mu     sync.Mutex
	closed bool
	// sessionIDRule starts as cfg.SessionIDRule; a Config.json may tighten it.
	sessionIDRule SessionIDRule
	// queues and topics share one name space, keyed by lower-case name.
	queues map[string]*Entity
	topics map[string]*Entity
}

// New returns an empty broker.
func New(cfg Config) *Broker {
	cfg.Clock = cmp.Or[clock.Clock](cfg.Clock, clock.Real())
	cfg.MaxMessageSize = cmp.Or(cfg.MaxMessageSize, DefaultMaxMessageSize)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.MaxMessageSize < 0 {
		panic("broker.Config.MaxMessageSize must not be negative")
	}
	if err := cfg.SessionIDRule.validate(); err != nil {
		panic("broker.Config.SessionIDRule: " + err.Error())
	}
	return &Broker{
		cfg:           cfg,
		sessionIDRule: cfg.SessionIDRule,
		clk:           cfg.Clock,
		log:           cfg.Logger,
		queues:        make(map[string]*Entity),
		topics:        make(map[string]*Entity),
	}
}

// MaxMessageSize returns the largest encoded message the broker accepts.
func (b *Broker) MaxMessageSize() int64 { return b.cfg.MaxMessageSize }

// Close stops every timer and wakes every waiting receiver and session acceptor, which
// then return ErrClosed. It is safe to call more than once.
func (b *Broker) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for _, q := range b.queues {
		q.shutdownLocked()
	}
	for _, t := range b.topics {
		for _, s := range t.subs {
			s.shutdownLocked()
		}
		t.shutdownLocked()
	}
}

func key(name string) string { return strings.ToLower(name) }

func validName(name string) error {
	if name == "" || strings.TrimSpace(name) != name {
		return fmt.Errorf("%w: invalid entity name %q", ErrInvalidConfig, name)
	}
	if strings.Contains(strings.ToLower(name), "$deadletterqueue") || strings.Contains(name, "$") {
		return fmt.Errorf("%w: entity name %q contains a reserved character", ErrInvalidConfig, name)
	}
	return nil
}

func (b *Broker) checkOpenLocked() error {
	if b.closed {
		return ErrClosed
	}
	return nil
}

// EntityKind says what an Entity is.
type EntityKind int

// Entity kinds.
const (
	KindQueue EntityKind = iota + 1
	KindTopic
	KindSubscription
	KindDeadLetterQueue
)

func (k EntityKind) String() string {
	switch k {
	case KindQueue:
		return "queue"
	case KindTopic:
		return "topic"
	case KindSubscription:
		return "subscription"
	case KindDeadLetterQueue:
		return "dead-letter queue"
	}
	return fmt.Sprintf("EntityKind(%d)", int(k))
}

// Counts are an entity's runtime message counts, as the admin API reports them.
type Counts struct {
	// Active counts messages in the active state, including locked and deferred ones.
	Active     int64
	DeadLetter int64
	Scheduled  int64
	// Transfer is always 0 (forwarding is synchronous). TransferDeadLetter counts the
	// transfer dead-letter queue, which holds the messages whose forwarding failed.
	Transfer           int64
	TransferDeadLetter int64
	// Total is Active + DeadLetter + Scheduled + TransferDeadLetter.
	Total int64
	// SizeBytes is the encoded size of the messages held, dead-lettered ones included.
	SizeBytes int64
}

// EntityInfo describes an entity for the management API.
type EntityInfo struct {
	Kind EntityKind
	// Name is the entity's own name (the subscription name for a subscription).
	Name string
	// Topic is the topic of a subscription, "" otherwise.
	Topic string
	// Path is the entity's address, e.g. "t/Subscriptions/s".
	Path       string
	Properties EntityProperties
	Counts     Counts
	// SubscriptionCount is the number of subscriptions of a topic.
	SubscriptionCount int
	CreatedAt         time.Time
	UpdatedAt         time.Time
	AccessedAt        time.Time
}

// CreateQueue creates a queue. ErrEntityExists if a queue or topic has that name.
func (b *Broker) CreateQueue(name string, p EntityProperties) error {
	if err := validName(name); err != nil {
		return fmt.Errorf("create queue: %w", err)
	}
	if err := p.validate(); err != nil {
		return fmt.Errorf("create queue %q: %w", name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkOpenLocked(); err != nil {
		return err
	}
	if b.queues[key(name)] != nil || b.topics[key(name)] != nil {
		return fmt.Errorf("create queue %q: %w", name, ErrEntityExists)
	}
	if err := b.checkForwardingLocked(name, &p); err != nil {
		return fmt.Errorf("create queue %q: %w", name, err)
	}
	b.queues[key(name)] = b.newEntity(KindQueue, name, "", name, p)
	b.log.Debug("broker: queue created", slog.String("queue", name))
	return nil
}

// CreateTopic creates a topic. ErrEntityExists if a queue or topic has that name.
func (b *Broker) CreateTopic(name string, p EntityProperties) error {
	if err := validName(name); err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	if err := p.validate(); err != nil {
		return fmt.Errorf("create topic %q: %w", name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkOpenLocked(); err != nil {
		return err
	}
	if b.queues[key(name)] != nil || b.topics[key(name)] != nil {
		return fmt.Errorf("create topic %q: %w", name, ErrEntityExists)
	}
	b.topics[key(name)] = b.newEntity(KindTopic, name, "", name, p)
	b.log.Debug("broker: topic created", slog.String("topic", name))
	return nil
}

// CreateSubscription creates a subscription with the $Default rule (a TrueFilter).
func (b *Broker) CreateSubscription(topic, name string, p EntityProperties) error {
	return b.CreateSubscriptionWithRules(topic, name, p, nil)
}

// CreateSubscriptionWithRules creates a subscription with the given rules instead of the
// $Default rule (no rules at all when rules is empty but non-nil).
func (b *Broker) CreateSubscriptionWithRules(topic, name string, p EntityProperties, rules []Rule) error {
	if err := validName(name); err != nil {
		return fmt.Errorf("create subscription: %w", err)
	}
	if err := p.validate(); err != nil {
		return fmt.Errorf("create subscription %q/%q: %w", topic, name, err)
	}
	if rules == nil {
		rules = []Rule{{Name: DefaultRuleName, FilterType: FilterTrue}}
	}
	compiled := make([]*compiledRule, 0, len(rules))
	for _, r := range rules {
		cr, err := b.compileRule(r)
		if err != nil {
			return fmt.Errorf("create subscription %q/%q: %w", topic, name, err)
		}
		if slices.ContainsFunc(compiled, func(c *compiledRule) bool { return key(c.rule.Name) == key(r.Name) }) {
			return fmt.Errorf("create subscription %q/%q: rule %q: %w", topic, name, r.Name, ErrEntityExists)
		}
		compiled = append(compiled, cr)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkOpenLocked(); err != nil {
		return err
	}
	t := b.topics[key(topic)]
	if t == nil {
		return fmt.Errorf("create subscription %q/%q: topic: %w", topic, name, ErrNotFound)
	}
	if t.subs[key(name)] != nil {
		return fmt.Errorf("create subscription %q/%q: %w", topic, name, ErrEntityExists)
	}
	if err := b.checkForwardingLocked("", &p); err != nil {
		return fmt.Errorf("create subscription %q/%q: %w", topic, name, err)
	}
	s := b.newEntity(KindSubscription, name, t.name, t.name+"/Subscriptions/"+name, p)
	s.topic = t
	s.rules = compiled
	t.subs[key(name)] = s
	return nil
}

func (b *Broker) newEntity(kind EntityKind, name, topic, path string, p EntityProperties) *Entity {
	now := b.clk.Now()
	e := &Entity{
		b:         b,
		kind:      kind,
		name:      name,
		topicName: topic,
		path:      path,
		props:     p.withDefaults(),
		createdAt: now,
		updatedAt: now,
		msgs:      make(map[int64]*stored),
		locks:     make(map[lockKey]*stored),
		wake:      make(chan struct{}),
	}
	switch kind {
	case KindTopic:
		e.subs = make(map[string]*Entity)
	case KindQueue, KindSubscription:
		if e.props.RequiresSession {
			e.sessions = make(map[string]*session)
			e.index = newSessionIndex()
		}
		sub := func(suffix string) *Entity {
			return &Entity{
				b:         b,
				kind:      KindDeadLetterQueue,
				name:      name,
				topicName: topic,
				path:      path + suffix,
				props:     dlqProperties(e.props),
				parent:    e,
				createdAt: now,
				updatedAt: now,
				msgs:      make(map[int64]*stored),
				locks:     make(map[lockKey]*stored),
				wake:      make(chan struct{}),
			}
		}
		e.dlq = sub("/$DeadLetterQueue")
		e.tdlq = sub("/$Transfer/$DeadLetterQueue")
	}
	return e
}

// getQueueLocked etc. resolve names case-insensitively.
func (b *Broker) queueLocked(name string) (*Entity, error) {
	if err := b.checkOpenLocked(); err != nil {
		return nil, err
	}
	q := b.queues[key(name)]
	if q == nil {
		return nil, fmt.Errorf("queue %q: %w", name, ErrNotFound)
	}
	return q, nil
}

func (b *Broker) topicLocked(name string) (*Entity, error) {
	if err := b.checkOpenLocked(); err != nil {
		return nil, err
	}
	t := b.topics[key(name)]
	if t == nil {
		return nil, fmt.Errorf("topic %q: %w", name, ErrNotFound)
	}
	return t, nil
}

func (b *Broker) subscriptionLocked(topic, name string) (*Entity, error) {
	t, err := b.topicLocked(topic)
	if err != nil {
		return nil, err
	}
	s := t.subs[key(name)]
	if s == nil {
		return nil, fmt.Errorf("subscription %q/%q: %w", topic, name, ErrNotFound)
	}
	return s, nil
}

// GetQueue describes a queue.
func (b *Broker) GetQueue(name string) (EntityInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, err := b.queueLocked(name)
	if err != nil {
		return EntityInfo{}, err
	}
	return q.infoLocked(), nil
}

// GetTopic describes a topic.
func (b *Broker) GetTopic(name string) (EntityInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.topicLocked(name)
	if err != nil {
		return EntityInfo{}, err
	}
	return t.infoLocked(), nil
}

// GetSubscription describes a subscription.
func (b *Broker) GetSubscription(topic, name string) (EntityInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.subscriptionLocked(topic, name)
	if err != nil {
		return EntityInfo{}, err
	}
	return s.infoLocked(), nil
}

func sortedInfos(m map[string]*Entity) []EntityInfo {
	out := make([]EntityInfo, 0, len(m))
	for _, e := range m {
		out = append(out, e.infoLocked())
	}
	slices.SortFunc(out, func(a, b EntityInfo) int { return cmp.Compare(key(a.Name), key(b.Name)) })
	return out
}

// ListQueues describes every queue, ordered by name.
func (b *Broker) ListQueues() []EntityInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	return sortedInfos(b.queues)
}

// ListTopics describes every topic, ordered by name.
func (b *Broker) ListTopics() []EntityInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	return sortedInfos(b.topics)
}

// ListSubscriptions describes every subscription of a topic, ordered by name.
func (b *Broker) ListSubscriptions(topic string) ([]EntityInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.topicLocked(topic)
	if err != nil {
		return nil, err
	}
	return sortedInfos(t.subs), nil
}

// UpdateQueue replaces a queue's properties. RequiresSession and
// RequiresDuplicateDetection cannot change (ErrNotAllowed), as in Service Bus.
func (b *Broker) UpdateQueue(name string, p EntityProperties) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, err := b.queueLocked(name)
	if err != nil {
		return err
	}
	return q.updateLocked(p)
}

// UpdateTopic replaces a topic's properties. RequiresDuplicateDetection cannot change.
func (b *Broker) UpdateTopic(name string, p EntityProperties) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.topicLocked(name)
	if err != nil {
		return err
	}
	return t.updateLocked(p)
}

// UpdateSubscription replaces a subscription's properties. RequiresSession cannot change.
func (b *Broker) UpdateSubscription(topic, name string, p EntityProperties) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.subscriptionLocked(topic, name)
	if err != nil {
		return err
	}
	return s.updateLocked(p)
}

func (e *Entity) updateLocked(p EntityProperties) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("update %s %q: %w", e.kind, e.path, err)
	}
	p = p.withDefaults()
	if e.kind != KindTopic && p.RequiresSession != e.props.RequiresSession {
		return fmt.Errorf("update %s %q: RequiresSession cannot be changed: %w", e.kind, e.path, ErrNotAllowed)
	}
	if e.kind != KindSubscription && p.RequiresDuplicateDetection != e.props.RequiresDuplicateDetection {
		return fmt.Errorf("update %s %q: RequiresDuplicateDetection cannot be changed: %w", e.kind, e.path, ErrNotAllowed)
	}
	if e.kind != KindSubscription && p.EnablePartitioning != e.props.EnablePartitioning {
		return fmt.Errorf("update %s %q: EnablePartitioning cannot be changed: %w", e.kind, e.path, ErrNotAllowed)
	}
	if e.kind != KindTopic {
		self := e.name
		if e.kind == KindSubscription {
			self = ""
		}
		if err := e.b.checkForwardingLocked(self, &p); err != nil {
			return fmt.Errorf("update %s %q: %w", e.kind, e.path, err)
		}
	}
	e.props = p
	e.updatedAt = e.b.clk.Now()
	if e.dlq != nil {
		e.dlq.props = dlqProperties(p)
		e.tdlq.props = dlqProperties(p)
	}
	e.forwardBacklogLocked()
	e.signalLocked()
	return nil
}

// dlqProperties are the properties of a dead-letter queue: its parent's, without
// sessions, forwarding and duplicate detection.
func dlqProperties(p EntityProperties) EntityProperties {
	p.RequiresSession = false
	p.ForwardTo, p.ForwardDeadLetteredMessagesTo = "", ""
	p.RequiresDuplicateDetection = false
	return p
}

// DeleteQueue deletes a queue and its messages. Waiting receivers get ErrNotFound.
func (b *Broker) DeleteQueue(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, err := b.queueLocked(name)
	if err != nil {
		return err
	}
	delete(b.queues, key(name))
	q.shutdownLocked()
	return nil
}

// DeleteTopic deletes a topic with its subscriptions.
func (b *Broker) DeleteTopic(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.topicLocked(name)
	if err != nil {
		return err
	}
	delete(b.topics, key(name))
	for _, s := range t.subs {
		s.shutdownLocked()
	}
	t.shutdownLocked()
	return nil
}

// DeleteSubscription deletes a subscription and its messages.
func (b *Broker) DeleteSubscription(topic, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.subscriptionLocked(topic, name)
	if err != nil {
		return err
	}
	delete(s.topic.subs, key(name))
	s.shutdownLocked()
	return nil
}

// CreateRule adds a rule to a subscription. ErrEntityExists if the name is taken.
func (b *Broker) CreateRule(topic, sub string, r Rule) error {
	cr, err := b.compileRule(r)
	if err != nil {
		return fmt.Errorf("create rule on %q/%q: %w", topic, sub, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.subscriptionLocked(topic, sub)
	if err != nil {
		return fmt.Errorf("create rule %q: %w", r.Name, err)
	}
	if s.ruleIndexLocked(r.Name) >= 0 {
		return fmt.Errorf("create rule %q on %q: %w", r.Name, s.path, ErrEntityExists)
	}
	s.rules = append(s.rules, cr)
	s.updatedAt = b.clk.Now()
	return nil
}

// UpdateRule replaces an existing rule.
func (b *Broker) UpdateRule(topic, sub string, r Rule) error {
	cr, err := b.compileRule(r)
	if err != nil {
		return fmt.Errorf("update rule on %q/%q: %w", topic, sub, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.subscriptionLocked(topic, sub)
	if err != nil {
		return fmt.Errorf("update rule %q: %w", r.Name, err)
	}
	i := s.ruleIndexLocked(r.Name)
	if i < 0 {
		return fmt.Errorf("update rule %q on %q: %w", r.Name, s.path, ErrNotFound)
	}
	s.rules[i] = cr
	return nil
}

// DeleteRule removes a rule.
func (b *Broker) DeleteRule(topic, sub, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.subscriptionLocked(topic, sub)
	if err != nil {
		return fmt.Errorf("delete rule %q: %w", name, err)
	}
	i := s.ruleIndexLocked(name)
	if i < 0 {
		return fmt.Errorf("delete rule %q on %q: %w", name, s.path, ErrNotFound)
	}
	s.rules = slices.Delete(s.rules, i, i+1)
	return nil
}

// GetRule returns a rule as stored.
func (b *Broker) GetRule(topic, sub, name string) (Rule, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.subscriptionLocked(topic, sub)
	if err != nil {
		return Rule{}, fmt.Errorf("get rule %q: %w", name, err)
	}
	i := s.ruleIndexLocked(name)
	if i < 0 {
		return Rule{}, fmt.Errorf("get rule %q on %q: %w", name, s.path, ErrNotFound)
	}
	return s.rules[i].rule.clone(), nil
}

// ListRules returns a subscription's rules in creation order.
func (b *Broker) ListRules(topic, sub string) ([]Rule, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.subscriptionLocked(topic, sub)
	if err != nil {
		return nil, err
	}
	out := make([]Rule, len(s.rules))
	for i, r := range s.rules {
		out[i] = r.rule.clone()
	}
	return out, nil
}

func (e *Entity) ruleIndexLocked(name string) int {
	return slices.IndexFunc(e.rules, func(r *compiledRule) bool { return key(r.rule.Name) == key(name) })
}

const (
	dlqSuffix         = "/$deadletterqueue"
	transferDLQSuffix = "/$transfer/$deadletterqueue"
	subsSeparator     = "/subscriptions/"
)

// Lookup resolves a link address: "q", "q/$DeadLetterQueue", "t",
// "t/Subscriptions/s" and "t/Subscriptions/s/$DeadLetterQueue", case-insensitively, and
// the transfer dead-letter queues "q/$Transfer/$DeadLetterQueue" and
// "t/Subscriptions/s/$Transfer/$DeadLetterQueue" (kind KindDeadLetterQueue). A leading
// "/" is ignored. ErrNotFound when nothing has that address.
func (b *Broker) Lookup(address string) (*Entity, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkOpenLocked(); err != nil {
		return nil, err
	}
	e := b.lookupLocked(strings.TrimPrefix(address, "/"))
	if e == nil {
		return nil, fmt.Errorf("address %q: %w", address, ErrNotFound)
	}
	return e, nil
}

func (b *Broker) lookupLocked(addr string) *Entity {
	k := key(addr)
	if q := b.queues[k]; q != nil {
		return q
	}
	if t := b.topics[k]; t != nil {
		return t
	}
	if rest, ok := strings.CutSuffix(k, transferDLQSuffix); ok {
		if e := b.lookupLocked(rest); e != nil && e.tdlq != nil {
			return e.tdlq
		}
		return nil
	}
	if rest, ok := strings.CutSuffix(k, dlqSuffix); ok {
		if e := b.lookupLocked(rest); e != nil && e.dlq != nil {
			return e.dlq
		}
		return nil
	}
	if i := strings.LastIndex(k, subsSeparator); i > 0 {
		if t := b.topics[k[:i]]; t != nil {
			return t.subs[k[i+len(subsSeparator):]]
		}
	}
	return nil
}

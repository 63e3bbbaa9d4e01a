package topology

import "context"

// Admin is the narrow management interface plan and apply need. Implementations:
// topology/sbadmin over the azservicebus admin client (real Service Bus or the seqbus
// emulator) and, in tests, an in-memory fake.
//
// Entities are passed in this package's model. List methods return entities without
// their children (topics without subscriptions, subscriptions without rules). A
// missing entity in Update or Delete is an error. Names are case-insensitive.
type Admin interface {
	ListQueues(ctx context.Context) ([]*Queue, error)
	ListTopics(ctx context.Context) ([]*Topic, error)
	ListSubscriptions(ctx context.Context, topic string) ([]*Subscription, error)
	ListRules(ctx context.Context, topic, subscription string) ([]*Rule, error)

	// CreateQueue and UpdateQueue set the non-nil properties of q; Update leaves the
	// others as they are.
	CreateQueue(ctx context.Context, q *Queue) error
	UpdateQueue(ctx context.Context, q *Queue) error
	DeleteQueue(ctx context.Context, name string) error

	CreateTopic(ctx context.Context, t *Topic) error
	UpdateTopic(ctx context.Context, t *Topic) error
	DeleteTopic(ctx context.Context, name string) error

	// CreateSubscription creates s with exactly s.Rules as its rules, or with the
	// $Default rule (matching everything) when s.Rules is nil.
	CreateSubscription(ctx context.Context, topic string, s *Subscription) error
	UpdateSubscription(ctx context.Context, topic string, s *Subscription) error
	DeleteSubscription(ctx context.Context, topic, name string) error

	CreateRule(ctx context.Context, topic, subscription string, r *Rule) error
	UpdateRule(ctx context.Context, topic, subscription string, r *Rule) error
	DeleteRule(ctx context.Context, topic, subscription, name string) error
}

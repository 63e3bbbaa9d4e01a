package sbadmin

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/seqbus/seqbus/admintransport"
	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/topology"
)

// Config says how to reach a namespace: ConnectionString, or Namespace (with
// Credential, default azidentity.DefaultAzureCredential).
type Config struct {
	// ConnectionString is a Service Bus connection string; with
	// UseDevelopmentEmulator=true it reaches the seqbus emulator.
	ConnectionString string
	// Namespace is the fully qualified namespace (name.servicebus.windows.net); a bare
	// name gets ".servicebus.windows.net" appended.
	Namespace string
	// Credential authenticates Namespace. Default azidentity.DefaultAzureCredential.
	Credential azcore.TokenCredential
	// ClientOptions are passed to the admin client.
	ClientOptions *admin.ClientOptions
}

// ErrNoNamespace is returned by Connect when Config names no namespace.
var ErrNoNamespace = errors.New("sbadmin: set a connection string or a namespace")

// Connect returns an admin client for cfg.
func Connect(cfg Config) (*admin.Client, error) {
	switch {
	case cfg.ConnectionString != "":
		c, err := admintransport.NewAdminClient(cfg.ConnectionString, cfg.ClientOptions)
		if err != nil {
			return nil, fmt.Errorf("sbadmin: connection string: %w", err)
		}
		return c, nil
	case cfg.Namespace != "":
		cred := cfg.Credential
		if cred == nil {
			c, err := azidentity.NewDefaultAzureCredential(nil)
			if err != nil {
				return nil, fmt.Errorf("sbadmin: default Azure credential: %w", err)
			}
			cred = c
		}
		ns := cfg.Namespace
		if !strings.Contains(ns, ".") {
			ns += ".servicebus.windows.net"
		}
		c, err := admin.NewClient(ns, cred, cfg.ClientOptions)
		if err != nil {
			return nil, fmt.Errorf("sbadmin: namespace %s: %w", ns, err)
		}
		return c, nil
	}
	return nil, ErrNoNamespace
}

// Admin is a topology.Admin over an admin client.
type Admin struct {
	c *admin.Client
}

var _ topology.Admin = (*Admin)(nil)

// New returns the adapter for c.
func New(c *admin.Client) *Admin { return &Admin{c: c} }

// ListQueues implements topology.Admin.
func (a *Admin) ListQueues(ctx context.Context) ([]*topology.Queue, error) {
	var out []*topology.Queue
	p := a.c.NewListQueuesPager(nil)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, q := range page.Queues {
			out = append(out, &topology.Queue{Name: q.QueueName, Props: fromQueue(q.QueueProperties)})
		}
	}
	return out, nil
}

// ListTopics implements topology.Admin.
func (a *Admin) ListTopics(ctx context.Context) ([]*topology.Topic, error) {
	var out []*topology.Topic
	p := a.c.NewListTopicsPager(nil)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, t := range page.Topics {
			out = append(out, &topology.Topic{Name: t.TopicName, Props: fromTopic(t.TopicProperties)})
		}
	}
	return out, nil
}

// ListSubscriptions implements topology.Admin.
func (a *Admin) ListSubscriptions(ctx context.Context, topic string) ([]*topology.Subscription, error) {
	var out []*topology.Subscription
	p := a.c.NewListSubscriptionsPager(topic, nil)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, s := range page.Subscriptions {
			out = append(out, &topology.Subscription{Name: s.SubscriptionName, Props: fromSubscription(s.SubscriptionProperties)})
		}
	}
	return out, nil
}

// ListRules implements topology.Admin.
func (a *Admin) ListRules(ctx context.Context, topic, sub string) ([]*topology.Rule, error) {
	out := []*topology.Rule{}
	p := a.c.NewListRulesPager(topic, sub, nil)
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Rules {
			out = append(out, fromRule(r))
		}
	}
	return out, nil
}

// CreateQueue implements topology.Admin.
func (a *Admin) CreateQueue(ctx context.Context, q *topology.Queue) error {
	var p admin.QueueProperties
	toQueue(&p, q.Props)
	_, err := a.c.CreateQueue(ctx, q.Name, &admin.CreateQueueOptions{Properties: &p})
	return err
}

// UpdateQueue implements topology.Admin.
func (a *Admin) UpdateQueue(ctx context.Context, q *topology.Queue) error {
	live, err := a.c.GetQueue(ctx, q.Name, nil)
	if err != nil {
		return err
	}
	if live == nil {
		return fmt.Errorf("queue %q does not exist", q.Name)
	}
	p := live.QueueProperties
	toQueue(&p, q.Props)
	_, err = a.c.UpdateQueue(ctx, q.Name, p, nil)
	return err
}

// DeleteQueue implements topology.Admin.
func (a *Admin) DeleteQueue(ctx context.Context, name string) error {
	_, err := a.c.DeleteQueue(ctx, name, nil)
	return err
}

// CreateTopic implements topology.Admin.
func (a *Admin) CreateTopic(ctx context.Context, t *topology.Topic) error {
	var p admin.TopicProperties
	toTopic(&p, t.Props)
	_, err := a.c.CreateTopic(ctx, t.Name, &admin.CreateTopicOptions{Properties: &p})
	return err
}

// UpdateTopic implements topology.Admin.
func (a *Admin) UpdateTopic(ctx context.Context, t *topology.Topic) error {
	live, err := a.c.GetTopic(ctx, t.Name, nil)
	if err != nil {
		return err
	}
	if live == nil {
		return fmt.Errorf("topic %q does not exist", t.Name)
	}
	p := live.TopicProperties
	toTopic(&p, t.Props)
	_, err = a.c.UpdateTopic(ctx, t.Name, p, nil)
	return err
}

// DeleteTopic implements topology.Admin.
func (a *Admin) DeleteTopic(ctx context.Context, name string) error {
	_, err := a.c.DeleteTopic(ctx, name, nil)
	return err
}

// CreateSubscription implements topology.Admin: the first rule is created with the
// subscription as its default rule, the others after it.
func (a *Admin) CreateSubscription(ctx context.Context, topic string, s *topology.Subscription) error {
	var p admin.SubscriptionProperties
	toSubscription(&p, s.Props)
	if len(s.Rules) > 0 {
		first := s.Rules[0]
		p.DefaultRule = &admin.RuleProperties{Name: first.Name, Filter: toFilter(first.Filter), Action: toAction(first.Action)}
	}
	if _, err := a.c.CreateSubscription(ctx, topic, s.Name, &admin.CreateSubscriptionOptions{Properties: &p}); err != nil {
		return err
	}
	if s.Rules != nil && len(s.Rules) == 0 {
		if _, err := a.c.DeleteRule(ctx, topic, s.Name, topology.DefaultRuleName, nil); err != nil {
			return fmt.Errorf("delete rule %s: %w", topology.DefaultRuleName, err)
		}
	}
	for i := 1; i < len(s.Rules); i++ {
		if err := a.CreateRule(ctx, topic, s.Name, s.Rules[i]); err != nil {
			return fmt.Errorf("rule %q: %w", s.Rules[i].Name, err)
		}
	}
	return nil
}

// UpdateSubscription implements topology.Admin.
func (a *Admin) UpdateSubscription(ctx context.Context, topic string, s *topology.Subscription) error {
	live, err := a.c.GetSubscription(ctx, topic, s.Name, nil)
	if err != nil {
		return err
	}
	if live == nil {
		return fmt.Errorf("subscription %s/%s does not exist", topic, s.Name)
	}
	p := live.SubscriptionProperties
	p.DefaultRule = nil
	toSubscription(&p, s.Props)
	_, err = a.c.UpdateSubscription(ctx, topic, s.Name, p, nil)
	return err
}

// DeleteSubscription implements topology.Admin.
func (a *Admin) DeleteSubscription(ctx context.Context, topic, name string) error {
	_, err := a.c.DeleteSubscription(ctx, topic, name, nil)
	return err
}

// CreateRule implements topology.Admin.
func (a *Admin) CreateRule(ctx context.Context, topic, sub string, r *topology.Rule) error {
	name := r.Name
	_, err := a.c.CreateRule(ctx, topic, sub, &admin.CreateRuleOptions{
		Name: &name, Filter: toFilter(r.Filter), Action: toAction(r.Action),
	})
	return err
}

// UpdateRule implements topology.Admin.
func (a *Admin) UpdateRule(ctx context.Context, topic, sub string, r *topology.Rule) error {
	_, err := a.c.UpdateRule(ctx, topic, sub, admin.RuleProperties{
		Name: r.Name, Filter: toFilter(r.Filter), Action: toAction(r.Action),
	})
	return err
}

// DeleteRule implements topology.Admin.
func (a *Admin) DeleteRule(ctx context.Context, topic, sub, name string) error {
	_, err := a.c.DeleteRule(ctx, topic, sub, name, nil)
	return err
}

// ---- conversions ----

func dur(s *string) *time.Duration {
	if s == nil || *s == "" {
		return nil
	}
	d, err := contract.ParseDuration(*s)
	if err != nil {
		return nil
	}
	return &d
}

func iso(d *time.Duration) *string {
	if d == nil {
		return nil
	}
	s := contract.FormatDuration(*d)
	return &s
}

// entityName reduces a forwarding target as the service reports it
// (https://ns.servicebus.windows.net/name or sb://…/name) to the entity name.
func entityName(s *string) *string {
	if s == nil {
		return nil
	}
	v := *s
	if strings.Contains(v, "://") {
		if u, err := url.Parse(v); err == nil {
			v = strings.Trim(u.Path, "/")
		}
	}
	return &v
}

func fromQueue(q admin.QueueProperties) topology.Properties {
	return topology.Properties{
		LockDuration:                        dur(q.LockDuration),
		MaxDeliveryCount:                    q.MaxDeliveryCount,
		DefaultMessageTimeToLive:            dur(q.DefaultMessageTimeToLive),
		DeadLetteringOnMessageExpiration:    q.DeadLetteringOnMessageExpiration,
		RequiresSession:                     q.RequiresSession,
		RequiresDuplicateDetection:          q.RequiresDuplicateDetection,
		DuplicateDetectionHistoryTimeWindow: dur(q.DuplicateDetectionHistoryTimeWindow),
		MaxSizeInMegabytes:                  q.MaxSizeInMegabytes,
		EnableBatchedOperations:             q.EnableBatchedOperations,
		AutoDeleteOnIdle:                    dur(q.AutoDeleteOnIdle),
		ForwardTo:                           entityName(q.ForwardTo),
		ForwardDeadLetteredMessagesTo:       entityName(q.ForwardDeadLetteredMessagesTo),
		UserMetadata:                        q.UserMetadata,
	}
}

func toQueue(q *admin.QueueProperties, p topology.Properties) {
	set(&q.LockDuration, iso(p.LockDuration))
	set(&q.MaxDeliveryCount, p.MaxDeliveryCount)
	set(&q.DefaultMessageTimeToLive, iso(p.DefaultMessageTimeToLive))
	set(&q.DeadLetteringOnMessageExpiration, p.DeadLetteringOnMessageExpiration)
	set(&q.RequiresSession, p.RequiresSession)
	set(&q.RequiresDuplicateDetection, p.RequiresDuplicateDetection)
	set(&q.DuplicateDetectionHistoryTimeWindow, iso(p.DuplicateDetectionHistoryTimeWindow))
	set(&q.MaxSizeInMegabytes, p.MaxSizeInMegabytes)
	set(&q.EnableBatchedOperations, p.EnableBatchedOperations)
	set(&q.AutoDeleteOnIdle, iso(p.AutoDeleteOnIdle))
	set(&q.ForwardTo, p.ForwardTo)
	set(&q.ForwardDeadLetteredMessagesTo, p.ForwardDeadLetteredMessagesTo)
	set(&q.UserMetadata, p.UserMetadata)
}

func fromTopic(t admin.TopicProperties) topology.Properties {
	return topology.Properties{
		DefaultMessageTimeToLive:            dur(t.DefaultMessageTimeToLive),
		RequiresDuplicateDetection:          t.RequiresDuplicateDetection,
		DuplicateDetectionHistoryTimeWindow: dur(t.DuplicateDetectionHistoryTimeWindow),
		MaxSizeInMegabytes:                  t.MaxSizeInMegabytes,
		EnableBatchedOperations:             t.EnableBatchedOperations,
		AutoDeleteOnIdle:                    dur(t.AutoDeleteOnIdle),
		UserMetadata:                        t.UserMetadata,
	}
}

func toTopic(t *admin.TopicProperties, p topology.Properties) {
	set(&t.DefaultMessageTimeToLive, iso(p.DefaultMessageTimeToLive))
	set(&t.RequiresDuplicateDetection, p.RequiresDuplicateDetection)
	set(&t.DuplicateDetectionHistoryTimeWindow, iso(p.DuplicateDetectionHistoryTimeWindow))
	set(&t.MaxSizeInMegabytes, p.MaxSizeInMegabytes)
	set(&t.EnableBatchedOperations, p.EnableBatchedOperations)
	set(&t.AutoDeleteOnIdle, iso(p.AutoDeleteOnIdle))
	set(&t.UserMetadata, p.UserMetadata)
}

func fromSubscription(s admin.SubscriptionProperties) topology.Properties {
	return topology.Properties{
		LockDuration:                     dur(s.LockDuration),
		MaxDeliveryCount:                 s.MaxDeliveryCount,
		DefaultMessageTimeToLive:         dur(s.DefaultMessageTimeToLive),
		DeadLetteringOnMessageExpiration: s.DeadLetteringOnMessageExpiration,
		RequiresSession:                  s.RequiresSession,
		EnableBatchedOperations:          s.EnableBatchedOperations,
		AutoDeleteOnIdle:                 dur(s.AutoDeleteOnIdle),
		ForwardTo:                        entityName(s.ForwardTo),
		ForwardDeadLetteredMessagesTo:    entityName(s.ForwardDeadLetteredMessagesTo),
		UserMetadata:                     s.UserMetadata,
	}
}

func toSubscription(s *admin.SubscriptionProperties, p topology.Properties) {
	set(&s.LockDuration, iso(p.LockDuration))
	set(&s.MaxDeliveryCount, p.MaxDeliveryCount)
	set(&s.DefaultMessageTimeToLive, iso(p.DefaultMessageTimeToLive))
	set(&s.DeadLetteringOnMessageExpiration, p.DeadLetteringOnMessageExpiration)
	set(&s.RequiresSession, p.RequiresSession)
	set(&s.EnableBatchedOperations, p.EnableBatchedOperations)
	set(&s.AutoDeleteOnIdle, iso(p.AutoDeleteOnIdle))
	set(&s.ForwardTo, p.ForwardTo)
	set(&s.ForwardDeadLetteredMessagesTo, p.ForwardDeadLetteredMessagesTo)
	set(&s.UserMetadata, p.UserMetadata)
}

// set overwrites *dst when v is set.
func set[T any](dst **T, v *T) {
	if v != nil {
		c := *v
		*dst = &c
	}
}

func toFilter(f topology.Filter) admin.RuleFilter {
	if c := f.Correlation; c != nil {
		return &admin.CorrelationFilter{
			ApplicationProperties: c.Properties,
			ContentType:           c.ContentType,
			CorrelationID:         c.CorrelationID,
			MessageID:             c.MessageID,
			ReplyTo:               c.ReplyTo,
			ReplyToSessionID:      c.ReplyToSessionID,
			SessionID:             c.SessionID,
			Subject:               c.Subject,
			To:                    c.To,
		}
	}
	if sql := strings.TrimSpace(f.SQL); sql != "" && sql != "1=1" {
		return &admin.SQLFilter{Expression: sql}
	}
	return &admin.TrueFilter{}
}

func toAction(a string) admin.RuleAction {
	if strings.TrimSpace(a) == "" {
		return nil
	}
	return &admin.SQLAction{Expression: a}
}

func fromRule(r admin.RuleProperties) *topology.Rule {
	out := &topology.Rule{Name: r.Name}
	switch f := r.Filter.(type) {
	case *admin.SQLFilter:
		if strings.TrimSpace(f.Expression) != "1=1" {
			out.Filter.SQL = f.Expression
		}
	case *admin.FalseFilter:
		out.Filter.SQL = "1=0"
	case *admin.CorrelationFilter:
		out.Filter.Correlation = &topology.Correlation{
			CorrelationID: f.CorrelationID, MessageID: f.MessageID, To: f.To, ReplyTo: f.ReplyTo,
			Subject: f.Subject, SessionID: f.SessionID, ReplyToSessionID: f.ReplyToSessionID,
			ContentType: f.ContentType, Properties: normalizeProps(f.ApplicationProperties),
		}
	case *admin.UnknownRuleFilter:
		out.Filter.SQL = "(unsupported filter type " + f.Type + ")"
	}
	if a, ok := r.Action.(*admin.SQLAction); ok {
		out.Action = a.Expression
	}
	return out
}

// normalizeProps gives correlation property values the types the file reader uses.
func normalizeProps(in map[string]any) map[string]any {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]any, len(in))
	for k, v := range in {
		switch x := v.(type) {
		case int:
			out[k] = int64(x)
		case int32:
			out[k] = int64(x)
		case float32:
			out[k] = float64(x)
		default:
			out[k] = v
		}
	}
	return out
}

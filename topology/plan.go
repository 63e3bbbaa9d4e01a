package topology

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seqbus/seqbus/contract"
)

// Op is what a change does.
type Op string

// Ops.
const (
	OpCreate Op = "create"
	OpUpdate Op = "update"
	// OpReplace deletes and recreates an entity whose immutable property
	// (requiresSession, requiresDuplicateDetection) differs; its messages are lost.
	OpReplace Op = "replace"
	// OpDelete removes an entity (or rule) the file does not declare.
	OpDelete Op = "delete"
)

// Kind is the kind of entity a change is about.
type Kind string

// Kinds.
const (
	KindQueue        Kind = "queue"
	KindTopic        Kind = "topic"
	KindSubscription Kind = "subscription"
	KindRule         Kind = "rule"
)

// FieldChange is one property whose live value differs from the file's.
type FieldChange struct {
	Field string // the file's key, e.g. "lockDuration"
	Live  string // "(unset)" when the namespace reports none
	Want  string
}

// Change is one step of a plan.
type Change struct {
	Op   Op
	Kind Kind
	// Topic and Subscription are the parents of a subscription or rule.
	Topic, Subscription string
	Name                string
	Fields              []FieldChange
	// The desired entity (nil for OpDelete); only the one matching Kind is set.
	Queue       *Queue
	TopicEntity *Topic
	Sub         *Subscription
	Rule        *Rule
}

// Path is the entity's path in the namespace: "q", "t", "t/Subscriptions/s",
// "t/Subscriptions/s/Rules/r".
func (c Change) Path() string {
	switch c.Kind {
	case KindSubscription:
		return c.Topic + "/Subscriptions/" + c.Name
	case KindRule:
		return c.Topic + "/Subscriptions/" + c.Subscription + "/Rules/" + c.Name
	}
	return c.Name
}

// Destructive reports whether the change deletes an entity (and its messages): apply
// makes it only when told to prune. Deleting a rule of a subscription whose rules the
// file declares is not destructive.
func (c Change) Destructive() bool {
	return c.Op == OpReplace || c.Op == OpDelete && c.Kind != KindRule
}

func (c Change) String() string {
	sym := map[Op]string{OpCreate: "+", OpUpdate: "~", OpReplace: "!", OpDelete: "-"}[c.Op]
	s := fmt.Sprintf("%s %s %s %s", sym, c.Op, c.Kind, c.Path())
	if c.Destructive() {
		s += " (needs --prune)"
	}
	return s
}

// Plan is the ordered list of changes that make a namespace equal to a file.
type Plan struct {
	Changes []Change
}

// Empty reports whether there is nothing to do.
func (p *Plan) Empty() bool { return len(p.Changes) == 0 }

// Write prints the plan, one change per line followed by its field changes.
func (p *Plan) Write(w io.Writer) error {
	if p.Empty() {
		_, err := fmt.Fprintln(w, "No changes: the namespace matches the file.")
		return err
	}
	var b strings.Builder
	counts := map[Op]int{}
	for _, c := range p.Changes {
		counts[c.Op]++
		b.WriteString(c.String() + "\n")
		for _, f := range c.Fields {
			fmt.Fprintf(&b, "    %s: %s → %s\n", f.Field, f.Live, f.Want)
		}
	}
	fmt.Fprintf(&b, "Plan: %d to create, %d to update, %d to replace, %d to delete.\n",
		counts[OpCreate], counts[OpUpdate], counts[OpReplace], counts[OpDelete])
	_, err := io.WriteString(w, b.String())
	return err
}

// Fetch reads the live namespace through a. When want is not nil, it reads only what
// Diff needs: subscriptions of the topics want declares, rules of the subscriptions
// whose rules want manages.
func Fetch(ctx context.Context, a Admin, want *Namespace) (*Namespace, error) {
	live := &Namespace{}
	var err error
	if live.Queues, err = a.ListQueues(ctx); err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	if live.Topics, err = a.ListTopics(ctx); err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	for _, t := range live.Topics {
		if want != nil && want.Topic(t.Name) == nil {
			continue // deleted with its subscriptions, if at all
		}
		if t.Subscriptions, err = a.ListSubscriptions(ctx, t.Name); err != nil {
			return nil, fmt.Errorf("list subscriptions of topic %q: %w", t.Name, err)
		}
		for _, s := range t.Subscriptions {
			if want != nil {
				wt := want.Topic(t.Name)
				if wt == nil {
					continue
				}
				if ws := wt.Subscription(s.Name); ws == nil || ws.Rules == nil {
					continue
				}
			}
			if s.Rules, err = a.ListRules(ctx, t.Name, s.Name); err != nil {
				return nil, fmt.Errorf("list rules of %s/%s: %w", t.Name, s.Name, err)
			}
		}
	}
	return live, nil
}

// Diff returns the changes that make live equal to want, in the order Apply makes them:
// topics, queues (forwarding targets first), replaced topics (recreated with their
// subscriptions), subscriptions, rules, then deletions
// (rules, subscriptions, queues and topics the file does not declare). Only the
// properties want sets are compared.
func Diff(want, live *Namespace) *Plan {
	p := &Plan{}
	recreated := map[string]bool{} // topics replaced with their subscriptions
	// A replaced topic is recreated with its subscriptions in one step, which comes
	// after the queues their subscriptions may forward to.
	var replaces []Change
	for _, t := range want.Topics {
		lt := live.Topic(t.Name)
		switch {
		case lt == nil:
			p.Changes = append(p.Changes, Change{Op: OpCreate, Kind: KindTopic, Name: t.Name, TopicEntity: t})
		default:
			fields, replace := diffProps(t.Props, lt.Props)
			switch op := changeOp(fields, replace); op {
			case OpReplace:
				recreated[strings.ToLower(t.Name)] = true
				replaces = append(replaces, Change{Op: op, Kind: KindTopic, Name: t.Name, Fields: fields, TopicEntity: t})
			case OpUpdate:
				p.Changes = append(p.Changes, Change{Op: op, Kind: KindTopic, Name: t.Name, Fields: fields, TopicEntity: t})
			}
		}
	}
	for _, q := range forwardOrder(want) {
		lq := live.Queue(q.Name)
		switch {
		case lq == nil:
			p.Changes = append(p.Changes, Change{Op: OpCreate, Kind: KindQueue, Name: q.Name, Queue: q})
		default:
			fields, replace := diffProps(q.Props, lq.Props)
			if op := changeOp(fields, replace); op != "" {
				p.Changes = append(p.Changes, Change{Op: op, Kind: KindQueue, Name: q.Name, Fields: fields, Queue: q})
			}
		}
	}
	p.Changes = append(p.Changes, replaces...)
	var ruleChanges, deletes []Change
	for _, t := range want.Topics {
		if recreated[strings.ToLower(t.Name)] {
			continue
		}
		lt := live.Topic(t.Name)
		for _, s := range t.Subscriptions {
			var ls *Subscription
			if lt != nil {
				ls = lt.Subscription(s.Name)
			}
			if ls == nil {
				p.Changes = append(p.Changes, Change{Op: OpCreate, Kind: KindSubscription, Topic: t.Name, Name: s.Name, Sub: s})
				continue
			}
			fields, replace := diffProps(s.Props, ls.Props)
			op := changeOp(fields, replace)
			if op != "" {
				p.Changes = append(p.Changes, Change{Op: op, Kind: KindSubscription, Topic: t.Name, Name: s.Name, Fields: fields, Sub: s})
			}
			if s.Rules == nil || op == OpReplace {
				continue // a replaced subscription is created with its rules
			}
			ruleChanges = append(ruleChanges, diffRules(t.Name, s, ls)...)
		}
		if lt == nil {
			continue
		}
		for _, ls := range lt.Subscriptions {
			if t.Subscription(ls.Name) == nil {
				deletes = append(deletes, Change{Op: OpDelete, Kind: KindSubscription, Topic: lt.Name, Name: ls.Name})
			}
		}
	}
	p.Changes = append(p.Changes, ruleChanges...)
	p.Changes = append(p.Changes, deletes...)
	for _, lq := range live.Queues {
		if want.Queue(lq.Name) == nil {
			p.Changes = append(p.Changes, Change{Op: OpDelete, Kind: KindQueue, Name: lq.Name})
		}
	}
	for _, lt := range live.Topics {
		if want.Topic(lt.Name) == nil {
			p.Changes = append(p.Changes, Change{Op: OpDelete, Kind: KindTopic, Name: lt.Name})
		}
	}
	return p
}

func changeOp(fields []FieldChange, replace bool) Op {
	switch {
	case replace:
		return OpReplace
	case len(fields) > 0:
		return OpUpdate
	}
	return ""
}

func diffRules(topic string, want, live *Subscription) []Change {
	var out []Change
	for _, r := range want.Rules {
		lr := live.Rule(r.Name)
		if lr == nil {
			out = append(out, Change{Op: OpCreate, Kind: KindRule, Topic: topic, Subscription: want.Name, Name: r.Name, Rule: r})
			continue
		}
		if fields := diffRule(r, lr); len(fields) > 0 {
			out = append(out, Change{Op: OpUpdate, Kind: KindRule, Topic: topic, Subscription: want.Name, Name: r.Name, Fields: fields, Rule: r})
		}
	}
	for _, lr := range live.Rules {
		if want.Rule(lr.Name) == nil {
			out = append(out, Change{Op: OpDelete, Kind: KindRule, Topic: topic, Subscription: want.Name, Name: lr.Name})
		}
	}
	return out
}

func diffRule(want, live *Rule) []FieldChange {
	var out []FieldChange
	if w, l := FilterString(want.Filter), FilterString(live.Filter); w != l {
		out = append(out, FieldChange{Field: "filter", Live: l, Want: w})
	}
	if w, l := strings.TrimSpace(want.Action), strings.TrimSpace(live.Action); w != l {
		out = append(out, FieldChange{Field: "action", Live: quoteOrNone(l), Want: quoteOrNone(w)})
	}
	return out
}

func quoteOrNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return strconv.Quote(s)
}

// FilterString is a canonical one-line form of a filter: `sql "…"`, `correlation
// {…}` or `true`.
func FilterString(f Filter) string {
	if c := f.Correlation; c != nil {
		var parts []string
		add := func(k string, v *string) {
			if v != nil {
				parts = append(parts, k+"="+strconv.Quote(*v))
			}
		}
		add("correlationId", c.CorrelationID)
		add("messageId", c.MessageID)
		add("to", c.To)
		add("replyTo", c.ReplyTo)
		add("subject", c.Subject)
		add("sessionId", c.SessionID)
		add("replyToSessionId", c.ReplyToSessionID)
		add("contentType", c.ContentType)
		for _, k := range slices.Sorted(maps.Keys(c.Properties)) {
			parts = append(parts, fmt.Sprintf("user.%s=%#v", k, c.Properties[k]))
		}
		return "correlation {" + strings.Join(parts, ", ") + "}"
	}
	sql := strings.TrimSpace(f.SQL)
	if sql == "" || sql == "1=1" {
		return "true"
	}
	return "sql " + strconv.Quote(sql)
}

// diffProps compares the properties want sets with live's, and reports whether an
// immutable one differs.
func diffProps(want, live Properties) (fields []FieldChange, replace bool) {
	dur := func(key string, w, l *time.Duration) {
		if w != nil && (l == nil || *w != *l) {
			fields = append(fields, FieldChange{Field: key, Live: fmtPtr(l, contract.FormatDuration), Want: contract.FormatDuration(*w)})
		}
	}
	boolean := func(key string, w, l *bool, immutable bool) {
		if w != nil && (l == nil || *w != *l) {
			fields = append(fields, FieldChange{Field: key, Live: fmtPtr(l, strconv.FormatBool), Want: strconv.FormatBool(*w)})
			if immutable && l != nil {
				replace = true
			}
		}
	}
	integer := func(key string, w, l *int32) {
		if w != nil && (l == nil || *w != *l) {
			f := func(v int32) string { return strconv.Itoa(int(v)) }
			fields = append(fields, FieldChange{Field: key, Live: fmtPtr(l, f), Want: f(*w)})
		}
	}
	str := func(key string, w, l *string, fold bool) {
		if w == nil {
			return
		}
		lv := ""
		if l != nil {
			lv = *l
		}
		if *w == lv || fold && strings.EqualFold(*w, lv) {
			return
		}
		fields = append(fields, FieldChange{Field: key, Live: quoteOrNone(lv), Want: quoteOrNone(*w)})
	}
	dur(keyLockDuration, want.LockDuration, live.LockDuration)
	integer(keyMaxDeliveryCount, want.MaxDeliveryCount, live.MaxDeliveryCount)
	dur(keyDefaultMessageTimeToLive, want.DefaultMessageTimeToLive, live.DefaultMessageTimeToLive)
	boolean(keyDeadLetteringOnExpiration, want.DeadLetteringOnMessageExpiration, live.DeadLetteringOnMessageExpiration, false)
	boolean(keyRequiresSession, want.RequiresSession, live.RequiresSession, true)
	boolean(keyRequiresDuplicateDetect, want.RequiresDuplicateDetection, live.RequiresDuplicateDetection, true)
	dur(keyDuplicateDetectionWindow, want.DuplicateDetectionHistoryTimeWindow, live.DuplicateDetectionHistoryTimeWindow)
	integer(keyMaxSizeInMegabytes, want.MaxSizeInMegabytes, live.MaxSizeInMegabytes)
	boolean(keyEnableBatchedOperations, want.EnableBatchedOperations, live.EnableBatchedOperations, false)
	dur(keyAutoDeleteOnIdle, want.AutoDeleteOnIdle, live.AutoDeleteOnIdle)
	str(keyForwardTo, want.ForwardTo, live.ForwardTo, true)
	str(keyForwardDeadLetteredTo, want.ForwardDeadLetteredMessagesTo, live.ForwardDeadLetteredMessagesTo, true)
	str(keyUserMetadata, want.UserMetadata, live.UserMetadata, false)
	return fields, replace
}

func fmtPtr[T any](p *T, f func(T) string) string {
	if p == nil {
		return "(unset)"
	}
	return f(*p)
}

// forwardOrder returns the queues so that a queue comes after the queues it forwards to
// (as far as the forwarding graph allows: dead-letter forwarding may form cycles).
func forwardOrder(ns *Namespace) []*Queue {
	var out []*Queue
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(q *Queue)
	visit = func(q *Queue) {
		k := strings.ToLower(q.Name)
		if state[k] != 0 {
			return
		}
		state[k] = 1
		for _, target := range []*string{q.Props.ForwardTo, q.Props.ForwardDeadLetteredMessagesTo} {
			if target != nil {
				if tq := ns.Queue(*target); tq != nil {
					visit(tq)
				}
			}
		}
		state[k] = 2
		out = append(out, q)
	}
	for _, q := range ns.Queues {
		visit(q)
	}
	return out
}

// ApplyOptions adjust Apply. A nil *ApplyOptions means all defaults.
type ApplyOptions struct {
	// Prune allows destructive changes: deleting queues, topics and subscriptions the
	// file does not declare, and replacing entities whose immutable properties differ.
	Prune bool
	// Logger receives one record per change. Default: discard.
	Logger *slog.Logger
}

// ErrSkipped is wrapped by Apply's error when a replace was skipped because Prune was
// not set: the namespace does not match the file.
var ErrSkipped = errors.New("destructive changes skipped")

// ApplyResult says what Apply did.
type ApplyResult struct {
	Applied []Change
	// Skipped are the destructive changes left out because Prune was not set.
	Skipped []Change
}

// Apply makes the changes of p through a, in order, and stops at the first failure.
// Destructive changes are made only with opts.Prune; skipping a replace (but not a
// delete) makes Apply return an error wrapping ErrSkipped after the other changes.
func Apply(ctx context.Context, a Admin, p *Plan, opts *ApplyOptions) (ApplyResult, error) {
	if opts == nil {
		opts = &ApplyOptions{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var res ApplyResult
	for _, c := range p.Changes {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("topology: apply stopped before %s %s %s: %w", c.Op, c.Kind, c.Path(), err)
		}
		if c.Destructive() && !opts.Prune {
			res.Skipped = append(res.Skipped, c)
			log.WarnContext(ctx, "topology: skipped destructive change", slog.String("op", string(c.Op)),
				slog.String("kind", string(c.Kind)), slog.String("path", c.Path()))
			continue
		}
		if err := applyOne(ctx, a, c); err != nil {
			return res, fmt.Errorf("%s %s %s: %w", c.Op, c.Kind, c.Path(), err)
		}
		res.Applied = append(res.Applied, c)
		log.InfoContext(ctx, "topology: applied change", slog.String("op", string(c.Op)),
			slog.String("kind", string(c.Kind)), slog.String("path", c.Path()))
	}
	for _, c := range res.Skipped {
		if c.Op == OpReplace {
			return res, fmt.Errorf("%w: %s %s must be replaced (its messages are lost); rerun with prune", ErrSkipped, c.Kind, c.Path())
		}
	}
	return res, nil
}

func applyOne(ctx context.Context, a Admin, c Change) error {
	switch c.Kind {
	case KindQueue:
		switch c.Op {
		case OpCreate:
			return a.CreateQueue(ctx, c.Queue)
		case OpUpdate:
			return a.UpdateQueue(ctx, c.Queue)
		case OpReplace:
			if err := a.DeleteQueue(ctx, c.Name); err != nil {
				return err
			}
			return a.CreateQueue(ctx, c.Queue)
		case OpDelete:
			return a.DeleteQueue(ctx, c.Name)
		}
	case KindTopic:
		switch c.Op {
		case OpCreate:
			return a.CreateTopic(ctx, c.TopicEntity)
		case OpUpdate:
			return a.UpdateTopic(ctx, c.TopicEntity)
		case OpReplace:
			if err := a.DeleteTopic(ctx, c.Name); err != nil {
				return err
			}
			if err := a.CreateTopic(ctx, c.TopicEntity); err != nil {
				return err
			}
			for _, s := range c.TopicEntity.Subscriptions {
				if err := a.CreateSubscription(ctx, c.Name, s); err != nil {
					return fmt.Errorf("subscription %q: %w", s.Name, err)
				}
			}
			return nil
		case OpDelete:
			return a.DeleteTopic(ctx, c.Name)
		}
	case KindSubscription:
		switch c.Op {
		case OpCreate:
			return a.CreateSubscription(ctx, c.Topic, c.Sub)
		case OpUpdate:
			return a.UpdateSubscription(ctx, c.Topic, c.Sub)
		case OpReplace:
			if err := a.DeleteSubscription(ctx, c.Topic, c.Name); err != nil {
				return err
			}
			return a.CreateSubscription(ctx, c.Topic, c.Sub)
		case OpDelete:
			return a.DeleteSubscription(ctx, c.Topic, c.Name)
		}
	case KindRule:
		switch c.Op {
		case OpCreate:
			return a.CreateRule(ctx, c.Topic, c.Subscription, c.Rule)
		case OpUpdate:
			return a.UpdateRule(ctx, c.Topic, c.Subscription, c.Rule)
		case OpDelete:
			return a.DeleteRule(ctx, c.Topic, c.Subscription, c.Name)
		}
	}
	return fmt.Errorf("topology: unknown change %s %s", c.Op, c.Kind)
}

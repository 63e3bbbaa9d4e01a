package topology

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/sqlrule"
)

// Service Bus limits checked by Validate.
const (
	MaxEntityNameLength       = 260
	MaxSubscriptionNameLength = 50
	MaxRuleNameLength         = 50
	MaxSessionIDLength        = 128
	MaxExpressionLength       = 1024
	MaxForwardingHops         = 4
)

var (
	entityNameRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9._/-]*[A-Za-z0-9])?$`)
	childNameRE  = regexp.MustCompile(`^[A-Za-z0-9$](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$`)
)

// Load parses, validates and expands a topology file: the namespace it declares, the
// warnings, and an Errors naming every problem with its file, line and field.
func Load(file string, data []byte) (*Namespace, []Diagnostic, error) {
	spec, err := Parse(file, data)
	if err != nil {
		return nil, nil, err
	}
	ns, warns, err := Validate(spec)
	if err != nil {
		return nil, warns, err
	}
	return ns, warns, nil
}

// Validate checks spec and the namespace it expands to, without touching any broker:
// names, property ranges and which properties apply to which entity, forwarding
// targets, chains of at most MaxForwardingHops hops and no loops, filters and actions
// of at most MaxExpressionLength characters that compile, and session ids that fit
// MaxSessionIDLength characters given the declared maximum property lengths (a
// warning when a length is unbounded). It returns the expanded namespace.
func Validate(spec *Spec) (*Namespace, []Diagnostic, error) {
	var d diags
	for _, s := range spec.Sequenced {
		validateSequenced(&d, s)
	}
	ns := Expand(spec)
	validateNamespace(&d, ns)
	err, warns := d.split()
	return ns, warns, err
}

func validateSequenced(d *diags, s *Sequenced) {
	before := d.errors()
	defer func() {
		if d.errors() == before {
			validateSessionRules(d, s)
		}
	}()
	if s.Filter != "" {
		checkExpression(d, s.Src, "filter", "filter", s.Filter, compileFilter)
	}
	if s.Name == "" {
		d.errorf(s.Src, "", "name is required")
	} else if !entityNameRE.MatchString(s.Name) {
		d.errorf(s.Src, "name", "%q is not a valid name: letters, digits, '.', '-', '_' and '/', starting and ending with a letter or digit", s.Name)
	}
	topic, _, _ := s.Names()
	if len(s.Sources) == 0 {
		d.errorf(s.Src, "sources", "at least one source topic is required")
	}
	for _, src := range s.Sources {
		if sameName(src, topic) {
			d.errorf(s.Src, "sources", "source %q is the sequencing topic itself", src)
		}
	}
	if s.SessionID == nil {
		d.errorf(s.Src, "sessionId", "sessionId is required (strategy composite, entity, repository, fallback or none)")
		return
	}
	validateKey(d, s.SessionID, true)
	strategy := s.SessionID.Strategy
	if rs := s.Props.RequiresSession; rs != nil {
		switch {
		case !*rs && strategy != StrategyNone:
			d.errorf(s.Src, keyRequiresSession, "the worker subscription must require sessions when the strategy (%s) assigns a session id", strategy)
		case *rs && strategy == StrategyNone:
			d.errorf(s.Src, keyRequiresSession, "strategy none assigns no session id, so the worker subscription cannot require sessions")
		}
	}
	if strategy == StrategyNone || !validStrategy(strategy) {
		return
	}
	n, bounded := SessionIDLength(s.SessionID)
	switch {
	case bounded && n > MaxSessionIDLength:
		d.errorf(s.SessionID.Src, "", "the session id can be %d characters long, Service Bus allows %d: lower the properties' maxLength", n, MaxSessionIDLength)
	case !bounded:
		d.warnf(s.SessionID.Src, "", "the session id length is unbounded (%s): declare maxLength for every property so that it is checked against the limit of %d characters",
			strings.Join(unbounded(s.SessionID), ", "), MaxSessionIDLength)
	}
}

// validateSessionRules compiles the forwarding rules a valid sequenced block generates
// (its filter ANDed with EXISTS conditions, the SET sys.SessionId action), once for all
// its sources; validateRules leaves generated rules alone.
func validateSessionRules(d *diags, s *Sequenced) {
	src := withOrigin(s.Src, "sessionId", s.origin())
	for _, r := range SessionRules(s) {
		if r.Filter.SQL != "" {
			checkExpression(d, src, "", "filter", r.Filter.SQL, compileFilter)
		}
		if r.Action != "" {
			checkExpression(d, src, "", "action", r.Action, compileAction)
		}
	}
}

func compileFilter(e string) error {
	_, err := sqlrule.CompileFilter(e, nil)
	return err
}

func compileAction(e string) error {
	_, err := sqlrule.CompileAction(e, nil)
	return err
}

func validStrategy(s Strategy) bool {
	return slices.Contains([]Strategy{StrategyComposite, StrategyEntity, StrategyRepository, StrategyFallback, StrategyNone}, s)
}

func unbounded(k *SessionKey) []string {
	k = k.resolved()
	var names []string
	for _, alt := range k.Alternatives {
		names = append(names, unbounded(alt)...)
	}
	for _, p := range k.Properties {
		if p.MaxLength == 0 {
			names = append(names, p.Name)
		}
	}
	var out []string
	for _, n := range names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func validateKey(d *diags, k *SessionKey, top bool) {
	if !validStrategy(k.Strategy) {
		if k.Strategy == "" {
			d.errorf(k.Src, "strategy", "strategy is required: composite, entity, repository, fallback or none")
		} else {
			d.errorf(k.Src, "strategy", "unknown strategy %q: want composite, entity, repository, fallback or none", k.Strategy)
		}
		return
	}
	for _, p := range k.Properties {
		switch {
		case p.Name == "":
			d.errorf(p.Src, "name", "property name is required")
		case strings.ContainsAny(p.Name, "[]"):
			d.errorf(p.Src, "name", "property name %q must not contain brackets", p.Name)
		}
		if p.MaxLength < 0 || p.MaxLength > MaxSessionIDLength {
			d.errorf(p.Src, "maxLength", "maxLength %d is out of range 1..%d", p.MaxLength, MaxSessionIDLength)
		}
	}
	if k.Strategy != StrategyFallback && len(k.Alternatives) > 0 {
		d.errorf(k.Src, "alternatives", "alternatives are only for strategy fallback")
	}
	switch k.Strategy {
	case StrategyComposite:
		if len(k.Properties) == 0 {
			d.errorf(k.Src, "properties", "strategy composite needs at least one property")
		}
	case StrategyEntity:
		if n := len(k.Properties); n != 0 && n != len(EntityProperties) {
			d.errorf(k.Src, "properties", "strategy entity takes 4 properties (owner, repo, entity type, entity id), found %d", n)
		}
	case StrategyRepository:
		if n := len(k.Properties); n != 0 && n != len(RepositoryProperties) {
			d.errorf(k.Src, "properties", "strategy repository takes 2 properties (owner, repo), found %d", n)
		}
	case StrategyFallback:
		if !top {
			d.errorf(k.Src, "strategy", "a fallback cannot be nested in a fallback")
			return
		}
		if len(k.Alternatives) < 2 {
			d.errorf(k.Src, "alternatives", "strategy fallback needs at least two alternatives")
		}
		if len(k.Properties) > 0 || k.Separator != "" || k.Suffix != "" {
			d.errorf(k.Src, "strategy", "a fallback takes only alternatives; put properties, separator and suffix in each alternative")
		}
		for _, alt := range k.Alternatives {
			if alt.Strategy == StrategyNone {
				d.errorf(alt.Src, "strategy", "strategy none cannot be an alternative: a message that has none of the properties is not forwarded")
				continue
			}
			validateKey(d, alt, false)
		}
	case StrategyNone:
		if k.Separator != "" || k.Suffix != "" {
			d.errorf(k.Src, "strategy", "strategy none builds no session id: remove separator and suffix")
		}
	}
}

type entityKind int

const (
	kindQueue entityKind = iota
	kindTopic
	kindSubscription
)

func (k entityKind) String() string {
	return [...]string{"queue", "topic", "subscription"}[k]
}

// allowed lists the property keys of each kind of entity.
var allowed = map[entityKind][]string{
	kindQueue: {keyLockDuration, keyMaxDeliveryCount, keyDefaultMessageTimeToLive, keyDeadLetteringOnExpiration,
		keyRequiresSession, keyRequiresDuplicateDetect, keyDuplicateDetectionWindow, keyMaxSizeInMegabytes,
		keyEnableBatchedOperations, keyAutoDeleteOnIdle, keyForwardTo, keyForwardDeadLetteredTo, keyUserMetadata},
	kindTopic: {keyDefaultMessageTimeToLive, keyRequiresDuplicateDetect, keyDuplicateDetectionWindow,
		keyMaxSizeInMegabytes, keyEnableBatchedOperations, keyAutoDeleteOnIdle, keyUserMetadata},
	kindSubscription: {keyLockDuration, keyMaxDeliveryCount, keyDefaultMessageTimeToLive, keyDeadLetteringOnExpiration,
		keyRequiresSession, keyEnableBatchedOperations, keyAutoDeleteOnIdle, keyForwardTo, keyForwardDeadLetteredTo,
		keyUserMetadata},
}

// setKeys returns the file keys of the properties p sets.
func setKeys(p Properties) []string {
	var out []string
	add := func(set bool, k string) {
		if set {
			out = append(out, k)
		}
	}
	add(p.LockDuration != nil, keyLockDuration)
	add(p.MaxDeliveryCount != nil, keyMaxDeliveryCount)
	add(p.DefaultMessageTimeToLive != nil, keyDefaultMessageTimeToLive)
	add(p.DeadLetteringOnMessageExpiration != nil, keyDeadLetteringOnExpiration)
	add(p.RequiresSession != nil, keyRequiresSession)
	add(p.RequiresDuplicateDetection != nil, keyRequiresDuplicateDetect)
	add(p.DuplicateDetectionHistoryTimeWindow != nil, keyDuplicateDetectionWindow)
	add(p.MaxSizeInMegabytes != nil, keyMaxSizeInMegabytes)
	add(p.EnableBatchedOperations != nil, keyEnableBatchedOperations)
	add(p.AutoDeleteOnIdle != nil, keyAutoDeleteOnIdle)
	add(p.ForwardTo != nil, keyForwardTo)
	add(p.ForwardDeadLetteredMessagesTo != nil, keyForwardDeadLetteredTo)
	add(p.UserMetadata != nil, keyUserMetadata)
	return out
}

func validateProps(d *diags, kind entityKind, p Properties, src Source) {
	for _, k := range setKeys(p) {
		if !slices.Contains(allowed[kind], k) {
			d.errorf(src, k, "%s does not apply to a %s", k, kind)
		}
	}
	durRange := func(v *time.Duration, key string, lo, hi time.Duration) {
		if v != nil && (*v < lo || *v > hi) {
			d.errorf(src, key, "%s is out of range %s..%s", contract.FormatDuration(*v), contract.FormatDuration(lo), contract.FormatDuration(hi))
		}
	}
	durRange(p.LockDuration, keyLockDuration, 5*time.Second, 5*time.Minute)
	durRange(p.DuplicateDetectionHistoryTimeWindow, keyDuplicateDetectionWindow, 20*time.Second, 7*24*time.Hour)
	durRange(p.AutoDeleteOnIdle, keyAutoDeleteOnIdle, 5*time.Minute, contract.Forever)
	durRange(p.DefaultMessageTimeToLive, keyDefaultMessageTimeToLive, time.Second, contract.Forever)
	if p.MaxDeliveryCount != nil && *p.MaxDeliveryCount < 1 {
		d.errorf(src, keyMaxDeliveryCount, "must be at least 1, found %d", *p.MaxDeliveryCount)
	}
	if p.MaxSizeInMegabytes != nil && *p.MaxSizeInMegabytes < 1 {
		d.errorf(src, keyMaxSizeInMegabytes, "must be at least 1, found %d", *p.MaxSizeInMegabytes)
	}
	if p.UserMetadata != nil && utf8.RuneCountInString(*p.UserMetadata) > 1024 {
		d.errorf(src, keyUserMetadata, "at most 1024 characters")
	}
}

func validateNamespace(d *diags, ns *Namespace) {
	seen := map[string]Source{}
	checkEntity := func(kind entityKind, name string, src Source) {
		switch {
		case name == "":
			d.errorf(src, "", "name is required")
			return
		case utf8.RuneCountInString(name) > MaxEntityNameLength:
			d.errorf(src, "name", "%s name is longer than %d characters", kind, MaxEntityNameLength)
		case !entityNameRE.MatchString(name):
			d.errorf(src, "name", "%q is not a valid %s name: letters, digits, '.', '-', '_' and '/', starting and ending with a letter or digit", name, kind)
		}
		k := strings.ToLower(name)
		if prev, dup := seen[k]; dup {
			d.errorf(src, "name", "%q is declared twice (first at %s)", name, where(prev))
			return
		}
		seen[k] = src
	}
	for _, q := range ns.Queues {
		checkEntity(kindQueue, q.Name, q.Src)
		validateProps(d, kindQueue, q.Props, q.Src)
		validateForwardTargets(d, ns, q.Name, q.Props, q.Src)
	}
	for _, t := range ns.Topics {
		checkEntity(kindTopic, t.Name, t.Src)
		validateProps(d, kindTopic, t.Props, t.Src)
		subs := map[string]Source{}
		for _, s := range t.Subscriptions {
			validateChildName(d, "subscription", s.Name, s.Src, MaxSubscriptionNameLength, subs)
			validateProps(d, kindSubscription, s.Props, s.Src)
			validateForwardTargets(d, ns, t.Name, s.Props, s.Src)
			validateRules(d, s)
		}
	}
	validateChains(d, ns)
}

func validateChildName(d *diags, what, name string, src Source, maxLen int, seen map[string]Source) {
	switch {
	case name == "":
		d.errorf(src, "", "%s name is required", what)
		return
	case utf8.RuneCountInString(name) > maxLen:
		d.errorf(src, "name", "%s name %q is longer than %d characters", what, name, maxLen)
	case !childNameRE.MatchString(name):
		d.errorf(src, "name", "%q is not a valid %s name: letters, digits, '.', '-' and '_', starting and ending with a letter or digit", name, what)
	}
	k := strings.ToLower(name)
	if prev, dup := seen[k]; dup {
		d.errorf(src, "name", "%s %q is declared twice (first at %s)", what, name, where(prev))
		return
	}
	seen[k] = src
}

func where(src Source) string {
	if src.Line == 0 {
		return src.Path
	}
	return fmt.Sprintf("line %d", src.Line)
}

func validateForwardTargets(d *diags, ns *Namespace, from string, p Properties, src Source) {
	check := func(v *string, key string) {
		if v == nil || *v == "" {
			return
		}
		switch {
		case ns.Queue(*v) == nil && ns.Topic(*v) == nil:
			d.errorf(src, key, "%q is not a queue or topic of the file", *v)
		case sameName(*v, from) && key == keyForwardTo:
			// Reported as a loop by validateChains.
		case sameName(*v, from):
			d.errorf(src, key, "forwards dead-lettered messages back to %q", from)
		}
	}
	check(p.ForwardTo, keyForwardTo)
	check(p.ForwardDeadLetteredMessagesTo, keyForwardDeadLetteredTo)
}

func validateRules(d *diags, s *Subscription) {
	names := map[string]Source{}
	for _, r := range s.Rules {
		validateChildName(d, "rule", r.Name, r.Src, MaxRuleNameLength, names)
		if r.Src.Origin != "" {
			continue // generated by a sequenced block: validateSessionRules checked it
		}
		if sql := r.Filter.SQL; sql != "" {
			checkExpression(d, r.Src, "sql", "filter", sql, compileFilter)
		}
		if c := r.Filter.Correlation; c != nil && c.empty() {
			d.errorf(r.Src, "correlation", "a correlation filter must set at least one field")
		}
		if r.Action != "" {
			checkExpression(d, r.Src, "action", "action", r.Action, compileAction)
		}
	}
	if s.Rules != nil && len(s.Rules) == 0 {
		d.warnf(s.Src, "rules", "subscription %q has no rules: it receives no messages", s.Name)
	}
}

func checkExpression(d *diags, src Source, key, what, expr string, compile func(string) error) {
	if n := utf8.RuneCountInString(expr); n > MaxExpressionLength {
		d.errorf(src, key, "the %s is %d characters long, Service Bus allows %d", what, n, MaxExpressionLength)
		return
	}
	if err := compile(expr); err != nil {
		var se *sqlrule.SyntaxError
		if errors.As(err, &se) {
			d.errorf(src, key, "%s does not compile: %d:%d: %s", what, se.Line, se.Column, se.Msg)
			return
		}
		d.errorf(src, key, "%s does not compile: %v", what, err)
	}
}

func (c *Correlation) empty() bool {
	return c.CorrelationID == nil && c.MessageID == nil && c.To == nil && c.ReplyTo == nil &&
		c.Subject == nil && c.SessionID == nil && c.ReplyToSessionID == nil && c.ContentType == nil &&
		len(c.Properties) == 0
}

// edge is one automatic forwarding: messages of entity from reach entity to.
type edge struct {
	to  string
	src Source
}

// validateChains reports forwarding loops and chains longer than MaxForwardingHops.
func validateChains(d *diags, ns *Namespace) {
	graph := map[string][]edge{}
	display := map[string]string{}
	add := func(from string, p Properties, src Source) {
		if p.ForwardTo == nil || *p.ForwardTo == "" {
			return
		}
		to := *p.ForwardTo
		if ns.Queue(to) == nil && ns.Topic(to) == nil {
			return // reported by validateForwardTargets
		}
		graph[strings.ToLower(from)] = append(graph[strings.ToLower(from)], edge{to: strings.ToLower(to), src: src})
	}
	var order []string
	for _, q := range ns.Queues {
		display[strings.ToLower(q.Name)] = q.Name
		order = append(order, strings.ToLower(q.Name))
		add(q.Name, q.Props, q.Src)
	}
	for _, t := range ns.Topics {
		display[strings.ToLower(t.Name)] = t.Name
		order = append(order, strings.ToLower(t.Name))
		for _, s := range t.Subscriptions {
			add(t.Name, s.Props, s.Src)
		}
	}
	path := func(names []string) string {
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = display[n]
		}
		return strings.Join(out, " → ")
	}
	// Loops: depth-first search with an explicit stack of the current path.
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	reported := map[string]bool{}
	var visit func(n string, stack []string)
	loop := false
	visit = func(n string, stack []string) {
		color[n] = grey
		stack = append(stack, n)
		for _, e := range graph[n] {
			switch color[e.to] {
			case grey:
				i := slices.Index(stack, e.to)
				cycle := append(slices.Clone(stack[i:]), e.to)
				if !reported[e.to] {
					reported[e.to] = true
					d.errorf(e.src, keyForwardTo, "forwarding loop: %s", path(cycle))
				}
				loop = true
			case white:
				visit(e.to, stack)
			}
		}
		color[n] = black
	}
	for _, n := range order {
		if color[n] == white {
			visit(n, nil)
		}
	}
	if loop {
		return
	}
	// Longest chains in the (now acyclic) graph.
	longest := map[string][]string{} // node → longest path starting at it (nodes)
	var chain func(n string) []string
	chain = func(n string) []string {
		if c, ok := longest[n]; ok {
			return c
		}
		best := []string{n}
		for _, e := range graph[n] {
			if c := chain(e.to); len(c)+1 > len(best) {
				best = append([]string{n}, c...)
			}
		}
		longest[n] = best
		return best
	}
	for _, n := range order {
		c := chain(n)
		if hops := len(c) - 1; hops > MaxForwardingHops {
			// Report at the first forwarding of the chain, unless an entity upstream already has.
			for _, e := range graph[n] {
				if len(chain(e.to)) == len(c)-1 {
					d.errorf(e.src, keyForwardTo, "forwarding chain %s has %d hops, Service Bus allows at most %d", path(c), hops, MaxForwardingHops)
					break
				}
			}
			return
		}
	}
}

func sameName(a, b string) bool { return strings.EqualFold(a, b) }

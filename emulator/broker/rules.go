package broker

import (
	"fmt"
	"strings"

	"github.com/Azure/go-amqp"
)

// DefaultRuleName is the name of the rule every new subscription gets, matching all messages.
const DefaultRuleName = "$Default"

// FilterType says which kind of filter a rule has.
type FilterType string

// Filter types. True and False are the service's TrueFilter and FalseFilter.
const (
	FilterTrue        FilterType = "True"
	FilterFalse       FilterType = "False"
	FilterSQL         FilterType = "Sql"
	FilterCorrelation FilterType = "Correlation"
)

// CorrelationFilter matches messages whose system properties equal each non-empty field
// and whose application properties contain each entry of Properties (as in Service Bus).
type CorrelationFilter struct {
	ContentType, CorrelationID, Label, MessageID, ReplyTo, ReplyToSessionID, SessionID, To string
	Properties                                                                             map[string]any
}

// Rule is a subscription rule: a filter and an optional SQL action.
type Rule struct {
	Name string
	// FilterType defaults to FilterTrue.
	FilterType FilterType
	// SQLExpression is the filter expression when FilterType is FilterSQL.
	SQLExpression string
	// Correlation is the filter when FilterType is FilterCorrelation.
	Correlation *CorrelationFilter
	// ActionSQLExpression is the optional SQL rule action ("" for none).
	ActionSQLExpression string
}

// Filter decides whether a rule matches a message. Implementations must not call back
// into the broker (the broker's lock is held).
type Filter interface {
	Match(m *amqp.Message) (bool, error)
}

// Action rewrites the copy of a message a matching rule delivers to its subscription.
type Action interface {
	Apply(m *amqp.Message) error
}

// SQLCompiler compiles the SQL filter and action language. The broker has none built in:
// until one is configured (Config.SQL), SQL rules are stored but match no message, except
// the constant expressions "1=1"/"TRUE" and "1=0"/"FALSE".
type SQLCompiler interface {
	CompileFilter(expr string) (Filter, error)
	CompileAction(expr string) (Action, error)
}

// FilterFunc adapts a function to Filter.
type FilterFunc func(m *amqp.Message) (bool, error)

// Match calls f.
func (f FilterFunc) Match(m *amqp.Message) (bool, error) { return f(m) }

type constFilter bool

func (c constFilter) Match(*amqp.Message) (bool, error) { return bool(c), nil }

// compiledRule is a stored rule with its evaluator.
type compiledRule struct {
	rule   Rule
	filter Filter
	action Action // nil for none
}

func (b *Broker) compileRule(r Rule) (*compiledRule, error) {
	if r.Name == "" {
		return nil, fmt.Errorf("%w: rule has no name", ErrInvalidConfig)
	}
	if r.FilterType == "" {
		r.FilterType = FilterTrue
	}
	cr := &compiledRule{rule: r}
	switch r.FilterType {
	case FilterTrue:
		cr.filter = constFilter(true)
	case FilterFalse:
		cr.filter = constFilter(false)
	case FilterCorrelation:
		if r.Correlation == nil {
			return nil, fmt.Errorf("%w: rule %q: correlation filter without fields", ErrInvalidConfig, r.Name)
		}
		cr.filter = correlationMatcher{r.Correlation}
	case FilterSQL:
		f, err := b.compileSQLFilter(r.SQLExpression)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %q: %w", ErrInvalidConfig, r.Name, err)
		}
		cr.filter = f
	default:
		return nil, fmt.Errorf("%w: rule %q: unknown filter type %q", ErrInvalidConfig, r.Name, r.FilterType)
	}
	if strings.TrimSpace(r.ActionSQLExpression) != "" && b.cfg.SQL != nil {
		a, err := b.cfg.SQL.CompileAction(r.ActionSQLExpression)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %q action: %w", ErrInvalidConfig, r.Name, err)
		}
		cr.action = a
	}
	return cr, nil
}

func (b *Broker) compileSQLFilter(expr string) (Filter, error) {
	if b.cfg.SQL != nil {
		return b.cfg.SQL.CompileFilter(expr)
	}
	switch strings.ToUpper(strings.Join(strings.Fields(expr), "")) {
	case "1=1", "TRUE":
		return constFilter(true), nil
	case "1=0", "FALSE":
		return constFilter(false), nil
	}
	b.log.Warn("broker: no SQL compiler configured; SQL rule matches no message", "expression", expr)
	return constFilter(false), nil
}

type correlationMatcher struct{ f *CorrelationFilter }

func (c correlationMatcher) Match(m *amqp.Message) (bool, error) {
	p := m.Properties
	if p == nil {
		p = &amqp.MessageProperties{}
	}
	str := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	sym := func(s *string) string { return str(s) }
	anyStr := func(v any) string {
		if v == nil {
			return ""
		}
		return fmt.Sprint(v)
	}
	checks := []struct{ want, got string }{
		{c.f.ContentType, sym(p.ContentType)},
		{c.f.CorrelationID, anyStr(p.CorrelationID)},
		{c.f.Label, str(p.Subject)},
		{c.f.MessageID, anyStr(p.MessageID)},
		{c.f.ReplyTo, str(p.ReplyTo)},
		{c.f.ReplyToSessionID, str(p.ReplyToGroupID)},
		{c.f.SessionID, str(p.GroupID)},
		{c.f.To, str(p.To)},
	}
	for _, ch := range checks {
		if ch.want != "" && ch.want != ch.got {
			return false, nil
		}
	}
	for k, want := range c.f.Properties {
		got, ok := m.ApplicationProperties[k]
		if !ok || fmt.Sprint(got) != fmt.Sprint(want) {
			return false, nil
		}
	}
	return true, nil
}

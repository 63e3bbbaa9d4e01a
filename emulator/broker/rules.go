package broker

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/Azure/go-amqp"

	"github.com/seqbus/seqbus/sqlrule"
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
// and whose application properties contain each entry of Properties, compared with
// their types as Service Bus does (an int 5 matches 5 and 5.0, never "5"). Label is the
// message's Subject. A filter that sets nothing is refused.
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
	// SQLParameters are the values of the filter's @name parameters (keyed "name" or
	// "@name"), as the admin API's SqlFilter.Parameters.
	SQLParameters map[string]any
	// Correlation is the filter when FilterType is FilterCorrelation.
	Correlation *CorrelationFilter
	// ActionSQLExpression is the optional SQL rule action ("" for none).
	ActionSQLExpression string
	// ActionParameters are the values of the action's @name parameters.
	ActionParameters map[string]any
}

// clone returns r with its maps and correlation filter copied.
func (r Rule) clone() Rule {
	r.SQLParameters = maps.Clone(r.SQLParameters)
	r.ActionParameters = maps.Clone(r.ActionParameters)
	if r.Correlation != nil {
		c := *r.Correlation
		c.Properties = maps.Clone(c.Properties)
		r.Correlation = &c
	}
	return r
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

// SQLCompiler compiles the SQL filter and action language. The broker evaluates SQL
// rules with sqlrule by default; a Config.SQL replaces it (for tests or
// experiments) and then receives the expressions only, so rules with SQLParameters or
// ActionParameters are refused under it.
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

// compileRule checks and compiles a rule. Errors wrap ErrInvalidConfig and, for SQL,
// carry sqlrule's message with the line and column ("sqlrule: 1:5: ...").
func (b *Broker) compileRule(r Rule) (*compiledRule, error) {
	if r.Name == "" {
		return nil, fmt.Errorf("%w: rule has no name", ErrInvalidConfig)
	}
	if r.FilterType == "" {
		r.FilterType = FilterTrue
	}
	r = r.clone()
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
		c := r.Correlation
		f := sqlrule.CorrelationFilter{
			CorrelationID: c.CorrelationID, MessageID: c.MessageID, To: c.To, ReplyTo: c.ReplyTo,
			Subject: c.Label, SessionID: c.SessionID, ReplyToSessionID: c.ReplyToSessionID,
			ContentType: c.ContentType, Properties: c.Properties,
		}
		if err := f.Validate(); err != nil {
			return nil, fmt.Errorf("%w: rule %q: %w", ErrInvalidConfig, r.Name, err)
		}
		cr.filter = f
	case FilterSQL:
		f, err := b.compileSQLFilter(r.SQLExpression, r.SQLParameters)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %q filter %q: %w", ErrInvalidConfig, r.Name, r.SQLExpression, err)
		}
		cr.filter = f
	default:
		return nil, fmt.Errorf("%w: rule %q: unknown filter type %q", ErrInvalidConfig, r.Name, r.FilterType)
	}
	if strings.TrimSpace(r.ActionSQLExpression) != "" {
		a, err := b.compileSQLAction(r.ActionSQLExpression, r.ActionParameters)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %q action %q: %w", ErrInvalidConfig, r.Name, r.ActionSQLExpression, err)
		}
		cr.action = a
	}
	return cr, nil
}

var errParamsUnsupported = errors.New("the configured SQL compiler takes no parameters")

func (b *Broker) compileSQLFilter(expr string, params map[string]any) (Filter, error) {
	if b.cfg.SQL != nil {
		if len(params) > 0 {
			return nil, errParamsUnsupported
		}
		return b.cfg.SQL.CompileFilter(expr)
	}
	f, err := sqlrule.CompileFilter(expr, &sqlrule.CompileOptions{Parameters: params})
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (b *Broker) compileSQLAction(expr string, params map[string]any) (Action, error) {
	if b.cfg.SQL != nil {
		if len(params) > 0 {
			return nil, errParamsUnsupported
		}
		return b.cfg.SQL.CompileAction(expr)
	}
	a, err := sqlrule.CompileAction(expr, &sqlrule.CompileOptions{Parameters: params})
	if err != nil {
		return nil, err
	}
	return a, nil
}

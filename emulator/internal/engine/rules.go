package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/Azure/go-amqp"

	"github.com/seqbus/seqbus/emulator/amqpwire"
	"github.com/seqbus/seqbus/emulator/broker"
)

// Rule operations of a subscription's $management node: the rule managers
// of the JavaScript, .NET, Java and Python SDKs use them (the Go SDK manages
// rules through the ATOM API only).
const (
	opAddRule        = "com.microsoft:add-rule"
	opRemoveRule     = "com.microsoft:remove-rule"
	opEnumerateRules = "com.microsoft:enumerate-rules"
)

// Descriptor codes of the described lists enumerate-rules answers with. The
// filter codes are one hex digit shorter than the others, as the service
// (and every SDK) has them.
const (
	codeRuleDescription   uint64 = 0x0000013700000004
	codeEmptyRuleAction   uint64 = 0x0000013700000005
	codeSQLRuleAction     uint64 = 0x0000013700000006
	codeSQLFilter         uint64 = 0x000001370000006
	codeTrueFilter        uint64 = 0x000001370000007
	codeFalseFilter       uint64 = 0x000001370000008
	codeCorrelationFilter uint64 = 0x000001370000009
)

// sqlCompatibilityLevel is the compatibility level the service reports for
// SQL filters and actions.
const sqlCompatibilityLevel int32 = 20

// wireBody is a management response body encoded with amqpwire rather than
// go-amqp, which cannot encode described types.
type wireBody struct{ value any }

// subscriptionOf returns the topic and subscription names of e, or an
// ErrNotAllowed error when e is not a subscription.
func subscriptionOf(e *broker.Entity, op string) (topic, sub string, err error) {
	info := e.Info()
	if info.Kind != broker.KindSubscription {
		return "", "", fmt.Errorf("%s on %s %q: rules belong to subscriptions: %w", op, info.Kind, info.Path, broker.ErrNotAllowed)
	}
	return info.Topic, info.Name, nil
}

func (c *conn) runRuleOperation(op string, e *broker.Entity, body map[string]any) (any, int32, error) {
	topic, sub, err := subscriptionOf(e, op)
	if err != nil {
		return nil, 0, err
	}
	b := c.srv.cfg.Broker
	switch op {
	case opAddRule:
		name, ok := body["rule-name"].(string)
		if !ok || name == "" {
			return nil, 0, badRequest("add-rule needs a string rule-name")
		}
		desc, ok := body["rule-description"].(map[string]any)
		if !ok {
			return nil, 0, badRequest("add-rule needs a rule-description map")
		}
		r, err := ruleFromDescription(name, desc)
		if err != nil {
			return nil, 0, err
		}
		if err := b.CreateRule(topic, sub, r); err != nil {
			return nil, 0, err
		}
		return nil, 200, nil

	case opRemoveRule:
		name, ok := body["rule-name"].(string)
		if !ok || name == "" {
			return nil, 0, badRequest("remove-rule needs a string rule-name")
		}
		if err := b.DeleteRule(topic, sub, name); err != nil {
			return nil, 0, err
		}
		return nil, 200, nil

	default: // opEnumerateRules
		rules, err := b.ListRules(topic, sub)
		if err != nil {
			return nil, 0, err
		}
		skip, _ := toInt64(body["skip"])
		top, ok := toInt64(body["top"])
		if !ok || top <= 0 {
			top = int64(len(rules))
		}
		skip = min(max(skip, 0), int64(len(rules)))
		rules = rules[skip:min(skip+top, int64(len(rules)))]
		if len(rules) == 0 {
			return nil, 204, nil
		}
		out := make([]any, len(rules))
		for i, r := range rules {
			out[i] = map[string]any{"rule-description": describeRule(r)}
		}
		return wireBody{value: map[string]any{"rules": out}}, 200, nil
	}
}

// ruleFromDescription reads an add-rule rule-description: sql-filter or
// correlation-filter (neither: the true filter) and an optional
// sql-rule-action. A field the emulator does not read, or one of the wrong
// type, is refused by name: a rule is never widened into one that matches or
// changes something other than what was asked.
func ruleFromDescription(name string, desc map[string]any) (broker.Rule, error) {
	r := broker.Rule{Name: name, FilterType: broker.FilterTrue}
	if err := knownFields(name, "rule-description", desc, "sql-filter", "correlation-filter", "sql-rule-action"); err != nil {
		return r, err
	}
	sqlFilter, hasSQL, err := mapField(name, desc, "sql-filter")
	if err != nil {
		return r, err
	}
	corr, hasCorr, err := mapField(name, desc, "correlation-filter")
	if err != nil {
		return r, err
	}
	switch {
	case hasSQL && hasCorr:
		return r, badRequest("rule %q has both a sql-filter and a correlation-filter", name)
	case hasSQL:
		expr, params, err := sqlExpression(name, "sql-filter", sqlFilter)
		if err != nil {
			return r, err
		}
		r.FilterType, r.SQLExpression, r.SQLParameters = broker.FilterSQL, expr, params
	case hasCorr:
		fields := []string{"correlation-id", "message-id", "to", "reply-to", "label", "session-id", "reply-to-session-id", "content-type"}
		if err := knownFields(name, "correlation-filter", corr, append(fields, "properties")...); err != nil {
			return r, err
		}
		got := make(map[string]string, len(fields))
		for _, f := range fields {
			switch v := corr[f].(type) {
			case nil:
			case string:
				got[f] = v
			default:
				return r, badRequest("rule %q: correlation-filter field %q must be a string, not %T", name, f, v)
			}
		}
		props, _, err := mapField(name, corr, "properties")
		if err != nil {
			return r, err
		}
		r.FilterType = broker.FilterCorrelation
		r.Correlation = &broker.CorrelationFilter{
			CorrelationID: got["correlation-id"], MessageID: got["message-id"], To: got["to"],
			ReplyTo: got["reply-to"], Label: got["label"], SessionID: got["session-id"],
			ReplyToSessionID: got["reply-to-session-id"], ContentType: got["content-type"],
			Properties: props,
		}
	}
	action, hasAction, err := mapField(name, desc, "sql-rule-action")
	if err != nil {
		return r, err
	}
	if hasAction {
		if r.ActionSQLExpression, r.ActionParameters, err = sqlExpression(name, "sql-rule-action", action); err != nil {
			return r, err
		}
	}
	return r, nil
}

// knownFields refuses a map of a rule-description holding a key other than known.
func knownFields(rule, what string, m map[string]any, known ...string) error {
	for k := range m {
		if !slices.Contains(known, k) {
			return badRequest("rule %q: unsupported %s field %q (the emulator reads %s)", rule, what, k, strings.Join(known, ", "))
		}
	}
	return nil
}

// mapField returns the map under key (absent or null: ok false), refusing any other type.
func mapField(rule string, m map[string]any, key string) (map[string]any, bool, error) {
	switch v := m[key].(type) {
	case nil:
		return nil, false, nil
	case map[string]any:
		return v, true, nil
	default:
		return nil, false, badRequest("rule %q: %s must be a map, not %T", rule, key, v)
	}
}

// sqlExpression reads a sql-filter or sql-rule-action: a string expression and
// optional parameters.
func sqlExpression(rule, what string, m map[string]any) (string, map[string]any, error) {
	if err := knownFields(rule, what, m, "expression", "parameters", "compatibility-level"); err != nil {
		return "", nil, err
	}
	expr, ok := m["expression"].(string)
	if !ok {
		return "", nil, badRequest("rule %q: %s needs a string expression", rule, what)
	}
	params, _, err := mapField(rule, m, "parameters")
	if err != nil {
		return "", nil, err
	}
	return expr, params, nil
}

// describeRule encodes a rule as the com.microsoft:rule-description:list of
// an enumerate-rules response: filter, action, name.
func describeRule(r broker.Rule) amqpwire.Described {
	var filter amqpwire.Described
	switch r.FilterType {
	case broker.FilterSQL:
		filter = amqpwire.Described{Descriptor: codeSQLFilter, Value: []any{r.SQLExpression, sqlCompatibilityLevel}}
	case broker.FilterFalse:
		filter = amqpwire.Described{Descriptor: codeFalseFilter, Value: []any{"1=0", sqlCompatibilityLevel}}
	case broker.FilterCorrelation:
		c := r.Correlation
		if c == nil {
			c = &broker.CorrelationFilter{}
		}
		opt := func(s string) any {
			if s == "" {
				return nil
			}
			return s
		}
		var props any
		if len(c.Properties) > 0 {
			props = wireMap(c.Properties)
		}
		filter = amqpwire.Described{Descriptor: codeCorrelationFilter, Value: []any{
			opt(c.CorrelationID), opt(c.MessageID), opt(c.To), opt(c.ReplyTo), opt(c.Label),
			opt(c.SessionID), opt(c.ReplyToSessionID), opt(c.ContentType), props,
		}}
	default:
		filter = amqpwire.Described{Descriptor: codeTrueFilter, Value: []any{"1=1", sqlCompatibilityLevel}}
	}
	action := amqpwire.Described{Descriptor: codeEmptyRuleAction, Value: []any{}}
	if r.ActionSQLExpression != "" {
		action = amqpwire.Described{Descriptor: codeSQLRuleAction, Value: []any{r.ActionSQLExpression, sqlCompatibilityLevel}}
	}
	return amqpwire.Described{Descriptor: codeRuleDescription, Value: []any{filter, action, r.Name}}
}

// wireMap converts application-property values decoded by go-amqp to the
// types amqpwire encodes.
func wireMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch x := v.(type) {
		case amqp.UUID:
			out[k] = amqpwire.UUID(x)
		case amqp.Symbol:
			out[k] = amqpwire.Symbol(x)
		default:
			out[k] = v
		}
	}
	return out
}

// encodeResponse encodes a $cbs or $management response; a wireBody value
// is appended as the amqp-value section by amqpwire.
func encodeResponse(m *amqp.Message) ([]byte, error) {
	wb, ok := m.Value.(wireBody)
	if !ok {
		return m.MarshalBinary()
	}
	m.Value = nil
	head, err := m.MarshalBinary()
	m.Value = wb
	if err != nil {
		return nil, err
	}
	out, err := amqpwire.AppendValue(head, amqpwire.Described{Descriptor: amqpwire.SectionAMQPValue, Value: wb.value})
	if err != nil {
		return nil, fmt.Errorf("encode response body: %w", err)
	}
	return out, nil
}

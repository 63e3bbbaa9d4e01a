package atom

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/seqbus/seqbus/emulator/broker"
)

// param is a SQL filter or action parameter, or a correlation filter property, as the
// ATOM body types it ("string", "int", "double", "boolean", "dateTime").
type param struct {
	key, xsdType, text string
}

// ruleExtras keeps what the broker does not of a rule: its creation time and the SQL
// parameters as the client typed them (the broker keeps Go values, which lose the
// difference between, say, an int and a long).
type ruleExtras struct {
	name      string
	createdAt time.Time
	// sub is the subscription the rule belongs to (see entityExtras.entity).
	sub *broker.Entity

	filterExpr   string
	filterParams []param
	actionExpr   string
	actionParams []param
}

func ruleKey(topic, sub, rule string) string {
	return strings.ToLower(topic + "/subscriptions/" + sub + "/" + rule)
}

func (h *handler) rule(req *request, rt route) (int, any, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sub, err := h.b.GetSubscription(rt.topic, rt.sub)
	if err != nil {
		return 0, nil, err
	}
	switch req.r.Method {
	case http.MethodGet:
		rule, err := h.b.GetRule(rt.topic, rt.sub, rt.rule)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, h.ruleEntry(req.r, sub, rule), nil
	case http.MethodDelete:
		if err := h.b.DeleteRule(rt.topic, rt.sub, rt.rule); err != nil {
			return 0, nil, err
		}
		delete(h.rules, ruleKey(rt.topic, rt.sub, rt.rule))
		return http.StatusOK, nil, nil
	}
	kind, decode, err := parseBody(req.body)
	if err != nil {
		return 0, nil, err
	}
	if kind != "RuleDescription" {
		return 0, nil, badRequest("cannot PUT a %s at a rule's address", kind)
	}
	var d inRuleDescribe
	if err := decode(&d); err != nil {
		return 0, nil, badRequest("invalid RuleDescription: %w", err)
	}
	name := rt.rule
	if name == "" && d.Name != nil {
		name = *d.Name
	}
	if name == "" {
		name = broker.DefaultRuleName
	}
	r, x, err := ruleFromXML(name, d.Filter, d.Action)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusCreated
	if req.update {
		status = http.StatusOK
		err = h.b.UpdateRule(rt.topic, rt.sub, r)
	} else {
		err = h.b.CreateRule(rt.topic, rt.sub, r)
	}
	if err != nil {
		return 0, nil, err
	}
	x.createdAt = h.cfg.Clock.Now()
	if x.sub, err = h.b.Lookup(sub.Path); err != nil {
		return 0, nil, err
	}
	if old, ok := h.rules[ruleKey(rt.topic, rt.sub, name)]; ok && req.update && old.sub == x.sub {
		x.createdAt = old.createdAt
	}
	h.rules[ruleKey(rt.topic, rt.sub, name)] = x
	stored, err := h.b.GetRule(rt.topic, rt.sub, name)
	if err != nil {
		return 0, nil, err
	}
	return status, h.ruleEntry(req.r, sub, stored), nil
}

// ruleFromXML converts a rule's Filter and Action to a broker rule. A rule without a
// Filter matches everything and one without an Action changes nothing, as on the
// service; a Filter or Action the emulator cannot read entirely (no type, an unknown
// type, an element it does not know or one that belongs to another type) is refused
// naming what it could not read, never taken for something that matches more.
func ruleFromXML(name string, f, a *inFilter) (broker.Rule, ruleExtras, error) {
	r := broker.Rule{Name: name, FilterType: broker.FilterTrue}
	x := ruleExtras{name: name}
	if f != nil {
		t, err := checkTyped(name, "Filter", f)
		if err != nil {
			return r, x, err
		}
		if t != "CorrelationFilter" && f.correlationSet() {
			return r, x, badRequest("rule %q: a %s has no correlation properties (CorrelationId, MessageId, To, ReplyTo, Label, SessionId, ReplyToSessionId, ContentType, Properties)", name, t)
		}
		switch t {
		case "TrueFilter":
			r.FilterType = broker.FilterTrue
		case "FalseFilter":
			r.FilterType = broker.FilterFalse
		case "SqlFilter":
			if f.SQLExpression == nil || strings.TrimSpace(*f.SQLExpression) == "" {
				return r, x, badRequest("rule %q: SqlFilter needs a SqlExpression", name)
			}
			params, values, err := readParams(f.Parameters)
			if err != nil {
				return r, x, fmt.Errorf("rule %q filter: %w", name, err)
			}
			r.FilterType, r.SQLExpression, r.SQLParameters = broker.FilterSQL, *f.SQLExpression, values
			x.filterExpr, x.filterParams = *f.SQLExpression, params
		case "CorrelationFilter":
			if f.SQLExpression != nil || f.Parameters != nil {
				return r, x, badRequest("rule %q: a CorrelationFilter has no SqlExpression or Parameters", name)
			}
			props, values, err := readParams(f.Properties)
			if err != nil {
				return r, x, fmt.Errorf("rule %q correlation filter: %w", name, err)
			}
			cf := &broker.CorrelationFilter{
				ContentType: deref(f.ContentType), CorrelationID: deref(f.CorrelationID), Label: deref(f.Label),
				MessageID: deref(f.MessageID), ReplyTo: deref(f.ReplyTo), ReplyToSessionID: deref(f.ReplyToSessionID),
				SessionID: deref(f.SessionID), To: deref(f.To),
			}
			if len(props) > 0 {
				cf.Properties = values
			}
			r.FilterType, r.Correlation = broker.FilterCorrelation, cf
		default:
			return r, x, badRequest("rule %q: unsupported filter type %q", name, t)
		}
	}
	if a != nil {
		t, err := checkTyped(name, "Action", a)
		if err != nil {
			return r, x, err
		}
		if a.correlationSet() {
			return r, x, badRequest("rule %q: an Action has no correlation properties", name)
		}
		switch t {
		case "EmptyRuleAction":
			if a.SQLExpression != nil && strings.TrimSpace(*a.SQLExpression) != "" {
				return r, x, badRequest("rule %q: an EmptyRuleAction has no SqlExpression", name)
			}
		case "SqlRuleAction":
			expr := deref(a.SQLExpression)
			params, values, err := readParams(a.Parameters)
			if err != nil {
				return r, x, fmt.Errorf("rule %q action: %w", name, err)
			}
			r.ActionSQLExpression, r.ActionParameters = expr, values
			x.actionExpr, x.actionParams = expr, params
		default:
			return r, x, badRequest("rule %q: unsupported action type %q", name, t)
		}
	}
	return r, x, nil
}

// checkTyped returns the type of a rule's Filter or Action (what names it), refusing
// one without a single type attribute or with an element the emulator does not read.
func checkTyped(rule, what string, f *inFilter) (string, error) {
	t, ok := f.typeName()
	if !ok {
		return "", badRequest("rule %q: the %s needs exactly one xsi:type attribute (of namespace %s)", rule, what, nsXSI)
	}
	if el := f.unknownElement(); el != "" {
		return "", badRequest("rule %q: unsupported element %q in the %s (%s)", rule, el, what, t)
	}
	return t, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// readParams reads a KeyValueOfstringanyType list, checking each value against its type.
// It returns the entries as written and their values by key (nil for an empty list).
func readParams(l *kvList) ([]param, map[string]any, error) {
	if l == nil || len(l.Items) == 0 {
		return nil, nil, nil
	}
	out := make([]param, 0, len(l.Items))
	values := make(map[string]any, len(l.Items))
	for _, it := range l.Items {
		p := param{key: it.Key, xsdType: it.Value.xsdType(), text: it.Value.Text}
		if p.key == "" {
			return nil, nil, badRequest("parameter without a Key")
		}
		v, err := p.value()
		if err != nil {
			return nil, nil, err
		}
		if _, dup := values[p.key]; dup {
			return nil, nil, badRequest("parameter %q given twice", p.key)
		}
		values[p.key] = v
		out = append(out, p)
	}
	return out, values, nil
}

// value returns the parameter as a Go value of the type the broker's matchers use.
func (p param) value() (any, error) {
	bad := func(err error) (any, error) {
		return nil, badRequest("parameter %q: invalid %s value %q: %w", p.key, p.xsdType, p.text, err)
	}
	switch p.xsdType {
	case "string", "":
		return p.text, nil
	case "boolean":
		v, err := strconv.ParseBool(p.text)
		if err != nil {
			return bad(err)
		}
		return v, nil
	case "int", "long", "short", "byte":
		v, err := strconv.ParseInt(strings.TrimSpace(p.text), 10, 64)
		if err != nil {
			return bad(err)
		}
		return v, nil
	case "double", "float", "decimal":
		v, err := strconv.ParseFloat(strings.TrimSpace(p.text), 64)
		if err != nil {
			return bad(err)
		}
		return v, nil
	case "dateTime":
		v, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(p.text))
		if err != nil {
			return bad(err)
		}
		return v.UTC(), nil
	}
	return nil, badRequest("parameter %q: unsupported type %q", p.key, p.xsdType)
}

// ---- rules out ----

func kvOut(params []param) *kvList {
	if len(params) == 0 {
		return nil
	}
	l := &kvList{}
	for _, p := range params {
		t := p.xsdType
		if t == "" {
			t = "string"
		}
		l.Items = append(l.Items, kvItem{Key: p.key, Value: newKVValue(t, p.text)})
	}
	return l
}

// paramsOut renders a SQL expression's parameters: as the client wrote them when the
// handler's record still describes the broker's rule (written), else from the broker's
// values.
func paramsOut(written bool, params []param, values map[string]any) *kvList {
	if written && sameParams(params, values) {
		return kvOut(params)
	}
	return propertiesOut(values)
}

// sameParams reports whether params hold exactly the values of values.
func sameParams(params []param, values map[string]any) bool {
	if len(params) != len(values) {
		return false
	}
	for _, p := range params {
		v, err := p.value()
		if err != nil {
			return false
		}
		got, ok := values[p.key]
		if !ok {
			return false
		}
		if t, isTime := v.(time.Time); isTime {
			gt, ok := got.(time.Time)
			if !ok || !t.Equal(gt) {
				return false
			}
			continue
		}
		if got != v {
			return false
		}
	}
	return true
}

// propertiesOut renders correlation filter properties with the types the admin client
// reads back (string, boolean, int, double, dateTime).
func propertiesOut(m map[string]any) *kvList {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ps := make([]param, 0, len(keys))
	for _, k := range keys {
		p := param{key: k}
		switch v := m[k].(type) {
		case bool:
			p.xsdType, p.text = "boolean", strconv.FormatBool(v)
		case int, int8, int16, int32, int64, uint8, uint16, uint32, uint64, uint:
			p.xsdType, p.text = "int", fmt.Sprint(v)
		case float32:
			p.xsdType, p.text = "double", strconv.FormatFloat(float64(v), 'f', -1, 32)
		case float64:
			if v == float64(int64(v)) { // JSON numbers from Config.json
				p.xsdType, p.text = "int", strconv.FormatInt(int64(v), 10)
			} else {
				p.xsdType, p.text = "double", strconv.FormatFloat(v, 'f', -1, 64)
			}
		case time.Time:
			p.xsdType, p.text = "dateTime", v.UTC().Format(time.RFC3339Nano)
		default:
			p.xsdType, p.text = "string", fmt.Sprint(v)
		}
		ps = append(ps, p)
	}
	return kvOut(ps)
}

// ruleEntry renders a rule; it always carries a typed Filter and a typed Action (an
// EmptyRuleAction when there is none), because the admin client dereferences both.
// h.mu must be held.
func (h *handler) ruleEntry(r *http.Request, sub broker.EntityInfo, rule broker.Rule) outEntry {
	x, ok := h.rules[ruleKey(sub.Topic, sub.Name, rule.Name)]
	if ok {
		if e, err := h.b.Lookup(sub.Path); err != nil || e != x.sub {
			x = ruleExtras{}
		}
	}
	out := outRule{XMLNSI: nsXSI, Name: rule.Name}
	if !x.createdAt.IsZero() {
		out.CreatedAt = formatTime(x.createdAt)
	}
	expr := func(s string) *string { return &s }
	switch rule.FilterType {
	case broker.FilterFalse:
		out.Filter = outFilter{Type: "FalseFilter", SQLExpression: expr("1=0"), CompatibilityLevel: 20}
	case broker.FilterSQL:
		out.Filter = outFilter{
			Type: "SqlFilter", SQLExpression: expr(rule.SQLExpression), CompatibilityLevel: 20,
			Parameters: paramsOut(x.filterExpr == rule.SQLExpression, x.filterParams, rule.SQLParameters),
		}
	case broker.FilterCorrelation:
		c := rule.Correlation
		if c == nil {
			c = &broker.CorrelationFilter{}
		}
		out.Filter = outFilter{
			Type:          "CorrelationFilter",
			CorrelationID: optString(c.CorrelationID), MessageID: optString(c.MessageID), To: optString(c.To),
			ReplyTo: optString(c.ReplyTo), Label: optString(c.Label), SessionID: optString(c.SessionID),
			ReplyToSessionID: optString(c.ReplyToSessionID), ContentType: optString(c.ContentType),
			Properties: propertiesOut(c.Properties),
		}
	default:
		out.Filter = outFilter{Type: "TrueFilter", SQLExpression: expr("1=1"), CompatibilityLevel: 20}
	}
	if rule.ActionSQLExpression == "" {
		out.Action = outAction{Type: "EmptyRuleAction"}
	} else {
		out.Action = outAction{
			Type: "SqlRuleAction", SQLExpression: expr(rule.ActionSQLExpression), CompatibilityLevel: 20,
			Parameters: paramsOut(x.actionExpr == rule.ActionSQLExpression, x.actionParams, rule.ActionParameters),
		}
	}
	path := sub.Path + "/Rules/" + rule.Name
	return h.entry(r, path, rule.Name, x.createdAt, x.createdAt, out)
}

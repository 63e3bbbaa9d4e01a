package atom

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/seqbus/seqbus/emulator/broker"
)

// param is a SQL filter or action parameter, or a correlation filter property, as the
// ATOM body types it ("string", "int", "double", "boolean", "dateTime").
type param struct {
	key, xsdType, text string
}

// ruleExtras keeps what the broker does not of a rule: the SQL expressions as the client
// wrote them with their parameters (the broker stores them with the parameters inlined).
type ruleExtras struct {
	name      string
	createdAt time.Time
	// sub is the subscription the rule belongs to (see entityExtras.entity).
	sub *broker.Entity

	filterExpr, filterInlined string
	filterParams              []param
	actionExpr, actionInlined string
	actionParams              []param
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
	kind, inner, err := parseBody(req.body)
	if err != nil {
		return 0, nil, err
	}
	if kind != "RuleDescription" {
		return 0, nil, badRequest("cannot PUT a %s at a rule's address", kind)
	}
	var d inRuleDescribe
	if err := xml.Unmarshal(inner, &d); err != nil {
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

// ruleFromXML converts a rule's Filter and Action to a broker rule.
func ruleFromXML(name string, f, a *inFilter) (broker.Rule, ruleExtras, error) {
	r := broker.Rule{Name: name, FilterType: broker.FilterTrue}
	x := ruleExtras{name: name}
	if f != nil {
		switch t := f.typeName(); t {
		case "TrueFilter", "":
			r.FilterType = broker.FilterTrue
		case "FalseFilter":
			r.FilterType = broker.FilterFalse
		case "SqlFilter":
			if f.SQLExpression == nil || strings.TrimSpace(*f.SQLExpression) == "" {
				return r, x, badRequest("rule %q: SqlFilter needs a SqlExpression", name)
			}
			params, err := readParams(f.Parameters)
			if err != nil {
				return r, x, fmt.Errorf("rule %q filter: %w", name, err)
			}
			inlined, err := inlineParams(*f.SQLExpression, params)
			if err != nil {
				return r, x, fmt.Errorf("rule %q filter: %w", name, err)
			}
			r.FilterType, r.SQLExpression = broker.FilterSQL, inlined
			x.filterExpr, x.filterInlined, x.filterParams = *f.SQLExpression, inlined, params
		case "CorrelationFilter":
			props, err := readParams(f.Properties)
			if err != nil {
				return r, x, fmt.Errorf("rule %q correlation filter: %w", name, err)
			}
			cf := &broker.CorrelationFilter{
				ContentType: deref(f.ContentType), CorrelationID: deref(f.CorrelationID), Label: deref(f.Label),
				MessageID: deref(f.MessageID), ReplyTo: deref(f.ReplyTo), ReplyToSessionID: deref(f.ReplyToSessionID),
				SessionID: deref(f.SessionID), To: deref(f.To),
			}
			if len(props) > 0 {
				cf.Properties = make(map[string]any, len(props))
				for _, p := range props {
					v, err := p.value()
					if err != nil {
						return r, x, fmt.Errorf("rule %q correlation filter: %w", name, err)
					}
					cf.Properties[p.key] = v
				}
			}
			r.FilterType, r.Correlation = broker.FilterCorrelation, cf
		default:
			return r, x, badRequest("rule %q: unsupported filter type %q", name, t)
		}
	}
	if a != nil {
		switch t := a.typeName(); t {
		case "EmptyRuleAction", "":
		case "SqlRuleAction":
			expr := deref(a.SQLExpression)
			params, err := readParams(a.Parameters)
			if err != nil {
				return r, x, fmt.Errorf("rule %q action: %w", name, err)
			}
			inlined, err := inlineParams(expr, params)
			if err != nil {
				return r, x, fmt.Errorf("rule %q action: %w", name, err)
			}
			r.ActionSQLExpression = inlined
			x.actionExpr, x.actionInlined, x.actionParams = expr, inlined, params
		default:
			return r, x, badRequest("rule %q: unsupported action type %q", name, t)
		}
	}
	return r, x, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// readParams reads a KeyValueOfstringanyType list, checking each value against its type.
func readParams(l *kvList) ([]param, error) {
	if l == nil {
		return nil, nil
	}
	out := make([]param, 0, len(l.Items))
	for _, it := range l.Items {
		p := param{key: it.Key, xsdType: it.Value.xsdType(), text: it.Value.Text}
		if p.key == "" {
			return nil, badRequest("parameter without a Key")
		}
		if _, err := p.value(); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
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

// literal renders the parameter as a SQL constant.
func (p param) literal() (string, error) {
	v, err := p.value()
	if err != nil {
		return "", err
	}
	switch v := v.(type) {
	case bool:
		if v {
			return "TRUE", nil
		}
		return "FALSE", nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		s := strconv.FormatFloat(v, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s, nil
	case time.Time:
		return quoteSQL(v.Format(time.RFC3339Nano)), nil
	}
	return quoteSQL(fmt.Sprint(v)), nil
}

func quoteSQL(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// inlineParams replaces each @name in a SQL expression (outside string literals and
// delimited names) by its parameter's value. Parameter keys may be given with or
// without the @, and match case-insensitively. An unknown parameter is an error.
func inlineParams(expr string, params []param) (string, error) {
	if !strings.Contains(expr, "@") {
		return expr, nil
	}
	lits := make(map[string]string, len(params))
	for _, p := range params {
		lit, err := p.literal()
		if err != nil {
			return "", err
		}
		lits[strings.ToLower(strings.TrimPrefix(p.key, "@"))] = lit
	}
	var b strings.Builder
	for i := 0; i < len(expr); {
		switch c := expr[i]; c {
		case '\'', '"', '[':
			end := byte(c)
			if c == '[' {
				end = ']'
			}
			j := i + 1
			for j < len(expr) {
				if expr[j] == end {
					if c == '\'' && j+1 < len(expr) && expr[j+1] == '\'' { // '' escape
						j += 2
						continue
					}
					break
				}
				j++
			}
			j = min(j+1, len(expr))
			b.WriteString(expr[i:j])
			i = j
		case '@':
			j := i + 1
			for j < len(expr) {
				r, size := utf8.DecodeRuneInString(expr[j:])
				if r != '_' && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
					break
				}
				j += size
			}
			name := expr[i+1 : j]
			lit, ok := lits[strings.ToLower(name)]
			if name == "" || !ok {
				return "", badRequest("SQL expression uses parameter @%s, which is not defined", name)
			}
			b.WriteString(lit)
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), nil
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
		f := outFilter{Type: "SqlFilter", SQLExpression: expr(rule.SQLExpression), CompatibilityLevel: 20}
		if x.filterExpr != "" && x.filterInlined == rule.SQLExpression {
			f.SQLExpression, f.Parameters = expr(x.filterExpr), kvOut(x.filterParams)
		}
		out.Filter = f
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
		a := outAction{Type: "SqlRuleAction", SQLExpression: expr(rule.ActionSQLExpression), CompatibilityLevel: 20}
		if x.actionExpr != "" && x.actionInlined == rule.ActionSQLExpression {
			a.SQLExpression, a.Parameters = expr(x.actionExpr), kvOut(x.actionParams)
		}
		out.Action = a
	}
	path := sub.Path + "/Rules/" + rule.Name
	return h.entry(r, path, rule.Name, x.createdAt, x.createdAt, out)
}

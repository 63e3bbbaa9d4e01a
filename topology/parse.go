package topology

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

// Parse reads a topology file. file names the file in errors. The result has not been
// validated: call Validate (or Load, which does both).
//
// Errors are an Errors listing every problem with its line and field.
func Parse(file string, data []byte) (*Spec, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		d := Diagnostic{File: file, Msg: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
		if m := yamlLineRE.FindStringSubmatch(d.Msg); m != nil {
			d.Line, _ = strconv.Atoi(m[1])
			d.Msg = "not valid YAML: " + strings.TrimPrefix(d.Msg, m[0])
		}
		return nil, Errors{d}
	}
	r := &reader{file: file}
	spec := &Spec{Src: Source{File: file, Line: 1, Column: 1}}
	if root.Kind == 0 || len(root.Content) == 0 {
		r.d.errorf(spec.Src, "", "the file is empty")
		err, _ := r.d.split()
		return nil, err
	}
	doc := root.Content[0]
	m, src := r.mapping(doc, "", "queues", "topics", "sequenced")
	if m != nil {
		spec.Src = src
		r.list(m["queues"], "queues", func(n *yaml.Node, path string) {
			if q := r.queue(n, path); q != nil {
				spec.Queues = append(spec.Queues, q)
			}
		})
		r.list(m["topics"], "topics", func(n *yaml.Node, path string) {
			if t := r.topic(n, path); t != nil {
				spec.Topics = append(spec.Topics, t)
			}
		})
		r.list(m["sequenced"], "sequenced", func(n *yaml.Node, path string) {
			if s := r.sequenced(n, path); s != nil {
				spec.Sequenced = append(spec.Sequenced, s)
			}
		})
	}
	if err, _ := r.d.split(); err != nil {
		return nil, err
	}
	return spec, nil
}

var yamlLineRE = regexp.MustCompile(`^not valid YAML: line (\d+): `)

// Property keys of the file.
const (
	keyLockDuration              = "lockDuration"
	keyMaxDeliveryCount          = "maxDeliveryCount"
	keyDefaultMessageTimeToLive  = "defaultMessageTimeToLive"
	keyDeadLetteringOnExpiration = "deadLetteringOnMessageExpiration"
	keyRequiresSession           = "requiresSession"
	keyRequiresDuplicateDetect   = "requiresDuplicateDetection"
	keyDuplicateDetectionWindow  = "duplicateDetectionHistoryTimeWindow"
	keyMaxSizeInMegabytes        = "maxSizeInMegabytes"
	keyEnableBatchedOperations   = "enableBatchedOperations"
	keyAutoDeleteOnIdle          = "autoDeleteOnIdle"
	keyForwardTo                 = "forwardTo"
	keyForwardDeadLetteredTo     = "forwardDeadLetteredMessagesTo"
	keyUserMetadata              = "userMetadata"
)

var propertyKeys = []string{
	keyLockDuration, keyMaxDeliveryCount, keyDefaultMessageTimeToLive, keyDeadLetteringOnExpiration,
	keyRequiresSession, keyRequiresDuplicateDetect, keyDuplicateDetectionWindow, keyMaxSizeInMegabytes,
	keyEnableBatchedOperations, keyAutoDeleteOnIdle, keyForwardTo, keyForwardDeadLetteredTo, keyUserMetadata,
}

type reader struct {
	file string
	d    diags
}

func (r *reader) src(n *yaml.Node, path string) Source {
	return Source{File: r.file, Line: n.Line, Column: n.Column, Path: path}
}

// mapping checks that n is a mapping with only the allowed keys and returns its values
// by key, and its Source (with the key positions). It returns nil after reporting an
// error.
func (r *reader) mapping(n *yaml.Node, path string, allowed ...string) (map[string]*yaml.Node, Source) {
	n = deref(n)
	src := r.src(n, path)
	if n.Kind != yaml.MappingNode {
		r.d.errorf(src, "", "want a mapping, found %s", kindName(n))
		return nil, src
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	src.Fields = make(map[string][2]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		ksrc := r.src(k, path)
		if k.Kind != yaml.ScalarNode {
			r.d.errorf(ksrc, "", "want a field name, found %s", kindName(k))
			continue
		}
		if !slices.Contains(allowed, k.Value) {
			hint := ""
			if i := slices.IndexFunc(allowed, func(a string) bool { return strings.EqualFold(a, k.Value) }); i >= 0 {
				hint = fmt.Sprintf(" (did you mean %q?)", allowed[i])
			}
			r.d.errorf(ksrc, k.Value, "unknown field%s", hint)
			continue
		}
		if _, dup := out[k.Value]; dup {
			r.d.errorf(ksrc, k.Value, "field given twice")
			continue
		}
		out[k.Value] = v
		src.Fields[k.Value] = [2]int{k.Line, k.Column}
	}
	return out, src
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	if n.Tag == "!!null" {
		return "nothing"
	}
	return fmt.Sprintf("%q", n.Value)
}

// list calls each for every item of a sequence node (nil: nothing).
func (r *reader) list(n *yaml.Node, path string, each func(*yaml.Node, string)) {
	n = deref(n)
	if n == nil || n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.SequenceNode {
		r.d.errorf(r.src(n, path), "", "want a list, found %s", kindName(n))
		return
	}
	for i, item := range n.Content {
		each(deref(item), fmt.Sprintf("%s[%d]", path, i))
	}
}

// deref follows aliases (*anchor) to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func (r *reader) scalar(m map[string]*yaml.Node, src Source, key string) (string, bool) {
	n, ok := m[key]
	if !ok {
		return "", false
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		r.d.errorf(src, key, "want a value, found %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

func (r *reader) str(m map[string]*yaml.Node, src Source, key string) string {
	s, _ := r.scalar(m, src, key)
	return s
}

func (r *reader) strp(m map[string]*yaml.Node, src Source, key string) *string {
	s, ok := r.scalar(m, src, key)
	if !ok {
		return nil
	}
	return &s
}

func (r *reader) boolp(m map[string]*yaml.Node, src Source, key string) *bool {
	s, ok := r.scalar(m, src, key)
	if !ok {
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		r.d.errorf(src, key, "want true or false, found %q", s)
		return nil
	}
	return &b
}

func (r *reader) int32p(m map[string]*yaml.Node, src Source, key string) *int32 {
	s, ok := r.scalar(m, src, key)
	if !ok {
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		r.d.errorf(src, key, "want an integer, found %q", s)
		return nil
	}
	i := int32(v)
	return &i
}

func (r *reader) intv(m map[string]*yaml.Node, src Source, key string) int {
	p := r.int32p(m, src, key)
	if p == nil {
		return 0
	}
	return int(*p)
}

func (r *reader) durp(m map[string]*yaml.Node, src Source, key string) *time.Duration {
	s, ok := r.scalar(m, src, key)
	if !ok {
		return nil
	}
	d, err := ParseDuration(s)
	if err != nil {
		r.d.errorf(src, key, "%v", err)
		return nil
	}
	return &d
}

func (r *reader) strings(m map[string]*yaml.Node, src Source, key string) ([]string, []Source) {
	n, ok := m[key]
	if !ok {
		return nil, nil
	}
	var out []string
	var srcs []Source
	_, _, path := src.Field(key)
	r.list(n, path, func(item *yaml.Node, p string) {
		if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
			r.d.errorf(r.src(item, p), "", "want a name, found %s", kindName(item))
			return
		}
		out = append(out, item.Value)
		srcs = append(srcs, r.src(item, p))
	})
	return out, srcs
}

func (r *reader) props(m map[string]*yaml.Node, src Source) Properties {
	return Properties{
		LockDuration:                        r.durp(m, src, keyLockDuration),
		MaxDeliveryCount:                    r.int32p(m, src, keyMaxDeliveryCount),
		DefaultMessageTimeToLive:            r.durp(m, src, keyDefaultMessageTimeToLive),
		DeadLetteringOnMessageExpiration:    r.boolp(m, src, keyDeadLetteringOnExpiration),
		RequiresSession:                     r.boolp(m, src, keyRequiresSession),
		RequiresDuplicateDetection:          r.boolp(m, src, keyRequiresDuplicateDetect),
		DuplicateDetectionHistoryTimeWindow: r.durp(m, src, keyDuplicateDetectionWindow),
		MaxSizeInMegabytes:                  r.int32p(m, src, keyMaxSizeInMegabytes),
		EnableBatchedOperations:             r.boolp(m, src, keyEnableBatchedOperations),
		AutoDeleteOnIdle:                    r.durp(m, src, keyAutoDeleteOnIdle),
		ForwardTo:                           r.strp(m, src, keyForwardTo),
		ForwardDeadLetteredMessagesTo:       r.strp(m, src, keyForwardDeadLetteredTo),
		UserMetadata:                        r.strp(m, src, keyUserMetadata),
	}
}

func with(keys []string, more ...string) []string {
	return append(slices.Clone(keys), more...)
}

func (r *reader) queue(n *yaml.Node, path string) *Queue {
	m, src := r.mapping(n, path, with(propertyKeys, "name")...)
	if m == nil {
		return nil
	}
	return &Queue{Name: r.str(m, src, "name"), Props: r.props(m, src), Src: src}
}

func (r *reader) topic(n *yaml.Node, path string) *Topic {
	m, src := r.mapping(n, path, with(propertyKeys, "name", "subscriptions")...)
	if m == nil {
		return nil
	}
	t := &Topic{Name: r.str(m, src, "name"), Props: r.props(m, src), Src: src}
	_, _, p := src.Field("subscriptions")
	r.list(m["subscriptions"], p, func(n *yaml.Node, path string) {
		if s := r.subscription(n, path); s != nil {
			t.Subscriptions = append(t.Subscriptions, s)
		}
	})
	return t
}

func (r *reader) subscription(n *yaml.Node, path string) *Subscription {
	m, src := r.mapping(n, path, with(propertyKeys, "name", "rules")...)
	if m == nil {
		return nil
	}
	s := &Subscription{Name: r.str(m, src, "name"), Props: r.props(m, src), Src: src}
	if rn, ok := m["rules"]; ok {
		s.Rules = []*Rule{}
		_, _, p := src.Field("rules")
		r.list(rn, p, func(n *yaml.Node, path string) {
			if rule := r.rule(n, path); rule != nil {
				s.Rules = append(s.Rules, rule)
			}
		})
	}
	return s
}

func (r *reader) rule(n *yaml.Node, path string) *Rule {
	m, src := r.mapping(n, path, "name", "sql", "correlation", "action")
	if m == nil {
		return nil
	}
	rule := &Rule{Name: r.str(m, src, "name"), Action: r.str(m, src, "action"), Src: src}
	rule.Filter.SQL = r.str(m, src, "sql")
	if cn, ok := m["correlation"]; ok {
		_, _, p := src.Field("correlation")
		cm, csrc := r.mapping(cn, p, "correlationId", "messageId", "to", "replyTo", "subject",
			"sessionId", "replyToSessionId", "contentType", "properties")
		if cm != nil {
			c := &Correlation{
				CorrelationID:    r.strp(cm, csrc, "correlationId"),
				MessageID:        r.strp(cm, csrc, "messageId"),
				To:               r.strp(cm, csrc, "to"),
				ReplyTo:          r.strp(cm, csrc, "replyTo"),
				Subject:          r.strp(cm, csrc, "subject"),
				SessionID:        r.strp(cm, csrc, "sessionId"),
				ReplyToSessionID: r.strp(cm, csrc, "replyToSessionId"),
				ContentType:      r.strp(cm, csrc, "contentType"),
			}
			if pn, ok := cm["properties"]; ok {
				c.Properties = r.appProps(pn, csrc, "properties")
			}
			rule.Filter.Correlation = c
		}
	}
	if rule.Filter.SQL != "" && rule.Filter.Correlation != nil {
		r.d.errorf(src, "correlation", "a rule has either a sql or a correlation filter, not both")
	}
	return rule
}

// appProps reads a mapping of application property values (string, integer, float, bool).
func (r *reader) appProps(n *yaml.Node, parent Source, key string) map[string]any {
	n = deref(n)
	_, _, path := parent.Field(key)
	src := r.src(n, path)
	if n.Kind != yaml.MappingNode {
		r.d.errorf(src, "", "want a mapping, found %s", kindName(n))
		return nil
	}
	out := make(map[string]any, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		vsrc := r.src(v, path+"."+k.Value)
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			r.d.errorf(vsrc, "", "want a string, number or boolean, found %s", kindName(v))
			continue
		}
		switch v.Tag {
		case "!!int":
			x, err := strconv.ParseInt(v.Value, 0, 64)
			if err != nil {
				r.d.errorf(vsrc, "", "integer out of range: %s", v.Value)
				continue
			}
			out[k.Value] = x
		case "!!float":
			x, err := strconv.ParseFloat(v.Value, 64)
			if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
				r.d.errorf(vsrc, "", "not a finite number: %s", v.Value)
				continue
			}
			out[k.Value] = x
		case "!!bool":
			b, _ := strconv.ParseBool(v.Value)
			out[k.Value] = b
		default:
			out[k.Value] = v.Value
		}
	}
	return out
}

// sequencedPropertyKeys are the worker subscription's properties a sequenced block sets.
var sequencedPropertyKeys = []string{
	keyLockDuration, keyMaxDeliveryCount, keyDefaultMessageTimeToLive, keyDeadLetteringOnExpiration,
	keyRequiresSession, keyEnableBatchedOperations, keyAutoDeleteOnIdle, keyForwardDeadLetteredTo, keyUserMetadata,
}

func (r *reader) sequenced(n *yaml.Node, path string) *Sequenced {
	m, src := r.mapping(n, path, with(sequencedPropertyKeys,
		"name", "sources", "forwardingSubscription", "topic", "subscription", "filter", "sessionId")...)
	if m == nil {
		return nil
	}
	s := &Sequenced{
		Name:                   r.str(m, src, "name"),
		ForwardingSubscription: r.str(m, src, "forwardingSubscription"),
		Topic:                  r.str(m, src, "topic"),
		Subscription:           r.str(m, src, "subscription"),
		Filter:                 r.str(m, src, "filter"),
		Props:                  r.props(m, src),
		Src:                    src,
	}
	s.Sources, _ = r.strings(m, src, "sources")
	if kn, ok := m["sessionId"]; ok {
		_, _, p := src.Field("sessionId")
		s.SessionID = r.sessionKey(kn, p)
	}
	return s
}

func (r *reader) sessionKey(n *yaml.Node, path string) *SessionKey {
	m, src := r.mapping(n, path, "strategy", "properties", "separator", "suffix", "alternatives")
	if m == nil {
		return nil
	}
	k := &SessionKey{
		Strategy:  Strategy(r.str(m, src, "strategy")),
		Separator: r.str(m, src, "separator"),
		Suffix:    r.str(m, src, "suffix"),
		Src:       src,
	}
	_, _, p := src.Field("properties")
	r.list(m["properties"], p, func(n *yaml.Node, path string) {
		if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
			k.Properties = append(k.Properties, &KeyProperty{Name: n.Value, Src: r.src(n, path)})
			return
		}
		pm, psrc := r.mapping(n, path, "name", "maxLength")
		if pm == nil {
			return
		}
		k.Properties = append(k.Properties, &KeyProperty{
			Name: r.str(pm, psrc, "name"), MaxLength: r.intv(pm, psrc, "maxLength"), Src: psrc,
		})
	})
	_, _, p = src.Field("alternatives")
	r.list(m["alternatives"], p, func(n *yaml.Node, path string) {
		if alt := r.sessionKey(n, path); alt != nil {
			k.Alternatives = append(k.Alternatives, alt)
		}
	})
	return k
}

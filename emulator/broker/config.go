package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seqbus/seqbus/contract"
)

// UserConfig is the "UserConfig" object of a Microsoft Service Bus emulator Config.json:
//
//	{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
//	    "Queues": [{"Name": "q", "Properties": {"LockDuration": "PT1M", ...}}],
//	    "Topics": [{"Name": "t", "Properties": {...}, "Subscriptions": [{"Name": "s",
//	        "Properties": {...}, "Rules": [{"Name": "r", "Properties": {"FilterType": "Sql",
//	            "SqlFilter": {"SqlExpression": "..."}, "Action": {"SqlExpression": "..."}}}]}]}]}],
//	  "Logging": {"Type": "File"}}}
//
// Unlike Microsoft's emulator, any namespace name is accepted and there are no caps on
// counts or durations. Properties a file leaves out take the Config.json schema's
// defaults (LockDuration PT1M, MaxDeliveryCount 3, DefaultMessageTimeToLive PT1H,
// DuplicateDetectionHistoryTimeWindow PT20S), as in Microsoft's emulator. As extensions,
// a property "Status" (Active, Disabled, SendDisabled, ReceiveDisabled), a queue's or
// topic's "EnablePartitioning" and UserConfig's "SessionIdRequired" are accepted.
type UserConfig struct {
	Namespaces []NamespaceConfig
	Logging    LoggingConfig
	// SessionIDRule is the file's "SessionIdRequired" ("Partitioned", the default, or
	// "Always"), an extension of this emulator: which session entities refuse
	// $management operations on a session's messages without session-id. A file can
	// make the broker stricter, never looser.
	SessionIDRule SessionIDRule
}

// NamespaceConfig is one namespace of a Config.json.
type NamespaceConfig struct {
	Name   string
	Queues []QueueConfig
	Topics []TopicConfig
}

// QueueConfig is one queue of a Config.json.
type QueueConfig struct {
	Name       string
	Properties EntityProperties
}

// TopicConfig is one topic of a Config.json.
type TopicConfig struct {
	Name          string
	Properties    EntityProperties
	Subscriptions []SubscriptionConfig
}

// SubscriptionConfig is one subscription of a Config.json. With no Rules the
// subscription gets the $Default rule.
type SubscriptionConfig struct {
	Name       string
	Properties EntityProperties
	Rules      []Rule
}

// LoggingConfig is the Logging object of a Config.json ("File", "Console", ...). It is
// parsed and kept; the broker itself does not act on it.
type LoggingConfig struct {
	Type string
}

// Config.json schema defaults for properties a file leaves out.
const (
	configDefaultLockDuration    = time.Minute
	configDefaultMaxDelivery     = 3
	configDefaultTTL             = time.Hour
	configDefaultDuplicateWindow = 20 * time.Second
)

// LoadConfigFile reads a Config.json file and creates the entities it declares.
func (b *Broker) LoadConfigFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("load emulator config: %w", err)
	}
	uc, err := ParseUserConfig(data)
	if err != nil {
		return fmt.Errorf("load emulator config %s: %w", path, err)
	}
	if err := b.ApplyUserConfig(uc); err != nil {
		return fmt.Errorf("load emulator config %s: %w", path, err)
	}
	return nil
}

// ApplyUserConfig creates the queues, topics, subscriptions and rules of every namespace
// in uc. It checks first that none exists already (ErrEntityExists, naming the JSON
// path), that every forwarding target is an entity of uc or of the broker, and that the
// rules compile (ErrInvalidConfig, with sqlrule's line and column), so a refused config
// creates nothing. Entities may forward to entities declared after them: forwarding is
// switched on once everything exists.
func (b *Broker) ApplyUserConfig(uc *UserConfig) error {
	if uc == nil {
		return nil
	}
	if err := uc.SessionIDRule.validate(); err != nil {
		return fmt.Errorf("UserConfig.SessionIdRequired: %w", err)
	}
	b.mu.Lock()
	declared := map[string]bool{}
	for _, ns := range uc.Namespaces {
		for _, q := range ns.Queues {
			declared[key(q.Name)] = true
		}
		for _, t := range ns.Topics {
			declared[key(t.Name)] = true
		}
	}
	checkTarget := func(path, self, target string) error {
		n := key(normalizeForwardTarget(target))
		switch {
		case n == "":
			return nil
		case n == key(self):
			return fmt.Errorf("%s: %w: an entity cannot forward to itself", path, ErrInvalidConfig)
		case declared[n] || b.queues[n] != nil || b.topics[n] != nil:
			return nil
		}
		return fmt.Errorf("%s: %w: forwarding target %q is not a queue or topic", path, ErrInvalidConfig, target)
	}
	for ni, ns := range uc.Namespaces {
		for qi, q := range ns.Queues {
			path := fmt.Sprintf("UserConfig.Namespaces[%d].Queues[%d].Properties", ni, qi)
			for _, err := range []error{checkTarget(path+".ForwardTo", q.Name, q.Properties.ForwardTo),
				checkTarget(path+".ForwardDeadLetteredMessagesTo", q.Name, q.Properties.ForwardDeadLetteredMessagesTo)} {
				if err != nil {
					b.mu.Unlock()
					return err
				}
			}
		}
		for ti, t := range ns.Topics {
			for si, s := range t.Subscriptions {
				path := fmt.Sprintf("UserConfig.Namespaces[%d].Topics[%d].Subscriptions[%d].Properties", ni, ti, si)
				for _, err := range []error{checkTarget(path+".ForwardTo", "", s.Properties.ForwardTo),
					checkTarget(path+".ForwardDeadLetteredMessagesTo", "", s.Properties.ForwardDeadLetteredMessagesTo)} {
					if err != nil {
						b.mu.Unlock()
						return err
					}
				}
			}
		}
	}
	for ni, ns := range uc.Namespaces {
		for qi, q := range ns.Queues {
			if b.queues[key(q.Name)] != nil || b.topics[key(q.Name)] != nil {
				b.mu.Unlock()
				return fmt.Errorf("UserConfig.Namespaces[%d].Queues[%d].Name: %q: %w", ni, qi, q.Name, ErrEntityExists)
			}
		}
		for ti, t := range ns.Topics {
			if b.queues[key(t.Name)] != nil || b.topics[key(t.Name)] != nil {
				b.mu.Unlock()
				return fmt.Errorf("UserConfig.Namespaces[%d].Topics[%d].Name: %q: %w", ni, ti, t.Name, ErrEntityExists)
			}
		}
	}
	b.mu.Unlock()
	for ni, ns := range uc.Namespaces {
		for ti, t := range ns.Topics {
			for si, s := range t.Subscriptions {
				for ri, r := range s.Rules {
					if _, err := b.compileRule(r); err != nil {
						return fmt.Errorf("UserConfig.Namespaces[%d].Topics[%d].Subscriptions[%d].Rules[%d]: %w", ni, ti, si, ri, err)
					}
				}
			}
		}
	}
	noForward := func(p EntityProperties) EntityProperties {
		p.ForwardTo, p.ForwardDeadLetteredMessagesTo = "", ""
		return p
	}
	forwards := func(p EntityProperties) bool { return p.ForwardTo != "" || p.ForwardDeadLetteredMessagesTo != "" }
	for ni, ns := range uc.Namespaces {
		for qi, q := range ns.Queues {
			if err := b.CreateQueue(q.Name, noForward(q.Properties)); err != nil {
				return fmt.Errorf("UserConfig.Namespaces[%d].Queues[%d]: %w", ni, qi, err)
			}
		}
		for ti, t := range ns.Topics {
			if err := b.CreateTopic(t.Name, t.Properties); err != nil {
				return fmt.Errorf("UserConfig.Namespaces[%d].Topics[%d]: %w", ni, ti, err)
			}
			for si, s := range t.Subscriptions {
				rules := s.Rules
				if len(rules) == 0 {
					rules = nil // the $Default rule
				}
				if err := b.CreateSubscriptionWithRules(t.Name, s.Name, noForward(s.Properties), rules); err != nil {
					return fmt.Errorf("UserConfig.Namespaces[%d].Topics[%d].Subscriptions[%d]: %w", ni, ti, si, err)
				}
			}
		}
	}
	for ni, ns := range uc.Namespaces {
		for qi, q := range ns.Queues {
			if forwards(q.Properties) {
				if err := b.UpdateQueue(q.Name, q.Properties); err != nil {
					return fmt.Errorf("UserConfig.Namespaces[%d].Queues[%d]: %w", ni, qi, err)
				}
			}
		}
		for ti, t := range ns.Topics {
			for si, s := range t.Subscriptions {
				if forwards(s.Properties) {
					if err := b.UpdateSubscription(t.Name, s.Name, s.Properties); err != nil {
						return fmt.Errorf("UserConfig.Namespaces[%d].Topics[%d].Subscriptions[%d]: %w", ni, ti, si, err)
					}
				}
			}
		}
	}
	b.mu.Lock()
	b.tightenSessionIDRuleLocked(uc.SessionIDRule)
	b.mu.Unlock()
	return nil
}

// ParseUserConfig parses and validates a Config.json document. Errors wrap
// ErrInvalidConfig and name the JSON path, e.g.
// `UserConfig.Namespaces[0].Queues[2].Properties.LockDuration: invalid ISO 8601 duration "1m"`.
func ParseUserConfig(data []byte) (*UserConfig, error) {
	p := &configParser{}
	uc := p.parse(data)
	if p.err != nil {
		return nil, p.err
	}
	return uc, nil
}

// namePattern is the Config.json schema's entity name pattern.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9]$|^[A-Za-z0-9][\w\-./]*[A-Za-z0-9]$`)

// configParser walks the JSON by hand so that every error names its path. The first
// error wins; later calls become no-ops.
type configParser struct {
	err error
}

func (p *configParser) fail(path, format string, args ...any) {
	if p.err == nil {
		p.err = &ConfigError{Path: path, Message: fmt.Sprintf(format, args...)}
	}
}

// ConfigError is a refused Config.json. errors.Is(err, ErrInvalidConfig) holds for it.
type ConfigError struct {
	// Path is the JSON path of the offending value, e.g.
	// "UserConfig.Namespaces[0].Queues[2].Properties.LockDuration".
	Path    string
	Message string
}

func (e *ConfigError) Error() string { return e.Path + ": " + e.Message }

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

type jsonObject struct {
	path   string
	fields map[string]json.RawMessage
}

// object decodes raw as a JSON object whose keys must be among known.
func (p *configParser) object(path string, raw json.RawMessage, known ...string) jsonObject {
	o := jsonObject{path: path}
	if p.err != nil {
		return o
	}
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		p.fail(path, "expected an object, got %s", describe(raw))
		return o
	}
	if err := json.Unmarshal(raw, &o.fields); err != nil {
		p.fail(path, "%v", err)
		return o
	}
	keys := make([]string, 0, len(o.fields))
	for k := range o.fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			p.fail(path+"."+k, "unknown field (known: %s)", strings.Join(known, ", "))
			return o
		}
	}
	return o
}

func describe(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	switch {
	case s == "":
		return "nothing"
	case s == "null":
		return "null"
	case s[0] == '"':
		return "a string"
	case s[0] == '[':
		return "an array"
	case s[0] == '{':
		return "an object"
	case s == "true" || s == "false":
		return "a boolean"
	}
	return "a number"
}

func (o jsonObject) has(k string) bool { _, ok := o.fields[k]; return ok }

func (p *configParser) str(o jsonObject, k string, required bool) string {
	raw, ok := o.fields[k]
	if p.err != nil || !ok {
		if ok || !required {
			return ""
		}
		p.fail(o.path+"."+k, "required")
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		p.fail(o.path+"."+k, "expected a string, got %s", describe(raw))
	}
	return s
}

func (p *configParser) boolean(o jsonObject, k string) bool {
	raw, ok := o.fields[k]
	if p.err != nil || !ok {
		return false
	}
	var v bool
	if err := json.Unmarshal(raw, &v); err != nil {
		p.fail(o.path+"."+k, "expected a boolean, got %s", describe(raw))
	}
	return v
}

func (p *configParser) integer(o jsonObject, k string, def int64) int64 {
	raw, ok := o.fields[k]
	if p.err != nil || !ok {
		return def
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 32)
	if err != nil {
		p.fail(o.path+"."+k, "expected an integer, got %s", strings.TrimSpace(string(raw)))
	}
	return n
}

func (p *configParser) duration(o jsonObject, k string, def time.Duration) time.Duration {
	if p.err != nil || !o.has(k) {
		return def
	}
	s := p.str(o, k, false)
	if p.err != nil {
		return 0
	}
	d, err := contract.ParseDuration(s)
	if err != nil {
		p.fail(o.path+"."+k, "%v", err)
	}
	return d
}

func (p *configParser) array(o jsonObject, k string, required bool) []json.RawMessage {
	raw, ok := o.fields[k]
	if p.err != nil {
		return nil
	}
	if !ok {
		if required {
			p.fail(o.path+"."+k, "required")
		}
		return nil
	}
	var out []json.RawMessage
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) || json.Unmarshal(raw, &out) != nil {
		p.fail(o.path+"."+k, "expected an array, got %s", describe(raw))
	}
	return out
}

func (p *configParser) name(o jsonObject) string {
	n := p.str(o, "Name", true)
	if p.err == nil && !namePattern.MatchString(n) {
		p.fail(o.path+".Name", "invalid name %q", n)
	}
	return n
}

func (p *configParser) parse(data []byte) *UserConfig {
	var root json.RawMessage
	if err := json.Unmarshal(data, &root); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line, col := lineCol(data, se.Offset)
			p.fail("Config.json", "invalid JSON at line %d, column %d: %v", line, col, err)
		} else {
			p.fail("Config.json", "invalid JSON: %v", err)
		}
		return nil
	}
	top := p.object("Config.json", root, "UserConfig")
	if p.err == nil && !top.has("UserConfig") {
		p.fail("UserConfig", "required")
	}
	uco := p.object("UserConfig", top.fields["UserConfig"], "Namespaces", "Logging", "SessionIdRequired")
	uc := &UserConfig{}
	if rule := p.str(uco, "SessionIdRequired", false); rule != "" {
		r, err := ParseSessionIDRule(rule)
		if err != nil {
			p.fail("UserConfig.SessionIdRequired", "%q: want Partitioned or Always", rule)
		}
		uc.SessionIDRule = r
	}
	nss := p.array(uco, "Namespaces", true)
	if p.err == nil && len(nss) == 0 {
		p.fail("UserConfig.Namespaces", "at least one namespace is required")
	}
	entityNames := map[string]string{} // lower-case name -> path, across namespaces
	for ni, raw := range nss {
		nsPath := fmt.Sprintf("UserConfig.Namespaces[%d]", ni)
		nso := p.object(nsPath, raw, "Name", "Queues", "Topics")
		ns := NamespaceConfig{Name: p.name(nso)}
		for qi, raw := range p.array(nso, "Queues", false) {
			qp := fmt.Sprintf("%s.Queues[%d]", nsPath, qi)
			qo := p.object(qp, raw, "Name", "Properties")
			q := QueueConfig{Name: p.name(qo)}
			p.unique(entityNames, q.Name, qp+".Name")
			q.Properties = p.properties(qo, qp, queueProps)
			ns.Queues = append(ns.Queues, q)
		}
		for ti, raw := range p.array(nso, "Topics", false) {
			tp := fmt.Sprintf("%s.Topics[%d]", nsPath, ti)
			to := p.object(tp, raw, "Name", "Properties", "Subscriptions")
			t := TopicConfig{Name: p.name(to)}
			p.unique(entityNames, t.Name, tp+".Name")
			t.Properties = p.properties(to, tp, topicProps)
			subNames := map[string]string{}
			for si, raw := range p.array(to, "Subscriptions", false) {
				sp := fmt.Sprintf("%s.Subscriptions[%d]", tp, si)
				so := p.object(sp, raw, "Name", "Properties", "Rules")
				s := SubscriptionConfig{Name: p.name(so)}
				p.unique(subNames, s.Name, sp+".Name")
				s.Properties = p.properties(so, sp, subscriptionProps)
				ruleNames := map[string]string{}
				for ri, raw := range p.array(so, "Rules", false) {
					rp := fmt.Sprintf("%s.Rules[%d]", sp, ri)
					r := p.rule(rp, raw)
					p.unique(ruleNames, r.Name, rp+".Name")
					s.Rules = append(s.Rules, r)
				}
				t.Subscriptions = append(t.Subscriptions, s)
			}
			ns.Topics = append(ns.Topics, t)
		}
		uc.Namespaces = append(uc.Namespaces, ns)
	}
	if uco.has("Logging") {
		lo := p.object("UserConfig.Logging", uco.fields["Logging"], "Type")
		uc.Logging.Type = p.str(lo, "Type", true)
		switch uc.Logging.Type {
		case "File", "Console", "File,Console", "Console,File", "":
		default:
			p.fail("UserConfig.Logging.Type", "unknown logging type %q", uc.Logging.Type)
		}
	}
	p.checkForwards(uc, entityNames)
	return uc
}

func (p *configParser) unique(seen map[string]string, name, path string) {
	if p.err != nil {
		return
	}
	if first, ok := seen[key(name)]; ok {
		p.fail(path, "duplicate name %q (first at %s)", name, first)
		return
	}
	seen[key(name)] = path
}

func (p *configParser) checkForwards(uc *UserConfig, names map[string]string) {
	check := func(path, target string) {
		if p.err == nil && target != "" {
			if _, ok := names[key(target)]; !ok {
				p.fail(path, "forwarding target %q is not a queue or topic of the config", target)
			}
		}
	}
	for ni, ns := range uc.Namespaces {
		for qi, q := range ns.Queues {
			path := fmt.Sprintf("UserConfig.Namespaces[%d].Queues[%d].Properties", ni, qi)
			check(path+".ForwardTo", q.Properties.ForwardTo)
			check(path+".ForwardDeadLetteredMessagesTo", q.Properties.ForwardDeadLetteredMessagesTo)
		}
		for ti, t := range ns.Topics {
			for si, s := range t.Subscriptions {
				path := fmt.Sprintf("UserConfig.Namespaces[%d].Topics[%d].Subscriptions[%d].Properties", ni, ti, si)
				check(path+".ForwardTo", s.Properties.ForwardTo)
				check(path+".ForwardDeadLetteredMessagesTo", s.Properties.ForwardDeadLetteredMessagesTo)
			}
		}
	}
}

var (
	queueProps = []string{"DeadLetteringOnMessageExpiration", "DefaultMessageTimeToLive",
		"DuplicateDetectionHistoryTimeWindow", "EnablePartitioning", "ForwardDeadLetteredMessagesTo", "ForwardTo",
		"LockDuration", "MaxDeliveryCount", "RequiresDuplicateDetection", "RequiresSession", "Status"}
	topicProps = []string{"DefaultMessageTimeToLive", "DuplicateDetectionHistoryTimeWindow", "EnablePartitioning",
		"RequiresDuplicateDetection", "Status"}
	subscriptionProps = []string{"DeadLetteringOnMessageExpiration", "DefaultMessageTimeToLive",
		"ForwardDeadLetteredMessagesTo", "ForwardTo", "LockDuration", "MaxDeliveryCount", "RequiresSession", "Status"}
)

func (p *configParser) properties(parent jsonObject, parentPath string, known []string) EntityProperties {
	path := parentPath + ".Properties"
	raw, ok := parent.fields["Properties"]
	if !ok {
		raw = json.RawMessage("{}")
	}
	o := p.object(path, raw, known...)
	props := EntityProperties{
		LockDuration:                        p.duration(o, "LockDuration", configDefaultLockDuration),
		MaxDeliveryCount:                    int32(p.integer(o, "MaxDeliveryCount", configDefaultMaxDelivery)),
		DefaultMessageTimeToLive:            p.duration(o, "DefaultMessageTimeToLive", configDefaultTTL),
		RequiresSession:                     p.boolean(o, "RequiresSession"),
		DeadLetteringOnMessageExpiration:    p.boolean(o, "DeadLetteringOnMessageExpiration"),
		RequiresDuplicateDetection:          p.boolean(o, "RequiresDuplicateDetection"),
		DuplicateDetectionHistoryTimeWindow: p.duration(o, "DuplicateDetectionHistoryTimeWindow", configDefaultDuplicateWindow),
		ForwardTo:                           p.str(o, "ForwardTo", false),
		ForwardDeadLetteredMessagesTo:       p.str(o, "ForwardDeadLetteredMessagesTo", false),
		Status:                              EntityStatus(p.str(o, "Status", false)),
		EnablePartitioning:                  p.boolean(o, "EnablePartitioning"),
	}
	if p.err != nil {
		return props
	}
	if props.MaxDeliveryCount < 1 {
		p.fail(path+".MaxDeliveryCount", "must be at least 1, got %d", props.MaxDeliveryCount)
	}
	if props.LockDuration <= 0 && o.has("LockDuration") {
		p.fail(path+".LockDuration", "must be positive")
	}
	switch props.Status {
	case "", StatusActive, StatusDisabled, StatusSendDisabled, StatusReceiveDisabled:
	default:
		p.fail(path+".Status", "unknown status %q", props.Status)
	}
	return props
}

func (p *configParser) rule(path string, raw json.RawMessage) Rule {
	o := p.object(path, raw, "Name", "Properties")
	r := Rule{Name: p.name(o)}
	if p.err == nil && !o.has("Properties") {
		p.fail(path+".Properties", "required")
	}
	pp := path + ".Properties"
	po := p.object(pp, o.fields["Properties"], "FilterType", "SqlFilter", "CorrelationFilter", "Action")
	ft := p.str(po, "FilterType", true)
	switch ft {
	case "Sql":
		r.FilterType = FilterSQL
		if p.err == nil && !po.has("SqlFilter") {
			p.fail(pp+".SqlFilter", "required when FilterType is Sql")
		}
		so := p.object(pp+".SqlFilter", po.fields["SqlFilter"], "SqlExpression")
		r.SQLExpression = p.str(so, "SqlExpression", true)
	case "Correlation":
		r.FilterType = FilterCorrelation
		if p.err == nil && !po.has("CorrelationFilter") {
			p.fail(pp+".CorrelationFilter", "required when FilterType is Correlation")
		}
		cp := pp + ".CorrelationFilter"
		co := p.object(cp, po.fields["CorrelationFilter"], "ContentType", "CorrelationId", "Label", "MessageId",
			"ReplyTo", "ReplyToSessionId", "SessionId", "To", "Properties")
		cf := &CorrelationFilter{
			ContentType: p.str(co, "ContentType", false), CorrelationID: p.str(co, "CorrelationId", false),
			Label: p.str(co, "Label", false), MessageID: p.str(co, "MessageId", false),
			ReplyTo: p.str(co, "ReplyTo", false), ReplyToSessionID: p.str(co, "ReplyToSessionId", false),
			SessionID: p.str(co, "SessionId", false), To: p.str(co, "To", false),
		}
		if raw, ok := co.fields["Properties"]; ok && p.err == nil {
			if err := json.Unmarshal(raw, &cf.Properties); err != nil || cf.Properties == nil {
				p.fail(cp+".Properties", "expected an object, got %s", describe(raw))
			}
		}
		if p.err == nil && len(co.fields) == 0 {
			p.fail(cp, "at least one property is required")
		}
		r.Correlation = cf
	default:
		if p.err == nil {
			p.fail(pp+".FilterType", "unknown filter type %q (want Sql or Correlation)", ft)
		}
	}
	if po.has("Action") {
		ao := p.object(pp+".Action", po.fields["Action"], "SqlExpression")
		r.ActionSQLExpression = p.str(ao, "SqlExpression", false)
	}
	return r
}

func lineCol(data []byte, offset int64) (int, int) {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(offset) - bytes.LastIndexByte(before, '\n')
	return line, col
}

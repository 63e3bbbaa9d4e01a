package atom

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/emulator/broker"
)

// maxTimeSpan is .NET's TimeSpan.MaxValue, which Service Bus reports for "never"
// (DefaultMessageTimeToLive, AutoDeleteOnIdle).
const maxTimeSpan = "P10675199DT2H48M5.4775807S"

// never is the duration from which a time-to-live or idle timeout counts as infinite.
const never = 10000 * 24 * time.Hour

// Service Bus limits checked on PUT (400 otherwise).
const (
	maxLockDuration     = 5 * time.Minute
	minDuplicateWindow  = 20 * time.Second
	maxDuplicateWindow  = 7 * 24 * time.Hour
	minAutoDeleteOnIdle = 5 * time.Minute
	maxUserMetadataLen  = 1024
)

// entityExtras are the properties of a queue, topic or subscription that the broker
// does not model; they are stored and echoed.
type entityExtras struct {
	// entity is the broker entity these extras belong to, so that they never apply to
	// another entity of the same name created later (from a config file, say).
	entity             *broker.Entity
	maxSizeMB          int32
	batched            bool
	autoDeleteOnIdle   time.Duration // 0: never
	supportOrdering    bool
	userMetadata       *string
	maxMessageSizeKB   int64
	authorizationRules []byte
	// forwardTo and forwardDLQTo are ForwardTo and ForwardDeadLetteredMessagesTo as
	// the client wrote them (the broker keeps the entity name).
	forwardTo, forwardDLQTo string
}

func (h *handler) defaultExtras() entityExtras {
	return entityExtras{
		maxSizeMB:        1024,
		batched:          true,
		supportOrdering:  true,
		maxMessageSizeKB: h.b.MaxMessageSize() / 1024,
	}
}

// extrasFor returns the stored extras of an entity, or the defaults. h.mu must be held.
func (h *handler) extrasFor(info broker.EntityInfo) entityExtras {
	if x, ok := h.extras[strings.ToLower(info.Path)]; ok {
		if e, err := h.b.Lookup(info.Path); err == nil && e == x.entity {
			return x
		}
	}
	return h.defaultExtras()
}

// dropExtras forgets what the handler kept of a deleted entity and of its children
// (a topic's subscriptions, a subscription's rules). h.mu must be held.
func (h *handler) dropExtras(path string) {
	path = strings.ToLower(path)
	delete(h.extras, path)
	subs := path + "/subscriptions/"
	for k := range h.extras {
		if strings.HasPrefix(k, subs) && !strings.Contains(k[len(subs):], "/") {
			delete(h.extras, k)
		}
	}
	rules := subs // a topic's rules are under its subscriptions
	if strings.Contains(path, "/subscriptions/") {
		rules = path + "/" // a subscription's own rules
	}
	for k := range h.rules {
		if strings.HasPrefix(k, rules) {
			delete(h.rules, k)
		}
	}
}

// ---- queues and topics ----

func (h *handler) entity(req *request, name string) (int, any, error) {
	switch req.r.Method {
	case http.MethodGet:
		h.mu.Lock()
		defer h.mu.Unlock()
		if info, err := h.b.GetQueue(name); err == nil {
			return http.StatusOK, h.queueEntry(req.r, info), nil
		} else if !errors.Is(err, broker.ErrNotFound) {
			return 0, nil, err
		}
		info, err := h.b.GetTopic(name)
		if errors.Is(err, broker.ErrNotFound) {
			return 0, nil, fmt.Errorf("no queue or topic named %q: %w", name, broker.ErrNotFound)
		} else if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, h.topicEntry(req.r, info), nil
	case http.MethodDelete:
		h.mu.Lock()
		defer h.mu.Unlock()
		err := h.b.DeleteQueue(name)
		if errors.Is(err, broker.ErrNotFound) {
			err = h.b.DeleteTopic(name)
		}
		if errors.Is(err, broker.ErrNotFound) {
			return 0, nil, fmt.Errorf("no queue or topic named %q: %w", name, broker.ErrNotFound)
		} else if err != nil {
			return 0, nil, err
		}
		h.dropExtras(name)
		return http.StatusOK, nil, nil
	}
	kind, decode, err := parseBody(req.body)
	if err != nil {
		return 0, nil, err
	}
	var d inDescription
	if err := decode(&d); err != nil {
		return 0, nil, badRequest("invalid %s: %w", kind, err)
	}
	switch kind {
	case "QueueDescription":
		return h.putQueue(req, name, &d)
	case "TopicDescription":
		return h.putTopic(req, name, &d)
	}
	return 0, nil, badRequest("cannot PUT a %s at %q", kind, name)
}

func (h *handler) putQueue(req *request, name string, d *inDescription) (int, any, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var existing *broker.EntityInfo
	if req.update {
		info, err := h.b.GetQueue(name)
		if err != nil {
			return 0, nil, fmt.Errorf("update queue %q: %w", name, err)
		}
		existing = &info
	}
	p, x, err := h.toProperties(broker.KindQueue, name, d, existing)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusCreated
	if req.update {
		status = http.StatusOK
		err = h.b.UpdateQueue(name, p)
	} else {
		err = h.b.CreateQueue(name, p)
	}
	if err != nil {
		return 0, nil, err
	}
	info, err := h.b.GetQueue(name)
	if err != nil {
		return 0, nil, err
	}
	if x.entity, err = h.b.Lookup(info.Path); err != nil {
		return 0, nil, err
	}
	h.extras[strings.ToLower(info.Path)] = x
	return status, h.queueEntry(req.r, info), nil
}

func (h *handler) putTopic(req *request, name string, d *inDescription) (int, any, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var existing *broker.EntityInfo
	if req.update {
		info, err := h.b.GetTopic(name)
		if err != nil {
			return 0, nil, fmt.Errorf("update topic %q: %w", name, err)
		}
		existing = &info
	}
	p, x, err := h.toProperties(broker.KindTopic, name, d, existing)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusCreated
	if req.update {
		status = http.StatusOK
		err = h.b.UpdateTopic(name, p)
	} else {
		err = h.b.CreateTopic(name, p)
	}
	if err != nil {
		return 0, nil, err
	}
	info, err := h.b.GetTopic(name)
	if err != nil {
		return 0, nil, err
	}
	if x.entity, err = h.b.Lookup(info.Path); err != nil {
		return 0, nil, err
	}
	h.extras[strings.ToLower(info.Path)] = x
	return status, h.topicEntry(req.r, info), nil
}

// ---- subscriptions ----

func (h *handler) subscription(req *request, rt route) (int, any, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch req.r.Method {
	case http.MethodGet:
		info, err := h.b.GetSubscription(rt.topic, rt.sub)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, h.subscriptionEntry(req.r, info), nil
	case http.MethodDelete:
		info, err := h.b.GetSubscription(rt.topic, rt.sub)
		if err != nil {
			return 0, nil, err
		}
		if err := h.b.DeleteSubscription(rt.topic, rt.sub); err != nil {
			return 0, nil, err
		}
		h.dropExtras(info.Path)
		return http.StatusOK, nil, nil
	}
	kind, decode, err := parseBody(req.body)
	if err != nil {
		return 0, nil, err
	}
	if kind != "SubscriptionDescription" {
		return 0, nil, badRequest("cannot PUT a %s at a subscription's address", kind)
	}
	var d inDescription
	if err := decode(&d); err != nil {
		return 0, nil, badRequest("invalid %s: %w", kind, err)
	}
	var existing *broker.EntityInfo
	if req.update {
		info, err := h.b.GetSubscription(rt.topic, rt.sub)
		if err != nil {
			return 0, nil, fmt.Errorf("update subscription: %w", err)
		}
		existing = &info
	}
	p, x, err := h.toProperties(broker.KindSubscription, rt.topic+"/Subscriptions/"+rt.sub, &d, existing)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusCreated
	var defaultRule *ruleExtras
	if req.update {
		status = http.StatusOK
		// A DefaultRuleDescription only matters on create, as in Service Bus.
		err = h.b.UpdateSubscription(rt.topic, rt.sub, p)
	} else {
		var rules []broker.Rule
		if d.DefaultRuleDescription != nil {
			name := broker.DefaultRuleName
			if d.DefaultRuleDescription.Name != nil && *d.DefaultRuleDescription.Name != "" {
				name = *d.DefaultRuleDescription.Name
			}
			r, rx, rerr := ruleFromXML(name, d.DefaultRuleDescription.Filter, d.DefaultRuleDescription.Action)
			if rerr != nil {
				return 0, nil, rerr
			}
			rules = []broker.Rule{r}
			defaultRule = &rx
		}
		err = h.b.CreateSubscriptionWithRules(rt.topic, rt.sub, p, rules)
	}
	if err != nil {
		return 0, nil, err
	}
	info, err := h.b.GetSubscription(rt.topic, rt.sub)
	if err != nil {
		return 0, nil, err
	}
	if x.entity, err = h.b.Lookup(info.Path); err != nil {
		return 0, nil, err
	}
	h.extras[strings.ToLower(info.Path)] = x
	if defaultRule != nil {
		defaultRule.createdAt = info.CreatedAt
		defaultRule.sub = x.entity
		h.rules[ruleKey(rt.topic, rt.sub, defaultRule.name)] = *defaultRule
	}
	return status, h.subscriptionEntry(req.r, info), nil
}

// ---- lists ----

func (h *handler) list(r *http.Request, rt route) (any, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var (
		entries []outEntry
		title   string
	)
	switch rt.kind {
	case routeResources:
		var infos []broker.EntityInfo
		if rt.listWhat == "queues" {
			title, infos = "Queues", h.b.ListQueues()
		} else {
			title, infos = "Topics", h.b.ListTopics()
		}
		infos, err := page(r, infos)
		if err != nil {
			return nil, err
		}
		for _, info := range infos {
			if info.Kind == broker.KindQueue {
				entries = append(entries, h.queueEntry(r, info))
			} else {
				entries = append(entries, h.topicEntry(r, info))
			}
		}
	case routeSubscriptions:
		infos, err := h.b.ListSubscriptions(rt.topic)
		if err != nil {
			return nil, err
		}
		if infos, err = page(r, infos); err != nil {
			return nil, err
		}
		title = "Subscriptions"
		for _, info := range infos {
			entries = append(entries, h.subscriptionEntry(r, info))
		}
	case routeRules:
		sub, err := h.b.GetSubscription(rt.topic, rt.sub)
		if err != nil {
			return nil, err
		}
		rules, err := h.b.ListRules(rt.topic, rt.sub)
		if err != nil {
			return nil, err
		}
		if rules, err = page(r, rules); err != nil {
			return nil, err
		}
		title = "Rules"
		for _, rule := range rules {
			entries = append(entries, h.ruleEntry(r, sub, rule))
		}
	}
	return h.feed(r, title, entries), nil
}

// ---- properties in ----

// toProperties converts a description to broker properties and extras, checking each
// value. path is the entity's address; existing is the entity being updated (nil on
// create).
func (h *handler) toProperties(kind broker.EntityKind, path string, d *inDescription, existing *broker.EntityInfo) (broker.EntityProperties, entityExtras, error) {
	var p broker.EntityProperties
	x := h.defaultExtras()
	var err error
	dur := func(field string, s *string) (time.Duration, error) {
		if s == nil {
			return 0, nil
		}
		v, perr := contract.ParseDuration(strings.TrimSpace(*s))
		if perr != nil {
			return 0, badRequest("%s: %w", field, perr)
		}
		if v <= 0 {
			return 0, badRequest("%s: %q must be positive", field, *s)
		}
		return v, nil
	}
	if kind != broker.KindTopic {
		if p.LockDuration, err = dur("LockDuration", d.LockDuration); err != nil {
			return p, x, err
		}
		if p.LockDuration > maxLockDuration {
			return p, x, badRequest("LockDuration: %v exceeds the maximum of %v", p.LockDuration, maxLockDuration)
		}
		if d.MaxDeliveryCount != nil {
			if *d.MaxDeliveryCount < 1 {
				return p, x, badRequest("MaxDeliveryCount: must be at least 1, got %d", *d.MaxDeliveryCount)
			}
			p.MaxDeliveryCount = *d.MaxDeliveryCount
		}
		if d.RequiresSession != nil {
			p.RequiresSession = *d.RequiresSession
		} else if existing != nil {
			p.RequiresSession = existing.Properties.RequiresSession
		}
		if d.DeadLetteringOnMessageExpiration != nil {
			p.DeadLetteringOnMessageExpiration = *d.DeadLetteringOnMessageExpiration
		}
		if p.ForwardTo, err = h.forwardTarget("ForwardTo", path, d.ForwardTo); err != nil {
			return p, x, err
		}
		if p.ForwardDeadLetteredMessagesTo, err = h.forwardTarget("ForwardDeadLetteredMessagesTo", path, d.ForwardDeadLetteredMessagesTo); err != nil {
			return p, x, err
		}
		x.forwardTo, x.forwardDLQTo = strings.TrimSpace(deref(d.ForwardTo)), strings.TrimSpace(deref(d.ForwardDeadLetteredMessagesTo))
	}
	if p.DefaultMessageTimeToLive, err = dur("DefaultMessageTimeToLive", d.DefaultMessageTimeToLive); err != nil {
		return p, x, err
	}
	if p.DefaultMessageTimeToLive >= never {
		p.DefaultMessageTimeToLive = 0
	}
	if kind != broker.KindSubscription {
		if d.RequiresDuplicateDetection != nil {
			p.RequiresDuplicateDetection = *d.RequiresDuplicateDetection
		} else if existing != nil {
			p.RequiresDuplicateDetection = existing.Properties.RequiresDuplicateDetection
		}
		if p.DuplicateDetectionHistoryTimeWindow, err = dur("DuplicateDetectionHistoryTimeWindow", d.DuplicateDetectionHistoryTimeWindow); err != nil {
			return p, x, err
		}
		if w := p.DuplicateDetectionHistoryTimeWindow; w != 0 && (w < minDuplicateWindow || w > maxDuplicateWindow) {
			return p, x, badRequest("DuplicateDetectionHistoryTimeWindow: %v is outside [%v, %v]", w, minDuplicateWindow, maxDuplicateWindow)
		}
		if d.MaxSizeInMegabytes != nil {
			if *d.MaxSizeInMegabytes <= 0 {
				return p, x, badRequest("MaxSizeInMegabytes: must be positive, got %d", *d.MaxSizeInMegabytes)
			}
			x.maxSizeMB = *d.MaxSizeInMegabytes
		}
		if d.EnablePartitioning != nil {
			p.EnablePartitioning = *d.EnablePartitioning
		} else if existing != nil {
			p.EnablePartitioning = existing.Properties.EnablePartitioning
		}
		if d.MaxMessageSizeInKilobytes != nil {
			if *d.MaxMessageSizeInKilobytes <= 0 {
				return p, x, badRequest("MaxMessageSizeInKilobytes: must be positive, got %d", *d.MaxMessageSizeInKilobytes)
			}
			x.maxMessageSizeKB = *d.MaxMessageSizeInKilobytes
		}
		if d.AuthorizationRules != nil {
			x.authorizationRules = d.AuthorizationRules.Inner
		}
	}
	if kind == broker.KindTopic && d.SupportOrdering != nil {
		x.supportOrdering = *d.SupportOrdering
	}
	if kind == broker.KindSubscription && d.DeadLetteringOnFilterEvaluationExceptions != nil {
		p.DropOnFilterEvaluationExceptions = !*d.DeadLetteringOnFilterEvaluationExceptions
	}
	if d.Status != nil {
		switch s := broker.EntityStatus(strings.TrimSpace(*d.Status)); s {
		case broker.StatusActive, broker.StatusDisabled, broker.StatusSendDisabled, broker.StatusReceiveDisabled:
			p.Status = s
		default:
			return p, x, badRequest("Status: unknown status %q", *d.Status)
		}
	}
	if d.EnableBatchedOperations != nil {
		x.batched = *d.EnableBatchedOperations
	}
	if x.autoDeleteOnIdle, err = dur("AutoDeleteOnIdle", d.AutoDeleteOnIdle); err != nil {
		return p, x, err
	}
	if x.autoDeleteOnIdle >= never {
		x.autoDeleteOnIdle = 0
	} else if x.autoDeleteOnIdle != 0 && x.autoDeleteOnIdle < minAutoDeleteOnIdle {
		return p, x, badRequest("AutoDeleteOnIdle: %v is below the minimum of %v", x.autoDeleteOnIdle, minAutoDeleteOnIdle)
	}
	if d.UserMetadata != nil {
		if len(*d.UserMetadata) > maxUserMetadataLen {
			return p, x, badRequest("UserMetadata: longer than %d characters", maxUserMetadataLen)
		}
		x.userMetadata = d.UserMetadata
	}
	return p, x, nil
}

// forwardTarget checks a ForwardTo value: an entity name ("q2") or its absolute URI
// ("sb://ns.servicebus.windows.net/q2"). It returns the entity name, which must exist
// and must not be the forwarding entity (self).
func (h *handler) forwardTarget(field, self string, v *string) (string, error) {
	if v == nil || strings.TrimSpace(*v) == "" {
		return "", nil
	}
	name := forwardName(*v)
	if strings.EqualFold(name, self) {
		return "", badRequest("%s: an entity cannot forward to itself", field)
	}
	if _, err := h.b.GetQueue(name); err == nil {
		return name, nil
	}
	if _, err := h.b.GetTopic(name); err == nil {
		return name, nil
	}
	return "", badRequest("%s: the entity %q does not exist", field, *v)
}

// forwardName returns the entity name of a ForwardTo value: the value itself, or the
// path of an absolute URI.
func forwardName(v string) string {
	name := strings.TrimSpace(v)
	if _, rest, ok := strings.Cut(name, "://"); ok {
		_, name, _ = strings.Cut(rest, "/")
	}
	return strings.Trim(name, "/")
}

// forwardOut renders a forwarding target the way Service Bus returns it: an absolute
// URI. The URI the client wrote is returned as written (the SDK's live tests write
// sb://… and https://… URIs and expect them back unchanged); a plain entity name, or a
// target set outside the API (a Config.json file), becomes sb://<namespace host>/<name>,
// the host being the one the request was sent to.
func forwardOut(r *http.Request, target, written string) *string {
	if target == "" {
		return nil
	}
	if strings.Contains(written, "://") && strings.EqualFold(forwardName(written), target) {
		return &written
	}
	u := "sb://" + r.Host + "/" + target
	return &u
}

// ---- properties out ----

func formatDuration(d time.Duration) string {
	if d <= 0 || d >= never || d == math.MaxInt64 {
		return maxTimeSpan
	}
	return contract.FormatDuration(d)
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func countDetails(c broker.Counts) outCountDetails {
	return outCountDetails{
		XMLNS:  nsCountDetail,
		Active: c.Active, DeadLetter: c.DeadLetter, Scheduled: c.Scheduled,
		Transfer: c.Transfer, TransferDeadLetter: c.TransferDeadLetter,
	}
}

func availability(s broker.EntityStatus) string {
	if s == broker.StatusActive {
		return "Available"
	}
	return "Unknown"
}

// queueEntry renders a queue. h.mu must be held.
func (h *handler) queueEntry(r *http.Request, info broker.EntityInfo) outEntry {
	p, x := info.Properties, h.extrasFor(info)
	q := outQueue{
		XMLNSI:                              nsXSI,
		LockDuration:                        contract.FormatDuration(p.LockDuration),
		MaxSizeInMegabytes:                  x.maxSizeMB,
		RequiresDuplicateDetection:          p.RequiresDuplicateDetection,
		RequiresSession:                     p.RequiresSession,
		DefaultMessageTimeToLive:            formatDuration(p.DefaultMessageTimeToLive),
		DeadLetteringOnMessageExpiration:    p.DeadLetteringOnMessageExpiration,
		DuplicateDetectionHistoryTimeWindow: contract.FormatDuration(p.DuplicateDetectionHistoryTimeWindow),
		MaxDeliveryCount:                    p.MaxDeliveryCount,
		EnableBatchedOperations:             x.batched,
		SizeInBytes:                         info.Counts.SizeBytes,
		MessageCount:                        info.Counts.Total,
		AuthorizationRules:                  rawXML{Inner: x.authorizationRules},
		Status:                              string(p.Status),
		ForwardTo:                           forwardOut(r, p.ForwardTo, x.forwardTo),
		CreatedAt:                           formatTime(info.CreatedAt),
		UpdatedAt:                           formatTime(info.UpdatedAt),
		AccessedAt:                          formatTime(info.AccessedAt),
		SupportOrdering:                     true,
		CountDetails:                        countDetails(info.Counts),
		AutoDeleteOnIdle:                    formatDuration(x.autoDeleteOnIdle),
		EnablePartitioning:                  p.EnablePartitioning,
		EntityAvailabilityStatus:            availability(p.Status),
		ForwardDeadLetteredMessagesTo:       forwardOut(r, p.ForwardDeadLetteredMessagesTo, x.forwardDLQTo),
		UserMetadata:                        x.userMetadata,
		MaxMessageSizeInKilobytes:           x.maxMessageSizeKB,
	}
	return h.entry(r, info.Path, info.Name, info.CreatedAt, info.UpdatedAt, q)
}

// topicEntry renders a topic with its subscription and filter counts. h.mu must be held.
func (h *handler) topicEntry(r *http.Request, info broker.EntityInfo) outEntry {
	p, x := info.Properties, h.extrasFor(info)
	t := outTopic{
		XMLNSI:                              nsXSI,
		DefaultMessageTimeToLive:            formatDuration(p.DefaultMessageTimeToLive),
		MaxSizeInMegabytes:                  x.maxSizeMB,
		RequiresDuplicateDetection:          p.RequiresDuplicateDetection,
		DuplicateDetectionHistoryTimeWindow: contract.FormatDuration(p.DuplicateDetectionHistoryTimeWindow),
		EnableBatchedOperations:             x.batched,
		SizeInBytes:                         info.Counts.SizeBytes,
		FilteringMessagesBeforePublishing:   false,
		AuthorizationRules:                  rawXML{Inner: x.authorizationRules},
		Status:                              string(p.Status),
		CreatedAt:                           formatTime(info.CreatedAt),
		UpdatedAt:                           formatTime(info.UpdatedAt),
		AccessedAt:                          formatTime(info.AccessedAt),
		SupportOrdering:                     x.supportOrdering,
		CountDetails:                        countDetails(info.Counts),
		SubscriptionCount:                   int32(info.SubscriptionCount),
		AutoDeleteOnIdle:                    formatDuration(x.autoDeleteOnIdle),
		EnablePartitioning:                  p.EnablePartitioning,
		EntityAvailabilityStatus:            availability(p.Status),
		UserMetadata:                        x.userMetadata,
		MaxMessageSizeInKilobytes:           x.maxMessageSizeKB,
	}
	if subs, err := h.b.ListSubscriptions(info.Name); err == nil {
		for _, s := range subs {
			rules, err := h.b.ListRules(info.Name, s.Name)
			if err != nil {
				continue
			}
			for _, rule := range rules {
				if rule.FilterType == broker.FilterCorrelation {
					t.CorrelationFilterCount++
				} else {
					t.SQLFilterCount++
				}
			}
		}
	}
	return h.entry(r, info.Path, info.Name, info.CreatedAt, info.UpdatedAt, t)
}

// subscriptionEntry renders a subscription. h.mu must be held.
func (h *handler) subscriptionEntry(r *http.Request, info broker.EntityInfo) outEntry {
	p, x := info.Properties, h.extrasFor(info)
	s := outSubscription{
		XMLNSI:                           nsXSI,
		LockDuration:                     contract.FormatDuration(p.LockDuration),
		RequiresSession:                  p.RequiresSession,
		DefaultMessageTimeToLive:         formatDuration(p.DefaultMessageTimeToLive),
		DeadLetteringOnMessageExpiration: p.DeadLetteringOnMessageExpiration,
		DeadLetteringOnFilterEvaluationExceptions: !p.DropOnFilterEvaluationExceptions,
		MessageCount:                  info.Counts.Total,
		MaxDeliveryCount:              p.MaxDeliveryCount,
		EnableBatchedOperations:       x.batched,
		Status:                        string(p.Status),
		ForwardTo:                     forwardOut(r, p.ForwardTo, x.forwardTo),
		CreatedAt:                     formatTime(info.CreatedAt),
		UpdatedAt:                     formatTime(info.UpdatedAt),
		AccessedAt:                    formatTime(info.AccessedAt),
		CountDetails:                  countDetails(info.Counts),
		UserMetadata:                  x.userMetadata,
		ForwardDeadLetteredMessagesTo: forwardOut(r, p.ForwardDeadLetteredMessagesTo, x.forwardDLQTo),
		AutoDeleteOnIdle:              formatDuration(x.autoDeleteOnIdle),
		EntityAvailabilityStatus:      availability(p.Status),
	}
	return h.entry(r, info.Path, info.Name, info.CreatedAt, info.UpdatedAt, s)
}

package sqs

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The service's limits and windows.
const (
	dedupWindow      = 5 * time.Minute
	attemptWindow    = 5 * time.Minute
	purgeInterval    = 60 * time.Second
	recreateInterval = 60 * time.Second
	maxVisibility    = 12 * time.Hour
	maxBatchEntries  = 10
	maxQueueNameLen  = 80
	fifoSuffix       = ".fifo"
)

// queue is one FIFO queue. Every field is guarded by Handler.mu.
type queue struct {
	name, arn string
	created   time.Time
	modified  time.Time
	attrs     map[string]string // the settable attributes, normalized, defaults filled
	cfg       queueConfig       // attrs parsed

	msgs       []*message          // in send order; gone ones are dropped lazily
	gone       int                 // how many of msgs are gone
	byID       map[string]*message // the messages still in the queue
	groups     map[string]*group   // the groups with messages in the queue
	dedup      map[string]dedupEntry
	dedupOrder []dedupSlot // dedup's entries in the order they expire
	attempts   map[string]attempt
	seq        uint64
	purged     time.Time
}

// group is one message group's messages still in the queue, in order. Receives take
// messages from the front only while none of the group is in flight, so the messages
// ever received form a prefix of msgs: a group is blocked when one of that prefix is
// in flight.
type group struct {
	msgs []*message
}

func (g *group) blocked(now time.Time) bool {
	for _, m := range g.msgs {
		if m.handle == "" {
			return false
		}
		if m.inFlight(now) {
			return true
		}
	}
	return false
}

type dedupSlot struct {
	key     string
	expires time.Time
}

// queueConfig is the parsed form of a queue's attributes.
type queueConfig struct {
	delay, visibility, retention, wait time.Duration
	maxSize                            int
	contentDedup                       bool
	dedupPerGroup                      bool
	redrive                            *redrivePolicy
}

type redrivePolicy struct {
	targetArn string
	maxCount  int
}

type dedupEntry struct {
	messageID string
	seq       string
	expires   time.Time
}

type attempt struct {
	expires time.Time
	handles []string // receipt handles, in the order returned
}

// message is one message in a queue.
type message struct {
	id, body, group, dedupID string
	attrs                    map[string]attrValue
	traceHeader              string
	seq                      string
	seqNum                   uint64
	senderID                 string
	md5Body                  string
	sentAt                   time.Time // when it was sent (SentTimestamp)
	enqueuedAt               time.Time // when it entered this queue; retention counts from here
	availableAt              time.Time // sentAt plus the queue's delay
	dlqSource                string    // the ARN of the queue it was redriven from

	receiveCount int
	firstReceive time.Time
	receivedAt   time.Time // the start of the current receive (for the 12-hour limit)
	visibleAt    time.Time // in flight while handle != "" and now is before this
	handle       string    // the newest receipt handle
	gone         bool
}

func (m *message) inFlight(now time.Time) bool { return m.handle != "" && now.Before(m.visibleAt) }

// attrValue is a message attribute.
type attrValue struct {
	DataType    string `json:"DataType"`
	StringValue string `json:"StringValue,omitempty"`
	BinaryValue []byte `json:"BinaryValue,omitempty"`
}

var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// checkQueueName enforces the FIFO naming rule.
func checkQueueName(name string) error {
	base, ok := strings.CutSuffix(name, fifoSuffix)
	if !ok || len(name) > maxQueueNameLen || !queueNameRE.MatchString(base) {
		return errInvalidParams("The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length.")
	}
	return nil
}

// The settable attributes with their defaults. Attributes with an empty default are
// shown only once set.
var attrDefaults = map[string]string{
	"DelaySeconds":                  "0",
	"MaximumMessageSize":            "1048576",
	"MessageRetentionPeriod":        "345600",
	"ReceiveMessageWaitTimeSeconds": "0",
	"VisibilityTimeout":             "30",
	"FifoQueue":                     "true",
	"ContentBasedDeduplication":     "false",
	"DeduplicationScope":            "queue",
	"FifoThroughputLimit":           "perQueue",
	"SqsManagedSseEnabled":          "true",
	"RedrivePolicy":                 "",
	"RedriveAllowPolicy":            "",
	"Policy":                        "",
	"KmsMasterKeyId":                "",
	"KmsDataKeyReusePeriodSeconds":  "",
}

// readOnlyAttrs are computed by the queue.
var readOnlyAttrs = []string{
	"QueueArn", "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
	"ApproximateNumberOfMessagesDelayed", "CreatedTimestamp", "LastModifiedTimestamp",
}

// intRange checks an integer attribute.
func intRange(name, v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, errAttrValue(name)
	}
	return n, nil
}

// mergeAttrs validates in against base (the queue's current attributes, or the defaults
// when creating) and returns the merged attributes and their parsed form. lookupArn finds
// a queue by ARN for the redrive policy. Nothing is changed on error.
func mergeAttrs(base, in map[string]string, creating bool, lookupArn func(string) *queue) (map[string]string, queueConfig, error) {
	merged := make(map[string]string, len(base))
	for k, v := range base {
		merged[k] = v
	}
	for k, v := range in {
		if _, ok := attrDefaults[k]; !ok {
			return nil, queueConfig{}, errAttrName(k)
		}
		if k == "FifoQueue" && !creating {
			return nil, queueConfig{}, errInvalidParams("Invalid value for the parameter FifoQueue: a queue's type cannot be changed.")
		}
		merged[k] = v
	}
	var c queueConfig
	ints := []struct {
		name   string
		lo, hi int
		set    func(int)
	}{
		{"DelaySeconds", 0, 900, func(n int) { c.delay = time.Duration(n) * time.Second }},
		{"MaximumMessageSize", 1024, 1048576, func(n int) { c.maxSize = n }},
		{"MessageRetentionPeriod", 60, 1209600, func(n int) { c.retention = time.Duration(n) * time.Second }},
		{"ReceiveMessageWaitTimeSeconds", 0, 20, func(n int) { c.wait = time.Duration(n) * time.Second }},
		{"VisibilityTimeout", 0, 43200, func(n int) { c.visibility = time.Duration(n) * time.Second }},
	}
	for _, a := range ints {
		n, err := intRange(a.name, merged[a.name], a.lo, a.hi)
		if err != nil {
			return nil, queueConfig{}, err
		}
		a.set(n)
	}
	if v := merged["KmsDataKeyReusePeriodSeconds"]; v != "" {
		if _, err := intRange("KmsDataKeyReusePeriodSeconds", v, 60, 86400); err != nil {
			return nil, queueConfig{}, err
		}
	}
	for _, name := range []string{"FifoQueue", "ContentBasedDeduplication", "SqsManagedSseEnabled"} {
		b, err := strconv.ParseBool(merged[name])
		if err != nil || (merged[name] != "true" && merged[name] != "false") {
			return nil, queueConfig{}, errAttrValue(name)
		}
		if name == "ContentBasedDeduplication" {
			c.contentDedup = b
		}
	}
	switch merged["DeduplicationScope"] {
	case "queue":
	case "messageGroup":
		c.dedupPerGroup = true
	default:
		return nil, queueConfig{}, errAttrValue("DeduplicationScope")
	}
	switch merged["FifoThroughputLimit"] {
	case "perQueue":
	case "perMessageGroupId":
		if !c.dedupPerGroup {
			return nil, queueConfig{}, errInvalidParams("Invalid value for the parameter FifoThroughputLimit: perMessageGroupId requires DeduplicationScope messageGroup.")
		}
	default:
		return nil, queueConfig{}, errAttrValue("FifoThroughputLimit")
	}
	for _, name := range []string{"Policy", "RedriveAllowPolicy"} {
		if v := merged[name]; v != "" && !json.Valid([]byte(v)) {
			return nil, queueConfig{}, errAttrValue(name)
		}
	}
	if v := merged["RedrivePolicy"]; v != "" {
		p, err := parseRedrive(v, lookupArn)
		if err != nil {
			return nil, queueConfig{}, err
		}
		c.redrive = p
	}
	return merged, c, nil
}

// parseRedrive reads a RedrivePolicy: the target must be an existing FIFO queue and
// maxReceiveCount between 1 and 1000 (a number or a string of one).
func parseRedrive(v string, lookupArn func(string) *queue) (*redrivePolicy, error) {
	var raw struct {
		Target   string          `json:"deadLetterTargetArn"`
		MaxCount json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, errInvalidParam("RedrivePolicy", v, "Redrive policy is not a valid JSON map.")
	}
	if raw.Target == "" {
		return nil, errInvalidParam("RedrivePolicy", v, "Redrive policy does not contain mandatory attribute: deadLetterTargetArn.")
	}
	countText := strings.Trim(string(raw.MaxCount), `"`)
	if countText == "" {
		return nil, errInvalidParam("RedrivePolicy", v, "Redrive policy does not contain mandatory attribute: maxReceiveCount.")
	}
	n, err := strconv.Atoi(countText)
	if err != nil || n < 1 || n > 1000 {
		return nil, errInvalidParam("RedrivePolicy", v, "Invalid value for maxReceiveCount: "+countText+", valid values are from 1 to 1000 both inclusive.")
	}
	if lookupArn(raw.Target) == nil {
		return nil, errInvalidParam("RedrivePolicy", v, "Dead letter target does not exist.")
	}
	return &redrivePolicy{targetArn: raw.Target, maxCount: n}, nil
}

// sameAttrs reports whether every attribute in `in` has the queue's value, as
// CreateQueue requires for an existing name.
func (q *queue) sameAttrs(in map[string]string) bool {
	for k, v := range in {
		cur, ok := q.attrs[k]
		if !ok || cur != v {
			return false
		}
	}
	return true
}

// visibleAttrs renders the asked attributes (or all for "All").
func (q *queue) visibleAttrs(names []string, now time.Time) (map[string]string, error) {
	all := map[string]string{}
	for k, v := range q.attrs {
		if v != "" {
			all[k] = v
		}
	}
	visible, notVisible, delayed := q.counts(now)
	all["QueueArn"] = q.arn
	all["ApproximateNumberOfMessages"] = strconv.Itoa(visible)
	all["ApproximateNumberOfMessagesNotVisible"] = strconv.Itoa(notVisible)
	all["ApproximateNumberOfMessagesDelayed"] = strconv.Itoa(delayed)
	all["CreatedTimestamp"] = strconv.FormatInt(q.created.Unix(), 10)
	all["LastModifiedTimestamp"] = strconv.FormatInt(q.modified.Unix(), 10)
	out := map[string]string{}
	for _, n := range names {
		if n == "All" {
			return all, nil
		}
		_, settable := attrDefaults[n]
		if !settable && !slices.Contains(readOnlyAttrs, n) {
			return nil, errAttrName(n)
		}
		if v, ok := all[n]; ok {
			out[n] = v
		}
	}
	return out, nil
}

// counts returns the numbers of visible, in-flight and delayed messages.
func (q *queue) counts(now time.Time) (visible, notVisible, delayed int) {
	q.expire(now)
	for _, m := range q.msgs {
		switch {
		case m.gone:
		case m.inFlight(now):
			notVisible++
		case now.Before(m.availableAt):
			delayed++
		default:
			visible++
		}
	}
	return visible, notVisible, delayed
}

// add appends m to the queue and its group.
func (q *queue) add(m *message) {
	q.msgs = append(q.msgs, m)
	q.byID[m.id] = m
	g := q.groups[m.group]
	if g == nil {
		g = &group{}
		q.groups[m.group] = g
	}
	g.msgs = append(g.msgs, m)
}

// remove takes m out of the queue and its group. The entry in msgs stays, marked gone,
// until compact or expire drops it.
func (q *queue) remove(m *message) {
	if m.gone {
		return
	}
	m.gone = true
	delete(q.byID, m.id)
	q.gone++
	g := q.groups[m.group]
	for i, x := range g.msgs {
		if x == m {
			copy(g.msgs[i:], g.msgs[i+1:])
			g.msgs[len(g.msgs)-1] = nil
			g.msgs = g.msgs[:len(g.msgs)-1]
			break
		}
	}
	if len(g.msgs) == 0 {
		delete(q.groups, m.group)
	}
}

// compact drops gone messages from msgs once they are more than half of it. It must
// not run while msgs is being iterated.
func (q *queue) compact() {
	if q.gone <= 64 || q.gone <= len(q.msgs)/2 {
		return
	}
	kept := q.msgs[:0]
	for _, x := range q.msgs {
		if !x.gone {
			kept = append(kept, x)
		}
	}
	clear(q.msgs[len(kept):])
	q.msgs = kept
	q.gone = 0
}

// expire drops messages past the retention period and forgets ended deduplication
// entries and receive attempts. Messages are kept in the order they entered the
// queue, so the walk stops at the first one still retained.
func (q *queue) expire(now time.Time) {
	for len(q.msgs) > 0 {
		m := q.msgs[0]
		if !m.gone && now.Before(m.enqueuedAt.Add(q.cfg.retention)) {
			break
		}
		q.remove(m)
		q.msgs[0] = nil
		q.msgs = q.msgs[1:]
		q.gone--
	}
	q.compact()
	for len(q.dedupOrder) > 0 && !now.Before(q.dedupOrder[0].expires) {
		slot := q.dedupOrder[0]
		if d, ok := q.dedup[slot.key]; ok && d.expires.Equal(slot.expires) {
			delete(q.dedup, slot.key)
		}
		q.dedupOrder[0] = dedupSlot{}
		q.dedupOrder = q.dedupOrder[1:]
	}
	for k, a := range q.attempts {
		if !now.Before(a.expires) {
			delete(q.attempts, k)
		}
	}
}

// remember records a deduplication entry for the window.
func (q *queue) remember(key string, d dedupEntry) {
	q.dedup[key] = d
	q.dedupOrder = append(q.dedupOrder, dedupSlot{key: key, expires: d.expires})
}

// purge removes every message.
func (q *queue) purge() {
	clear(q.msgs)
	q.msgs, q.gone = nil, 0
	q.byID = map[string]*message{}
	q.groups = map[string]*group{}
	q.attempts = map[string]attempt{}
}

// nextSeq returns the queue's next sequence number, as text and as a number.
func (q *queue) nextSeq() (string, uint64) {
	q.seq++
	return fmt.Sprintf("%020d", q.seq), q.seq
}

// nextChange is the earliest time after now at which a message may become receivable:
// a visibility timeout lapsing or a delay ending at the front of a group. Zero if none.
func (q *queue) nextChange(now time.Time) time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, g := range q.groups {
		for _, m := range g.msgs {
			if m.handle == "" {
				break
			}
			if m.inFlight(now) {
				consider(m.visibleAt)
			}
		}
		consider(g.msgs[0].availableAt)
	}
	return next
}

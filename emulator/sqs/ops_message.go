package sqs

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

type sendMessageInput struct {
	queueURLInput
	MessageBody             *string              `json:"MessageBody"`
	DelaySeconds            *int                 `json:"DelaySeconds"`
	MessageAttributes       map[string]attrValue `json:"MessageAttributes"`
	MessageSystemAttributes map[string]attrValue `json:"MessageSystemAttributes"`
	MessageDeduplicationID  *string              `json:"MessageDeduplicationId"`
	MessageGroupID          *string              `json:"MessageGroupId"`
}

type sendMessageOutput struct {
	MessageID                    string `json:"MessageId"`
	MD5OfMessageBody             string `json:"MD5OfMessageBody"`
	MD5OfMessageAttributes       string `json:"MD5OfMessageAttributes,omitempty"`
	MD5OfMessageSystemAttributes string `json:"MD5OfMessageSystemAttributes,omitempty"`
	SequenceNumber               string `json:"SequenceNumber,omitempty"`
}

func (h *Handler) sendMessage(r *request) (any, error) {
	return onQueue(h, r, func(q *queue, in *sendMessageInput) (any, error) {
		out, err := h.sendLocked(q, in, r.sender)
		if err != nil {
			return nil, err
		}
		return out, nil
	})
}

type sendMessageBatchInput struct {
	QueueURL string `json:"QueueUrl"`
	Entries  []struct {
		ID string `json:"Id"`
		sendMessageInput
	} `json:"Entries"`
}

type batchError struct {
	ID          string `json:"Id"`
	SenderFault bool   `json:"SenderFault"`
	Code        string `json:"Code"`
	Message     string `json:"Message,omitempty"`
}

type sendBatchResult struct {
	ID string `json:"Id"`
	sendMessageOutput
}

type sendMessageBatchOutput struct {
	Successful []sendBatchResult `json:"Successful"`
	Failed     []batchError      `json:"Failed"`
}

func (h *Handler) sendMessageBatch(r *request) (any, error) {
	var in sendMessageBatchInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	ids := make([]string, len(in.Entries))
	size := 0
	for i, e := range in.Entries {
		ids[i] = e.ID
		if e.MessageBody != nil {
			size += len(*e.MessageBody)
		}
		size += attrsSize(e.MessageAttributes)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	q, err := h.queueByURLLocked(in.QueueURL)
	if err != nil {
		return nil, err
	}
	if err := checkBatch(ids); err != nil {
		return nil, err
	}
	if size > q.cfg.maxSize {
		return nil, newErr("BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong",
			"Batch requests cannot be longer than %d bytes. You have sent %d bytes.", q.cfg.maxSize, size)
	}
	out := sendMessageBatchOutput{Successful: []sendBatchResult{}, Failed: []batchError{}}
	for _, e := range in.Entries {
		res, err := h.sendLocked(q, &e.sendMessageInput, r.sender)
		if err != nil {
			out.Failed = append(out.Failed, toBatchError(e.ID, err))
			continue
		}
		out.Successful = append(out.Successful, sendBatchResult{ID: e.ID, sendMessageOutput: res})
	}
	return out, nil
}

func toBatchError(id string, err error) batchError {
	var ae *apiError
	if errors.As(err, &ae) {
		return batchError{ID: id, SenderFault: ae.sender, Code: ae.code(), Message: ae.msg}
	}
	return batchError{ID: id, Code: "InternalError", Message: err.Error()}
}

var batchIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// checkBatch enforces the rules every batch request shares.
func checkBatch(ids []string) error {
	if len(ids) == 0 {
		return newErr("EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", "There should be at least one entry in the request.")
	}
	if len(ids) > maxBatchEntries {
		return newErr("TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
			"Maximum number of entries per request are %d. You have sent %d.", maxBatchEntries, len(ids))
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if !batchIDRE.MatchString(id) {
			return newErr("InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId",
				"A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.")
		}
		if seen[id] {
			return newErr("BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", "Id %s repeated.", id)
		}
		seen[id] = true
	}
	return nil
}

// tokenRE is what a message group id and a deduplication id may hold: 1 to 128
// alphanumeric or punctuation characters.
var tokenRE = regexp.MustCompile("^[A-Za-z0-9!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~]{1,128}$")

// sendLocked validates one message and enqueues it, or answers a duplicate with the
// first message's id. h.mu must be held.
func (h *Handler) sendLocked(q *queue, in *sendMessageInput, sender string) (sendMessageOutput, error) {
	now := h.clk.Now()
	q.expire(now)
	if in.MessageBody == nil || *in.MessageBody == "" {
		return sendMessageOutput{}, errMissing("MessageBody")
	}
	body := *in.MessageBody
	if !validBody(body) {
		return sendMessageOutput{}, newErr("InvalidMessageContents", "InvalidMessageContents",
			"Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF")
	}
	if err := checkMessageAttrs(in.MessageAttributes); err != nil {
		return sendMessageOutput{}, err
	}
	if size := len(body) + attrsSize(in.MessageAttributes); size > q.cfg.maxSize {
		return sendMessageOutput{}, errInvalidParams("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", q.cfg.maxSize)
	}
	if in.DelaySeconds != nil && *in.DelaySeconds != 0 {
		return sendMessageOutput{}, errInvalidParam("DelaySeconds", strconv.Itoa(*in.DelaySeconds),
			"The request include parameter that is not valid for this queue type")
	}
	var trace string
	for name, v := range in.MessageSystemAttributes {
		if name != "AWSTraceHeader" || v.DataType != "String" || v.StringValue == "" {
			return sendMessageOutput{}, errInvalidParams("Message system attribute name %q is invalid: only AWSTraceHeader, a String, may be sent.", name)
		}
		trace = v.StringValue
	}
	if in.MessageGroupID == nil {
		return sendMessageOutput{}, errMissing("MessageGroupId")
	}
	if !tokenRE.MatchString(*in.MessageGroupID) {
		return sendMessageOutput{}, errInvalidParam("MessageGroupId", *in.MessageGroupID,
			"MessageGroupId can only include alphanumeric and punctuation characters. 1 to 128 in length.")
	}
	var dedupID string
	switch {
	case in.MessageDeduplicationID != nil:
		dedupID = *in.MessageDeduplicationID
		if !tokenRE.MatchString(dedupID) {
			return sendMessageOutput{}, errInvalidParam("MessageDeduplicationId", dedupID,
				"MessageDeduplicationId can only include alphanumeric and punctuation characters. 1 to 128 in length.")
		}
	case q.cfg.contentDedup:
		sum := sha256.Sum256([]byte(body))
		dedupID = hex.EncodeToString(sum[:])
	default:
		return sendMessageOutput{}, errInvalidParams("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
	}

	out := sendMessageOutput{MD5OfMessageBody: md5Hex([]byte(body)), MD5OfMessageAttributes: attrsMD5(in.MessageAttributes)}
	if trace != "" {
		out.MD5OfMessageSystemAttributes = attrsMD5(in.MessageSystemAttributes)
	}
	key := dedupID
	if q.cfg.dedupPerGroup {
		key = *in.MessageGroupID + "\x00" + dedupID
	}
	if d, ok := q.dedup[key]; ok && now.Before(d.expires) {
		out.MessageID, out.SequenceNumber = d.messageID, d.seq
		return out, nil
	}
	m := &message{
		id: uuid.NewString(), body: body, group: *in.MessageGroupID, dedupID: dedupID,
		attrs: in.MessageAttributes, traceHeader: trace, senderID: sender,
		md5Body: out.MD5OfMessageBody, sentAt: now, enqueuedAt: now, availableAt: now.Add(q.cfg.delay),
	}
	m.seq, m.seqNum = q.nextSeq()
	q.add(m)
	q.remember(key, dedupEntry{messageID: m.id, seq: m.seq, expires: now.Add(dedupWindow)})
	h.notifyLocked()
	out.MessageID, out.SequenceNumber = m.id, m.seq
	return out, nil
}

// validBody reports whether s holds only the characters SQS accepts.
func validBody(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF:
		case r >= 0xE000 && r <= 0xFFFD:
		case r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

var attrNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,256}$`)

// checkMessageAttrs enforces the message attribute rules: at most 10, names of
// alphanumerics, '_', '-' and '.', not starting with AWS. or Amazon., no leading,
// trailing or doubled '.', a type of String, Number or Binary (with an optional
// custom suffix) and a value of that type.
func checkMessageAttrs(attrs map[string]attrValue) error {
	if len(attrs) > 10 {
		return errInvalidParams("Number of message attributes [%d] exceeds the allowed maximum [10].", len(attrs))
	}
	for name, v := range attrs {
		lower := strings.ToLower(name)
		if !attrNameRE.MatchString(name) || strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") ||
			strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
			return errInvalidParams("Message attribute name '%s' is invalid.", name)
		}
		if v.DataType == "" {
			return errInvalidParams("The message attribute '%s' must contain non-empty message attribute type.", name)
		}
		base, _, _ := strings.Cut(v.DataType, ".")
		switch base {
		case "String":
			if v.StringValue == "" {
				return errInvalidParams("The message attribute '%s' must contain non-empty message attribute value for message attribute type 'String'.", name)
			}
		case "Number":
			if _, err := strconv.ParseFloat(v.StringValue, 64); err != nil {
				return errInvalidParams("Can't cast the value of message (user) attribute '%s' to a number.", name)
			}
		case "Binary":
			if len(v.BinaryValue) == 0 {
				return errInvalidParams("The message attribute '%s' must contain non-empty message attribute value for message attribute type 'Binary'.", name)
			}
		default:
			return errInvalidParams("The type of message (user) attribute '%s' is invalid. You must use only the following supported type prefixes: Binary, Number, String.", name)
		}
	}
	return nil
}

func attrsSize(attrs map[string]attrValue) int {
	n := 0
	for name, v := range attrs {
		n += len(name) + len(v.DataType) + len(v.StringValue) + len(v.BinaryValue)
	}
	return n
}

func md5Hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// attrsMD5 is the digest SQS gives message attributes: for each attribute in name
// order, the name, the data type, a transport byte (1 for strings, 2 for binary) and
// the value, each length-prefixed with 4 big-endian bytes. Empty for no attributes.
func attrsMD5(attrs map[string]attrValue) string {
	if len(attrs) == 0 {
		return ""
	}
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf []byte
	put := func(b []byte) {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(b)))
		buf = append(buf, b...)
	}
	for _, n := range names {
		v := attrs[n]
		put([]byte(n))
		put([]byte(v.DataType))
		if strings.HasPrefix(v.DataType, "Binary") {
			buf = append(buf, 2)
			put(v.BinaryValue)
		} else {
			buf = append(buf, 1)
			put([]byte(v.StringValue))
		}
	}
	return md5Hex(buf)
}

// Receipt handles are opaque to clients: the queue, the message, which receive of it
// and a random part, so each receive's handle differs.
func newHandle(q *queue, m *message) string {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	raw := q.name + "\n" + m.id + "\n" + strconv.Itoa(m.receiveCount) + "\n" + hex.EncodeToString(nonce[:])
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// messageByHandleLocked finds the message a receipt handle names. A handle that does not
// decode, or names another queue, is invalid; a message no longer in the queue is
// returned as nil with no error.
func messageByHandleLocked(q *queue, h string) (*message, error) {
	raw, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		return nil, errReceiptHandle(h)
	}
	parts := strings.Split(string(raw), "\n")
	if len(parts) != 4 {
		return nil, errReceiptHandle(h)
	}
	if parts[0] != q.name {
		return nil, newErr("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", "The receipt handle %q is not valid for this queue.", h)
	}
	return q.byID[parts[1]], nil
}

type receiveMessageInput struct {
	QueueURL                    string   `json:"QueueUrl"`
	AttributeNames              []string `json:"AttributeNames"`
	MessageSystemAttributeNames []string `json:"MessageSystemAttributeNames"`
	MessageAttributeNames       []string `json:"MessageAttributeNames"`
	MaxNumberOfMessages         *int     `json:"MaxNumberOfMessages"`
	VisibilityTimeout           *int     `json:"VisibilityTimeout"`
	WaitTimeSeconds             *int     `json:"WaitTimeSeconds"`
	ReceiveRequestAttemptID     string   `json:"ReceiveRequestAttemptId"`
}

type messageOutput struct {
	MessageID              string               `json:"MessageId"`
	ReceiptHandle          string               `json:"ReceiptHandle"`
	MD5OfBody              string               `json:"MD5OfBody"`
	Body                   string               `json:"Body"`
	Attributes             map[string]string    `json:"Attributes,omitempty"`
	MessageAttributes      map[string]attrValue `json:"MessageAttributes,omitempty"`
	MD5OfMessageAttributes string               `json:"MD5OfMessageAttributes,omitempty"`
}

type receiveMessageOutput struct {
	Messages []messageOutput `json:"Messages,omitempty"`
}

var systemAttrNames = []string{
	"All", "SenderId", "SentTimestamp", "ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp",
	"SequenceNumber", "MessageDeduplicationId", "MessageGroupId", "AWSTraceHeader", "DeadLetterQueueSourceArn",
}

func (h *Handler) receiveMessage(r *request) (any, error) {
	var in receiveMessageInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	limit := 1
	if in.MaxNumberOfMessages != nil {
		limit = *in.MaxNumberOfMessages
		if limit < 1 || limit > 10 {
			return nil, errInvalidParam("MaxNumberOfMessages", strconv.Itoa(limit), "Must be between 1 and 10, if provided.")
		}
	}
	if in.VisibilityTimeout != nil && (*in.VisibilityTimeout < 0 || *in.VisibilityTimeout > 43200) {
		return nil, errInvalidParam("VisibilityTimeout", strconv.Itoa(*in.VisibilityTimeout), "Must be between 0 and 43200, if provided.")
	}
	if in.WaitTimeSeconds != nil && (*in.WaitTimeSeconds < 0 || *in.WaitTimeSeconds > 20) {
		return nil, errInvalidParam("WaitTimeSeconds", strconv.Itoa(*in.WaitTimeSeconds), "Must be >= 0 and <= 20, if provided.")
	}
	sysNames := append(append([]string(nil), in.AttributeNames...), in.MessageSystemAttributeNames...)
	for _, n := range sysNames {
		if !slices.Contains(systemAttrNames, n) {
			return nil, newErr("InvalidAttributeName", "InvalidAttributeName", "Unknown Attribute %s.", n)
		}
	}
	if in.ReceiveRequestAttemptID != "" && !tokenRE.MatchString(in.ReceiveRequestAttemptID) {
		return nil, errInvalidParam("ReceiveRequestAttemptId", in.ReceiveRequestAttemptID,
			"ReceiveRequestAttemptId can only include alphanumeric and punctuation characters. 1 to 128 in length.")
	}

	h.mu.Lock()
	q, err := h.queueByURLLocked(in.QueueURL)
	if err != nil {
		h.mu.Unlock()
		return nil, err
	}
	wait := q.cfg.wait
	if in.WaitTimeSeconds != nil {
		wait = time.Duration(*in.WaitTimeSeconds) * time.Second
	}
	deadline := h.clk.Now().Add(wait)
	for {
		now := h.clk.Now()
		if h.queues[q.name] != q {
			h.mu.Unlock()
			return nil, errNoQueue()
		}
		visibility := q.cfg.visibility
		if in.VisibilityTimeout != nil {
			visibility = time.Duration(*in.VisibilityTimeout) * time.Second
		}
		got := h.receiveLocked(q, now, limit, visibility, in.ReceiveRequestAttemptID)
		if len(got) > 0 || !now.Before(deadline) {
			out := receiveMessageOutput{}
			for _, m := range got {
				out.Messages = append(out.Messages, renderMessage(m, sysNames, in.MessageAttributeNames))
			}
			h.mu.Unlock()
			return out, nil
		}
		wake := deadline
		if next := q.nextChange(now); !next.IsZero() && next.Before(wake) {
			wake = next
		}
		changed := h.changed
		h.mu.Unlock()
		timer := h.clk.NewTimer(wake.Sub(now))
		select {
		case <-changed:
		case <-timer.C():
		case <-r.ctx.Done():
			timer.Stop()
			return nil, r.ctx.Err()
		}
		timer.Stop()
		h.mu.Lock()
	}
}

// receiveLocked takes up to limit messages: as many of one group as are available, in
// order, before the next group; a group with a message in flight is skipped. A message
// received maxReceiveCount times moves to the dead-letter queue instead. A repeated
// attempt id within its window returns the same messages and handles while they are
// all still in flight under them. h.mu must be held.
func (h *Handler) receiveLocked(q *queue, now time.Time, limit int, visibility time.Duration, attemptID string) []*message {
	q.expire(now)
	if attemptID != "" {
		if a, ok := q.attempts[attemptID]; ok {
			if same := q.attemptMessages(a, now); same != nil {
				for _, m := range same {
					m.visibleAt = now.Add(visibility)
				}
				return same
			}
		}
	}
	// The groups that can give a message now, oldest front message first.
	var ready []*group
	for _, g := range q.groups {
		if !g.blocked(now) && !now.Before(g.msgs[0].availableAt) {
			ready = append(ready, g)
		}
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i].msgs[0].seqNum < ready[j].msgs[0].seqNum })
	var got []*message
	for _, g := range ready {
		for i := 0; i < len(g.msgs) && len(got) < limit; {
			m := g.msgs[i]
			if now.Before(m.availableAt) {
				break
			}
			if p := q.cfg.redrive; p != nil && m.receiveCount >= p.maxCount {
				if dlq := h.queueByArnLocked(p.targetArn); dlq != nil {
					h.redriveLocked(q, dlq, m, now) // takes m out of g.msgs: i is the next one now
					continue
				}
			}
			i++
			m.receiveCount++
			if m.firstReceive.IsZero() {
				m.firstReceive = now
			}
			m.receivedAt = now
			m.visibleAt = now.Add(visibility)
			m.handle = newHandle(q, m)
			got = append(got, m)
		}
		if len(got) == limit {
			break
		}
	}
	if attemptID != "" && len(got) > 0 {
		a := attempt{expires: now.Add(attemptWindow)}
		for _, m := range got {
			a.handles = append(a.handles, m.handle)
		}
		q.attempts[attemptID] = a
	}
	return got
}

// attemptMessages returns the messages of an earlier attempt if every one is still in
// flight under the handle that attempt gave out, else nil.
func (q *queue) attemptMessages(a attempt, now time.Time) []*message {
	var out []*message
	for _, h := range a.handles {
		m, err := messageByHandleLocked(q, h)
		if err != nil || m == nil || m.handle != h || !m.inFlight(now) {
			return nil
		}
		out = append(out, m)
	}
	return out
}

// redriveLocked moves m from q to the dead-letter queue dlq. As for FIFO queues on the
// service, its retention in dlq counts from the move.
func (h *Handler) redriveLocked(q, dlq *queue, m *message, now time.Time) {
	q.remove(m)
	moved := &message{
		id: m.id, body: m.body, group: m.group, dedupID: m.dedupID, attrs: m.attrs,
		traceHeader: m.traceHeader, senderID: m.senderID, md5Body: m.md5Body,
		sentAt: m.sentAt, enqueuedAt: now, availableAt: now, dlqSource: q.arn,
	}
	moved.seq, moved.seqNum = dlq.nextSeq()
	dlq.add(moved)
	h.notifyLocked()
}

// renderMessage shows m with the system and message attributes asked for.
func renderMessage(m *message, sysNames, attrNames []string) messageOutput {
	out := messageOutput{MessageID: m.id, ReceiptHandle: m.handle, MD5OfBody: m.md5Body, Body: m.body}
	all := slices.Contains(sysNames, "All")
	sys := map[string]string{
		"SenderId":                         m.senderID,
		"SentTimestamp":                    strconv.FormatInt(m.sentAt.UnixMilli(), 10),
		"ApproximateReceiveCount":          strconv.Itoa(m.receiveCount),
		"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstReceive.UnixMilli(), 10),
		"SequenceNumber":                   m.seq,
		"MessageDeduplicationId":           m.dedupID,
		"MessageGroupId":                   m.group,
		"AWSTraceHeader":                   m.traceHeader,
		"DeadLetterQueueSourceArn":         m.dlqSource,
	}
	for k, v := range sys {
		if v != "" && (all || slices.Contains(sysNames, k)) {
			if out.Attributes == nil {
				out.Attributes = map[string]string{}
			}
			out.Attributes[k] = v
		}
	}
	for name, v := range m.attrs {
		if wantAttr(attrNames, name) {
			if out.MessageAttributes == nil {
				out.MessageAttributes = map[string]attrValue{}
			}
			out.MessageAttributes[name] = v
		}
	}
	out.MD5OfMessageAttributes = attrsMD5(out.MessageAttributes)
	return out
}

// wantAttr matches a message attribute name against MessageAttributeNames: "All" or
// ".*" for every one, "prefix.*" for a prefix, else the exact name.
func wantAttr(patterns []string, name string) bool {
	for _, p := range patterns {
		switch {
		case p == "All" || p == ".*":
			return true
		case strings.HasSuffix(p, ".*"):
			if strings.HasPrefix(name, strings.TrimSuffix(p, "*")) {
				return true
			}
		case p == name:
			return true
		}
	}
	return false
}

type deleteMessageInput struct {
	queueURLInput
	ReceiptHandle string `json:"ReceiptHandle"`
}

func (h *Handler) deleteMessage(r *request) (any, error) {
	return onQueue(h, r, func(q *queue, in *deleteMessageInput) (any, error) {
		return nil, h.deleteLocked(q, in.ReceiptHandle)
	})
}

// deleteLocked deletes the message of receipt handle rh, which must be the newest
// handle of a message still in flight; deleting a message that is already gone
// succeeds. h.mu must be held.
func (h *Handler) deleteLocked(q *queue, rh string) error {
	if rh == "" {
		return errMissing("ReceiptHandle")
	}
	now := h.clk.Now()
	q.expire(now)
	m, err := messageByHandleLocked(q, rh)
	if err != nil {
		return err
	}
	if m == nil {
		return nil
	}
	if m.handle != rh || !m.inFlight(now) {
		return errReceiptExpired(rh)
	}
	q.remove(m)
	h.notifyLocked()
	return nil
}

type batchEntry struct {
	ID                string `json:"Id"`
	ReceiptHandle     string `json:"ReceiptHandle"`
	VisibilityTimeout *int   `json:"VisibilityTimeout"`
}

type batchInput struct {
	queueURLInput
	Entries []batchEntry `json:"Entries"`
}

type batchIDResult struct {
	ID string `json:"Id"`
}

type batchOutput struct {
	Successful []batchIDResult `json:"Successful"`
	Failed     []batchError    `json:"Failed"`
}

// runBatch applies fn to each entry of a batch request.
func (h *Handler) runBatch(r *request, fn func(q *queue, e batchEntry) error) (any, error) {
	return onQueue(h, r, func(q *queue, in *batchInput) (any, error) { return runEntries(q, in.Entries, fn) })
}

// runEntries applies fn to each entry, collecting the results of a batch request.
func runEntries(q *queue, entries []batchEntry, fn func(q *queue, e batchEntry) error) (any, error) {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	if err := checkBatch(ids); err != nil {
		return nil, err
	}
	out := batchOutput{Successful: []batchIDResult{}, Failed: []batchError{}}
	for _, e := range entries {
		if err := fn(q, e); err != nil {
			out.Failed = append(out.Failed, toBatchError(e.ID, err))
			continue
		}
		out.Successful = append(out.Successful, batchIDResult{ID: e.ID})
	}
	return out, nil
}

func (h *Handler) deleteMessageBatch(r *request) (any, error) {
	return h.runBatch(r, func(q *queue, e batchEntry) error { return h.deleteLocked(q, e.ReceiptHandle) })
}

type changeVisibilityInput struct {
	queueURLInput
	ReceiptHandle     string `json:"ReceiptHandle"`
	VisibilityTimeout *int   `json:"VisibilityTimeout"`
}

func (h *Handler) changeMessageVisibility(r *request) (any, error) {
	return onQueue(h, r, func(q *queue, in *changeVisibilityInput) (any, error) {
		return nil, h.changeVisibilityLocked(q, in.ReceiptHandle, in.VisibilityTimeout)
	})
}

func (h *Handler) changeMessageVisibilityBatch(r *request) (any, error) {
	return h.runBatch(r, func(q *queue, e batchEntry) error {
		return h.changeVisibilityLocked(q, e.ReceiptHandle, e.VisibilityTimeout)
	})
}

// changeVisibilityLocked sets the visibility timeout of an in-flight message to
// seconds from now, at most 12 hours after the receive. h.mu must be held.
func (h *Handler) changeVisibilityLocked(q *queue, rh string, seconds *int) error {
	if rh == "" {
		return errMissing("ReceiptHandle")
	}
	if seconds == nil {
		return errMissing("VisibilityTimeout")
	}
	if *seconds < 0 || *seconds > 43200 {
		return errInvalidParam("VisibilityTimeout", strconv.Itoa(*seconds), "Must be between 0 and 43200.")
	}
	now := h.clk.Now()
	q.expire(now)
	m, err := messageByHandleLocked(q, rh)
	if err != nil {
		return err
	}
	if m == nil {
		return errNotInflight()
	}
	if m.handle != rh {
		return errReceiptExpired(rh)
	}
	if !m.inFlight(now) {
		return errNotInflight()
	}
	until := now.Add(time.Duration(*seconds) * time.Second)
	if until.Sub(m.receivedAt) > maxVisibility {
		return errInvalidParam("VisibilityTimeout", strconv.Itoa(*seconds),
			"Total VisibilityTimeout for the message is beyond the limit [43200 seconds]")
	}
	m.visibleAt = until
	h.notifyLocked()
	return nil
}

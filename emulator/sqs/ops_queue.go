package sqs

import (
	"net/url"
	"sort"
	"strings"
)

// queueURL is the URL of queue name as seen by a client that reached host.
func (h *Handler) queueURL(host, name string) string {
	return (&url.URL{Scheme: "http", Host: host, Path: "/" + h.account + "/" + name}).String()
}

func (h *Handler) arn(name string) string {
	return "arn:aws:sqs:" + h.region + ":" + h.account + ":" + name
}

// queueByURLLocked finds the queue a QueueUrl names: the last path segment is its name,
// and the one before it, if any, must be the account. h.mu must be held.
func (h *Handler) queueByURLLocked(raw string) (*queue, error) {
	if raw == "" {
		return nil, errMissing("QueueUrl")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errInvalidParam("QueueUrl", raw, "Invalid URL.")
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	name := parts[len(parts)-1]
	if len(parts) > 1 && parts[len(parts)-2] != h.account {
		return nil, errNoQueue()
	}
	q, ok := h.queues[name]
	if !ok {
		return nil, errNoQueue()
	}
	return q, nil
}

func (h *Handler) queueByArnLocked(arn string) *queue {
	name, ok := strings.CutPrefix(arn, "arn:aws:sqs:"+h.region+":"+h.account+":")
	if !ok {
		return nil
	}
	return h.queues[name]
}

type createQueueInput struct {
	QueueName  string            `json:"QueueName"`
	Attributes map[string]string `json:"Attributes"`
	Tags       map[string]string `json:"tags"`
}

type queueURLOutput struct {
	QueueURL string `json:"QueueUrl"`
}

func (h *Handler) createQueue(r *request) (any, error) {
	var in createQueueInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	if in.QueueName == "" {
		return nil, errMissing("QueueName")
	}
	if in.Attributes["FifoQueue"] != "true" {
		if strings.HasSuffix(in.QueueName, fifoSuffix) || in.Attributes["FifoQueue"] != "" && in.Attributes["FifoQueue"] != "false" {
			return nil, errInvalidParams("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length (a name ending in .fifo needs the attribute FifoQueue=true).")
		}
		return nil, errUnsupported("standard queues are not modeled by this local SQS: create a FIFO queue (attribute FifoQueue=true, name ending in .fifo)")
	}
	if err := checkQueueName(in.QueueName); err != nil {
		return nil, err
	}
	if len(in.Tags) > 0 {
		return nil, errUnsupported("queue tags are not modeled by this local SQS")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clk.Now()
	attrs, cfg, err := mergeAttrs(attrDefaults, in.Attributes, true, h.queueByArnLocked)
	if err != nil {
		return nil, err
	}
	if q, ok := h.queues[in.QueueName]; ok {
		if !q.sameAttrs(in.Attributes) {
			return nil, newErr("QueueNameExists", "QueueAlreadyExists", "A queue already exists with the same name and a different value for an attribute.")
		}
		return queueURLOutput{h.queueURL(r.host, in.QueueName)}, nil
	}
	if at, ok := h.deleted[in.QueueName]; ok && now.Sub(at) < recreateInterval {
		return nil, newErr("QueueDeletedRecently", "AWS.SimpleQueueService.QueueDeletedRecently",
			"You must wait 60 seconds after deleting a queue before you can create another with the same name.")
	}
	h.queues[in.QueueName] = &queue{
		name: in.QueueName, arn: h.arn(in.QueueName), created: now, modified: now,
		attrs: attrs, cfg: cfg,
		byID: map[string]*message{}, groups: map[string]*group{}, dedup: map[string]dedupEntry{}, attempts: map[string]attempt{},
	}
	return queueURLOutput{h.queueURL(r.host, in.QueueName)}, nil
}

type getQueueURLInput struct {
	QueueName              string `json:"QueueName"`
	QueueOwnerAWSAccountID string `json:"QueueOwnerAWSAccountId"`
}

func (h *Handler) getQueueURL(r *request) (any, error) {
	var in getQueueURLInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	if in.QueueName == "" {
		return nil, errMissing("QueueName")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.queues[in.QueueName]; !ok || (in.QueueOwnerAWSAccountID != "" && in.QueueOwnerAWSAccountID != h.account) {
		return nil, errNoQueue()
	}
	return queueURLOutput{h.queueURL(r.host, in.QueueName)}, nil
}

type getQueueAttributesInput struct {
	queueURLInput
	AttributeNames []string `json:"AttributeNames"`
}

type attributesOutput struct {
	Attributes map[string]string `json:"Attributes,omitempty"`
}

func (h *Handler) getQueueAttributes(r *request) (any, error) {
	return onQueue(h, r, func(q *queue, in *getQueueAttributesInput) (any, error) {
		attrs, err := q.visibleAttrs(in.AttributeNames, h.clk.Now())
		if err != nil {
			return nil, err
		}
		return attributesOutput{attrs}, nil
	})
}

type setQueueAttributesInput struct {
	QueueURL   string            `json:"QueueUrl"`
	Attributes map[string]string `json:"Attributes"`
}

func (h *Handler) setQueueAttributes(r *request) (any, error) {
	var in setQueueAttributesInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	if len(in.Attributes) == 0 {
		return nil, errMissing("Attribute.Name")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	q, err := h.queueByURLLocked(in.QueueURL)
	if err != nil {
		return nil, err
	}
	attrs, cfg, err := mergeAttrs(q.attrs, in.Attributes, false, h.queueByArnLocked)
	if err != nil {
		return nil, err
	}
	q.attrs, q.cfg, q.modified = attrs, cfg, h.clk.Now()
	h.notifyLocked()
	return nil, nil
}

type listQueuesInput struct {
	QueueNamePrefix string `json:"QueueNamePrefix"`
	MaxResults      *int   `json:"MaxResults"`
	NextToken       string `json:"NextToken"`
}

type listQueuesOutput struct {
	QueueUrls []string `json:"QueueUrls,omitempty"`
	NextToken string   `json:"NextToken,omitempty"`
}

func (h *Handler) listQueues(r *request) (any, error) {
	var in listQueuesInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	limit := 1000
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > 1000 {
			return nil, errInvalidParam("MaxResults", "", "MaxResults must be an integer between 1 and 1000.")
		}
		limit = *in.MaxResults
	} else if in.NextToken != "" {
		return nil, errInvalidParams("NextToken needs MaxResults.")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var names []string
	for name := range h.queues {
		if strings.HasPrefix(name, in.QueueNamePrefix) && name > in.NextToken {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out listQueuesOutput
	if len(names) > limit {
		names = names[:limit]
		if in.MaxResults != nil {
			out.NextToken = names[len(names)-1]
		}
	}
	for _, n := range names {
		out.QueueUrls = append(out.QueueUrls, h.queueURL(r.host, n))
	}
	return out, nil
}

// queueURLInput is the QueueUrl of a request on one queue; the inputs of such requests embed it.
type queueURLInput struct {
	QueueURL string `json:"QueueUrl"`
}

func (i *queueURLInput) queueURL() string { return i.QueueURL }

// onQueue decodes r's input and runs fn, under h.mu, on the queue the input names.
func onQueue[In any, P interface {
	*In
	queueURL() string
}](h *Handler, r *request, fn func(q *queue, in P) (any, error)) (any, error) {
	in := P(new(In))
	if err := r.decode(in); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	q, err := h.queueByURLLocked(in.queueURL())
	if err != nil {
		return nil, err
	}
	return fn(q, in)
}

func (h *Handler) deleteQueue(r *request) (any, error) {
	return onQueue(h, r, func(q *queue, _ *queueURLInput) (any, error) {
		delete(h.queues, q.name)
		h.deleted[q.name] = h.clk.Now()
		h.notifyLocked()
		return nil, nil
	})
}

func (h *Handler) purgeQueue(r *request) (any, error) {
	return onQueue(h, r, func(q *queue, _ *queueURLInput) (any, error) { return h.purgeLocked(q) })
}

// purgeLocked empties q, at most once a minute. h.mu must be held.
func (h *Handler) purgeLocked(q *queue) (any, error) {
	now := h.clk.Now()
	if !q.purged.IsZero() && now.Sub(q.purged) < purgeInterval {
		return nil, newErr("PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress",
			"Only one PurgeQueue operation on %s is allowed every 60 seconds.", q.name)
	}
	q.purged = now
	q.purge()
	return nil, nil
}

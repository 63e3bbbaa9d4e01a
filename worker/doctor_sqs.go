package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sqsadapter"
)

// sqsDoctorMinReleases is how many times a message may be received and released without being
// handled (a group no slot took in time, a session closed before settling, a crash) before the
// max receive count check warns: each receive counts towards the redrive.
const sqsDoctorMinReleases = 3

// sqsQueueReady is how long SQS asks a caller to wait after creating a queue before using it.
const sqsQueueReady = time.Second

// sqsRights are the IAM actions a worker needs on its queue and on the queue's dead-letter queue
// (the single calls' actions grant the batch calls too).
const sqsRights = "sqs:GetQueueAttributes, sqs:ReceiveMessage, sqs:ChangeMessageVisibility and sqs:DeleteMessage " +
	"on the queue; sqs:GetQueueUrl and sqs:SendMessage on its dead-letter queue (docs/security.md lists " +
	"what the operator commands need)"

// sqsErrorClass sorts an SQS answer for the doctor.
type sqsErrorClass int

const (
	sqsAnswered       sqsErrorClass = iota // no error
	sqsMissing                             // the queue does not exist
	sqsDenied                              // the credentials are valid but may not make the call
	sqsBadCredentials                      // the credentials are refused
	sqsNoAnswer                            // no answer: the network, the endpoint, no credentials found
	sqsOtherError                          // an answer the doctor does not know
)

// classifySQS sorts err, an SQS call's error.
func classifySQS(err error) sqsErrorClass {
	if err == nil {
		return sqsAnswered
	}
	var missing *types.QueueDoesNotExist
	if errors.As(err, &missing) {
		return sqsMissing
	}
	var api smithy.APIError
	if !errors.As(err, &api) {
		return sqsNoAnswer
	}
	switch code := api.ErrorCode(); {
	case code == "QueueDoesNotExist", strings.HasSuffix(code, "NonExistentQueue"):
		return sqsMissing
	case code == "AccessDenied", code == "AccessDeniedException":
		return sqsDenied
	case code == "InvalidClientTokenId", code == "SignatureDoesNotMatch", code == "UnrecognizedClientException",
		code == "MissingAuthenticationToken", code == "InvalidSecurity", code == "ExpiredToken",
		code == "IncompleteSignature", code == "InvalidAccessKeyId":
		return sqsBadCredentials
	}
	return sqsOtherError
}

// runSQS runs the checks of a worker with ProviderSQS: the endpoint and the credentials, the
// queue (FIFO, its dead-letter queue, its redrive's max receive count), the group lock against
// the settings, the state store, then a round trip of the worker's SQS calls on a scratch queue.
// It does not use Connect: a Source would read the queue's attributes and fail as one line.
func (d *doctor) runSQS(ctx context.Context) {
	cfg := d.cfg
	client, err := newSQSClient(ctx, cfg.SQS)
	if err != nil {
		d.add("connection and credentials", DoctorFail, err.Error(), "set AWS_REGION (or a profile with a region) and the credentials the AWS chain reads")
		return
	}
	pool, own, poolErr := openPool(ctx, cfg.Database)
	d.conn = &Connections{SQS: client, Pool: pool, ownPool: own}
	defer d.conn.Close(ctx)

	policy, ok := d.checkQueue(ctx, client)
	if poolErr != nil {
		d.add("state store: database reachable", DoctorFail, poolErr.Error(), "correct SEQBUS_DATABASE_URL")
		d.add("state store: migrations applied", DoctorSkip, "the database cannot be reached", "")
	} else {
		d.checkStore(ctx)
	}
	if !ok {
		return
	}
	d.sqsRoundTrip(ctx, client, policy)
}

// checkQueue adds the lines of the endpoint, the queue and its dead-letter queue. It returns the
// queue's redrive policy, and false when the round trip has nothing to compare with (the
// endpoint did not answer, the queue is missing or cannot be read).
func (d *doctor) checkQueue(ctx context.Context, client *sqs.Client) (sqsadapter.RedrivePolicy, bool) {
	cfg := d.cfg
	qctx, cancel := context.WithTimeout(ctx, d.step)
	out, err := client.GetQueueAttributes(qctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(cfg.SQSQueueURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	cancel()
	name := cfg.EntityName()
	switch classifySQS(err) {
	case sqsNoAnswer:
		d.add("connection and credentials", DoctorFail, fmt.Sprintf("the SQS endpoint did not answer: %v", err),
			"check AWS_REGION (and AWS_ENDPOINT_URL_SQS, when set), that the endpoint is reachable from here over HTTPS, and that the AWS chain finds credentials here")
		return sqsadapter.RedrivePolicy{}, false
	case sqsBadCredentials:
		d.add("connection and credentials", DoctorFail, fmt.Sprintf("SQS refused the credentials: %v", err),
			"check the credentials the AWS chain finds here (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, web identity, the task or instance role): a wrong or expired key is refused this way")
		return sqsadapter.RedrivePolicy{}, false
	default:
		d.add("connection and credentials", DoctorPass, "the SQS endpoint answered and accepted the credentials", "")
	}
	d.add("rights", DoctorSkip, "SQS shows a right only by a call that uses it; the worker needs "+sqsRights,
		"grant them to the worker's identity; the round trip below makes the worker's calls on a scratch queue, where the rights may differ")
	switch classifySQS(err) {
	case sqsAnswered:
	case sqsMissing:
		d.add("queue exists", DoctorFail, fmt.Sprintf("%s does not exist: %v", cfg.SQSQueueURL, err),
			"correct SEQBUS_SQS_QUEUE_URL, or create the queue (FIFO, with a RedrivePolicy to a FIFO dead-letter queue)")
		return sqsadapter.RedrivePolicy{}, false
	case sqsDenied:
		d.add("queue exists", DoctorFail, fmt.Sprintf("its attributes could not be read: %v", err),
			"grant sqs:GetQueueAttributes on the queue: the worker reads its attributes at start")
		return sqsadapter.RedrivePolicy{}, false
	default:
		d.add("queue exists", DoctorFail, fmt.Sprintf("its attributes could not be read: %v", err), "")
		return sqsadapter.RedrivePolicy{}, false
	}
	attrs := out.Attributes
	d.add("queue exists", DoctorPass, name, "")
	if attrs[string(types.QueueAttributeNameFifoQueue)] != "true" {
		d.add("queue is FIFO", DoctorFail, "a standard queue keeps no order; the worker refuses to start on it",
			"use a FIFO queue (its name ends in .fifo; a queue cannot be made FIFO after it is created)")
	} else {
		dedup := "off: every send must carry a deduplication id, which the seqbus sender and the outbox relay set"
		if attrs[string(types.QueueAttributeNameContentBasedDeduplication)] == "true" {
			dedup = "on"
		}
		d.add("queue is FIFO", DoctorPass, "FIFO, content-based deduplication "+dedup, "")
	}
	policy, ok := d.checkDeadLetterQueue(ctx, client, attrs[string(types.QueueAttributeNameRedrivePolicy)])
	if ok {
		d.checkMaxReceiveCount(policy.MaxReceiveCount)
	} else {
		d.add("queue max receive count", DoctorSkip, "the queue has no usable redrive policy", "")
	}
	d.checkGroupLock()
	return policy, true
}

// checkDeadLetterQueue adds the line of the queue's redrive policy and its dead-letter queue.
func (d *doctor) checkDeadLetterQueue(ctx context.Context, client *sqs.Client, raw string) (sqsadapter.RedrivePolicy, bool) {
	const check = "queue dead-letter queue"
	const action = `set the queue's RedrivePolicy to {"deadLetterTargetArn":"<a FIFO queue's ARN>","maxReceiveCount":50}`
	if raw == "" {
		d.add(check, DoctorFail, "the queue has no RedrivePolicy: the worker dead-letters poison messages there and refuses to start without one", action)
		return sqsadapter.RedrivePolicy{}, false
	}
	p, err := sqsadapter.ParseRedrivePolicy(raw)
	if err != nil {
		d.add(check, DoctorFail, err.Error(), action)
		return sqsadapter.RedrivePolicy{}, false
	}
	qctx, cancel := context.WithTimeout(ctx, d.step)
	defer cancel()
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(p.Name)}
	if p.Account != "" {
		in.QueueOwnerAWSAccountId = aws.String(p.Account)
	}
	u, err := client.GetQueueUrl(qctx, in)
	if err != nil {
		action := "create the dead-letter queue (FIFO), or correct the RedrivePolicy's deadLetterTargetArn"
		if classifySQS(err) == sqsDenied {
			action = "grant sqs:GetQueueUrl on the dead-letter queue: the worker looks it up at start"
		}
		d.add(check, DoctorFail, fmt.Sprintf("%s: %v", p.DeadLetterTargetARN, err), action)
		return p, false
	}
	dlqURL := aws.ToString(u.QueueUrl)
	out, err := client.GetQueueAttributes(qctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(dlqURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameFifoQueue, types.QueueAttributeNameRedrivePolicy}})
	switch {
	case err != nil:
		d.add(check, DoctorWarn, fmt.Sprintf("%s: its attributes could not be read: %v", p.Name, err),
			"grant sqs:GetQueueAttributes on the dead-letter queue: `worker dlq` counts its messages")
	case out.Attributes[string(types.QueueAttributeNameFifoQueue)] != "true":
		d.add(check, DoctorFail, p.Name+" is not a FIFO queue: the dead letters of a FIFO queue go to a FIFO queue", "make the dead-letter queue a FIFO queue")
		return p, false
	case out.Attributes[string(types.QueueAttributeNameRedrivePolicy)] != "":
		d.add(check, DoctorWarn, p.Name+" has a RedrivePolicy of its own: `worker dlq list` reads by receiving, so each listing counts towards it",
			"remove the dead-letter queue's RedrivePolicy")
	default:
		d.add(check, DoctorPass, p.Name+" (FIFO)", "")
	}
	return p, true
}

// checkMaxReceiveCount warns when the redrive would move a message to the dead-letter queue
// behind the worker's back after a few releases: its first receive, the released retries (each
// receives it again) and sqsDoctorMinReleases more. SQS moves it without a reason, and the
// group waits on the gap it leaves.
func (d *doctor) checkMaxReceiveCount(maxReceive int) {
	need, why := d.deliveriesNeeded("receive", sqsDoctorMinReleases, "releases")
	if maxReceive < need {
		d.add("queue max receive count", DoctorWarn,
			fmt.Sprintf("%d: every receive counts, and SQS moves a message to the dead-letter queue without a reason when the count runs out; %d would cover %s", maxReceive, need, why),
			fmt.Sprintf("raise the RedrivePolicy's maxReceiveCount to at least %d (50 leaves room for crashes)", need))
		return
	}
	d.add("queue max receive count", DoctorPass, fmt.Sprintf("%d (at least %d: %s)", maxReceive, need, why), "")
}

// checkGroupLock compares the lock the worker takes on a group (the visibility timeout it sets
// on each receive) with SEQBUS_LOCK_RENEW_INTERVAL.
func (d *doctor) checkGroupLock() {
	d.checkLock("group lock", "the visibility timeout the worker sets on each receive", "group", sqsadapter.DefaultVisibility)
}

// sqsRoundTrip makes the worker's SQS calls, each a line, on a scratch FIFO queue and its
// dead-letter queue, created with the queue's max receive count and deleted afterwards.
func (d *doctor) sqsRoundTrip(ctx context.Context, client *sqs.Client, policy sqsadapter.RedrivePolicy) {
	name := DoctorScratchPrefix + scratchSuffix()
	cctx, cancel := context.WithTimeout(ctx, d.step)
	queueURL, dlqURL, err := sqsadapter.CreateFIFO(cctx, client, name, max(policy.MaxReceiveCount, 1+sqsDoctorMinReleases))
	cancel()
	if err != nil {
		if classifySQS(err) == sqsDenied {
			d.add("round trip: scratch queue", DoctorSkip, fmt.Sprintf("the credentials may not create a queue: %v", err),
				"run `worker doctor` with credentials that may create and delete queues (sqs:CreateQueue, sqs:DeleteQueue) to see the worker's calls answered")
			return
		}
		d.add("round trip: scratch queue", DoctorFail, err.Error(), "")
		return
	}
	d.add("round trip: scratch queue", DoctorPass, fmt.Sprintf("created %s.fifo and %s-dlq.fifo", name, name), "")
	// SQS asks for a second between creating a queue and using it.
	select {
	case <-time.After(sqsQueueReady):
	case <-ctx.Done():
	}
	defer func() {
		var failed []string
		for _, u := range []string{queueURL, dlqURL} {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.step)
			if _, err := client.DeleteQueue(dctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(u)}); err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", u, err))
			}
			cancel()
		}
		if len(failed) > 0 {
			d.add("round trip: delete the scratch queues", DoctorWarn, strings.Join(failed, "; "), "delete the queues it names")
			return
		}
		d.add("round trip: delete the scratch queues", DoctorPass, "deleted both", "")
	}()
	src, err := sqsadapter.New(sqsadapter.Config{Client: client, QueueURL: queueURL, Deletes: d.cfg.sqsDeletes(), Logger: d.log})
	if err != nil {
		d.add("round trip", DoctorFail, err.Error(), "")
		return
	}
	defer func() { _ = src.Close(context.WithoutCancel(ctx)) }()
	rt := &sqsTrip{d: d, client: client, src: src, queueURL: queueURL, dlqURL: dlqURL, group: name}
	rt.run(ctx)
}

// sqsTrip is one run of the SQS calls.
type sqsTrip struct {
	d                       *doctor
	client                  *sqs.Client
	src                     *sqsadapter.Source
	queueURL, dlqURL, group string
	failed                  bool
	session                 sequencer.Session
	received                []*sequencer.Message
}

// do runs one step as a line; after a failed step the later ones are skipped.
func (t *sqsTrip) do(ctx context.Context, check string, fn func(ctx context.Context) (string, error)) {
	check = "round trip: " + check
	if t.failed {
		t.d.add(check, DoctorSkip, "an earlier step failed", "")
		return
	}
	sctx, cancel := context.WithTimeout(ctx, t.d.step)
	defer cancel()
	detail, err := fn(sctx)
	if err != nil {
		t.failed = true
		t.d.add(check, DoctorFail, err.Error(), "")
		return
	}
	t.d.add(check, DoctorPass, detail, "")
}

func (t *sqsTrip) run(ctx context.Context) {
	cfg := t.d.cfg
	sender, err := sqsadapter.NewSender(t.client, t.queueURL)
	if err != nil {
		t.d.add("round trip", DoctorFail, err.Error(), "")
		return
	}
	message := func(seq int64, last bool) *azservicebus.Message {
		props := map[string]any{cfg.SequenceProperty: seq}
		if last {
			props[cfg.LastProperty] = true
		}
		return &azservicebus.Message{
			MessageID: aws.String(fmt.Sprintf("%s-%d", t.group, seq)), SessionID: aws.String(t.group),
			Body: []byte(fmt.Sprintf(`{"doctor":%d}`, seq)), ApplicationProperties: props,
		}
	}
	t.do(ctx, "send", func(ctx context.Context) (string, error) {
		if _, err := sender.SendMessages(ctx, []*azservicebus.Message{message(1, false), message(2, true)}); err != nil {
			return "", err
		}
		return "two messages of one group, with the sequence and last-message attributes and deduplication ids (SendMessageBatch)", nil
	})
	t.do(ctx, "accept a group", func(ctx context.Context) (string, error) {
		s, err := t.src.AcceptNext(ctx)
		if err != nil {
			return "", err
		}
		t.session = s
		if s.ID() != t.group {
			return "", fmt.Errorf("accepted group %q, not %q", s.ID(), t.group)
		}
		return "ReceiveMessage with a visibility timeout of " + sqsadapter.DefaultVisibility.String() + " and a receive request attempt id", nil
	})
	t.do(ctx, "receive", func(ctx context.Context) (string, error) {
		ms, err := t.session.Receive(ctx, sqsadapter.MaxReceive)
		if err != nil {
			return "", err
		}
		t.received = ms
		if len(ms) != 2 {
			return "", fmt.Errorf("the group's receive returned %d messages, not the 2 sent", len(ms))
		}
		for i, m := range ms {
			if got := fmt.Sprint(m.Properties[cfg.SequenceProperty]); got != fmt.Sprint(i+1) {
				return "", fmt.Errorf("message %d of the group came back with %s %s: the endpoint reorders a group or loses its attributes", i+1, cfg.SequenceProperty, got)
			}
		}
		if last := fmt.Sprint(ms[1].Properties[cfg.LastProperty]); last != "true" {
			return "", fmt.Errorf("the group's last message came back with %s %s", cfg.LastProperty, last)
		}
		return "both, in order, with their attributes", nil
	})
	t.do(ctx, "group held while in flight", func(ctx context.Context) (string, error) {
		if _, err := sender.SendMessages(ctx, []*azservicebus.Message{message(3, false)}); err != nil {
			return "", err
		}
		out, err := t.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(t.queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			return "", err
		}
		if len(out.Messages) > 0 {
			return "", fmt.Errorf("a receive got %d messages of a group whose earlier messages are in flight: the endpoint does not keep a FIFO group's order", len(out.Messages))
		}
		return "a third message of the group is not handed out while the first two are in flight", nil
	})
	t.do(ctx, "renew the lock", func(ctx context.Context) (string, error) {
		until, err := t.session.RenewLock(ctx)
		if err != nil {
			return "", err
		}
		return "ChangeMessageVisibilityBatch: held until " + until.UTC().Format("15:04:05"), nil
	})
	t.do(ctx, "complete", func(ctx context.Context) (string, error) {
		if err := t.session.Complete(ctx, t.received[0]); err != nil {
			return "", err
		}
		if cfg.sqsDeletes() == sqsadapter.DeleteAtClose {
			return "kept for one DeleteMessageBatch at the group's close (SEQBUS_PIPELINE_RUNS)", nil
		}
		return "DeleteMessage", nil
	})
	t.do(ctx, "dead-letter", func(ctx context.Context) (string, error) {
		err := t.session.DeadLetter(ctx, t.received[1], sequencer.DeadLetterParams{Reason: "SeqbusDoctor", Description: "the doctor's round trip"})
		if err != nil {
			return "", err
		}
		return "a copy to the scratch dead-letter queue with its reason (SendMessage), then DeleteMessage", nil
	})
	t.do(ctx, "close the group", func(ctx context.Context) (string, error) {
		s := t.session
		t.session = nil
		if err := s.Close(ctx); err != nil {
			return "", err
		}
		return "released", nil
	})
	if t.session != nil {
		_ = t.session.Close(context.WithoutCancel(ctx))
	}
	t.do(ctx, "dead letter arrived", func(ctx context.Context) (string, error) {
		dl, err := sqsadapter.NewDeadLetters(sqsadapter.DeadLettersConfig{Client: t.client, QueueURL: t.queueURL, DeadLetterQueueURL: t.dlqURL})
		if err != nil {
			return "", err
		}
		got, err := dl.Receive(ctx)
		if err != nil {
			return "", err
		}
		defer func() { _ = dl.Release(context.WithoutCancel(ctx), got) }()
		for _, m := range got {
			if m.DeadLetterReason != nil && *m.DeadLetterReason == "SeqbusDoctor" {
				return "read back with its reason from the dead-letter queue, as `worker dlq list` reads it", nil
			}
		}
		return "", fmt.Errorf("the dead-letter queue holds %d messages, none the round trip's", len(got))
	})
}

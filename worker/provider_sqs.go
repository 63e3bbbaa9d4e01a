package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/seqbus/seqbus/outbox"
	"github.com/seqbus/seqbus/sessionstate/postgres"
	"github.com/seqbus/seqbus/sqsadapter"
)

// Provider names the broker a worker consumes.
type Provider string

// Providers.
const (
	// ProviderServiceBus consumes the sessions of a Service Bus queue or subscription.
	ProviderServiceBus Provider = "servicebus"
	// ProviderSQS consumes the message groups of an SQS FIFO queue as sessions. SQS FIFO has no
	// deferral and no session state: it needs StateStorePostgres and EarlyMessagesStore.
	ProviderSQS Provider = "sqs"
)

// SQS says which SQS FIFO queue a worker with ProviderSQS consumes. Region and credentials come
// from the standard AWS chain (AWS_REGION, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,
// AWS_PROFILE, web identity, the instance or task role); AWS_ENDPOINT_URL_SQS points the client
// at another endpoint, such as a local SQS.
type SQS struct {
	// SQSQueueURL is the FIFO queue's URL, as CreateQueue and GetQueueUrl return it.
	SQSQueueURL string `envconfig:"SQS_QUEUE_URL" desc:"URL of the SQS FIFO queue consumed with SEQBUS_PROVIDER=sqs (https://sqs.<region>.amazonaws.com/<account>/<name>.fifo). Region and credentials come from the standard AWS chain (AWS_REGION, AWS_PROFILE, the task role, …); AWS_ENDPOINT_URL_SQS points the client at a local SQS."`
	// SQSClient is the SQS client to use instead of one built from the AWS chain; the caller
	// owns it.
	SQSClient *sqs.Client `ignored:"true" desc:"An SQS client to use instead of one built from the standard AWS chain (tests, a local SQS)."`
}

// checkSQS checks the settings of ProviderSQS: the queue, and what SQS FIFO cannot offer. The
// settings that only Service Bus reads are refused when they are set, so that a worker never
// starts believing it consumes something it does not.
func checkSQS(p *problems[Config], c *Config) {
	if c.SQSQueueURL == "" {
		p.add("SQSQueueURL", "required with %s=%s", p.v("Provider"), ProviderSQS)
	} else if _, err := SQSEntity(c.SQSQueueURL); err != nil {
		p.add("SQSQueueURL", "%v", err)
	}
	if c.StateStore != StateStorePostgres {
		p.add("StateStore", "%s=%s needs %s=postgres: an SQS message group has no session state", p.v("Provider"), ProviderSQS, p.v("StateStore"))
	}
	if c.EarlyMessages != EarlyMessagesStore {
		p.add("EarlyMessages", "%s=%s needs %s=%s: SQS FIFO cannot defer a message, so early messages are held in the Postgres store",
			p.v("Provider"), ProviderSQS, p.v("EarlyMessages"), EarlyMessagesStore)
	}
	if c.Ordering != OrderingSession {
		p.add("Ordering", "%s=%s restores the order of message groups: %s=%s is Service Bus only", p.v("Provider"), ProviderSQS, p.v("Ordering"), c.Ordering)
	}
	sbOnly := func(field string, set bool) {
		if set {
			p.add(field, "is a Service Bus setting, refused with %s=%s", p.v("Provider"), ProviderSQS)
		}
	}
	sbOnly("ConnectionString", c.ConnectionString != "")
	sbOnly("Namespace", c.Namespace != "")
	sbOnly("Credential", c.Credential != nil)
	sbOnly("Entity.Queue", c.Entity.Queue != "")
	sbOnly("Entity.Topic", c.Entity.Topic != "")
	sbOnly("Entity.Subscription", c.Entity.Subscription != "")
	sbOnly("DeferOnPartitioned", c.DeferOnPartitioned)
	sbOnly("SessionConnections", c.SessionConnections > 1)
}

// SQSEntity returns the name under which the Postgres store keeps the states of the queue at
// queueURL: "sqs:<account>/<queue>", from the URL's path, so that the queue's states are the
// same whichever endpoint reaches it. The queue must be FIFO (its name ends in .fifo).
func SQSEntity(queueURL string) (string, error) {
	u, err := url.Parse(queueURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not a queue URL such as https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo", queueURL)
	}
	path := strings.Trim(u.Path, "/")
	account, name, ok := strings.Cut(path, "/")
	if !ok || account == "" || name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("%q is not a queue URL: its path must be /<account>/<queue>", queueURL)
	}
	if !strings.HasSuffix(name, ".fifo") {
		return "", fmt.Errorf("queue %q is not a FIFO queue (its name ends in .fifo): a standard queue keeps no order", name)
	}
	return "sqs:" + account + "/" + name, nil
}

// EntityName is the entity as the logs, the traces, the state store, the sweeper's lease and
// the console name it: "sqs:<account>/<queue>" with ProviderSQS, the Service Bus entity's path
// otherwise.
func (c Config) EntityName() string {
	if c.Provider == ProviderSQS {
		name, err := SQSEntity(c.SQSQueueURL)
		if err != nil {
			return c.SQSQueueURL
		}
		return name
	}
	return c.Entity.String()
}

// newSQSClient returns cfg.SQSClient, or a client from the standard AWS chain.
func newSQSClient(ctx context.Context, cfg SQS) (*sqs.Client, error) {
	if cfg.SQSClient != nil {
		return cfg.SQSClient, nil
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, configError("SQSQueueURL", fmt.Errorf("AWS configuration: %w", err))
	}
	if awsCfg.Region == "" {
		return nil, configError("SQSQueueURL", errors.New("no AWS region: set AWS_REGION (or a profile with a region)"))
	}
	return sqs.NewFromConfig(awsCfg), nil
}

// errNotFIFO is the probe's answer for a queue that is not FIFO.
var errNotFIFO = errors.New("the queue is not a FIFO queue: a standard queue keeps no order")

// probeSQS checks with one call that the queue exists, is FIFO and the credentials may read it.
func probeSQS(ctx context.Context, client *sqs.Client, queueURL string) error {
	out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: &queueURL, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameFifoQueue},
	})
	if err != nil {
		return fmt.Errorf("sqs: %w", err)
	}
	if out.Attributes[string(types.QueueAttributeNameFifoQueue)] != "true" {
		return errNotFIFO
	}
	return nil
}

// sqsFatal reports whether a probe's error is no reason to try again: the queue is missing or
// not FIFO, or the credentials are refused.
func sqsFatal(err error) bool {
	var missing *types.QueueDoesNotExist
	if errors.As(err, &missing) || errors.Is(err, errNotFIFO) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "AccessDenied", "AccessDeniedException", "InvalidClientTokenId", "SignatureDoesNotMatch",
			"UnrecognizedClientException", "MissingAuthenticationToken", "InvalidSecurity",
			"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist":
			return true
		}
	}
	return false
}

// connectSQS builds the connections of a worker with ProviderSQS: the SQS client, the source of
// the queue's message groups and the Postgres store (which Validate requires).
func connectSQS(ctx context.Context, cfg Config, c *Connections, log *slog.Logger) error {
	client, err := newSQSClient(ctx, cfg.SQS)
	if err != nil {
		return err
	}
	c.SQS = client
	if c.SQSSource, err = sqsadapter.New(sqsadapter.Config{Client: client, QueueURL: cfg.SQSQueueURL, Deletes: cfg.sqsDeletes(), Logger: log}); err != nil {
		return configError("SQSQueueURL", err)
	}
	if c.Pool, c.ownPool, err = openPool(ctx, cfg.Database); err != nil {
		return err
	}
	if c.Postgres, err = postgres.New(c.Pool, &postgres.Config{Entity: cfg.EntityName()}); err != nil {
		return err
	}
	c.Store, c.Lister = c.Postgres, c.Postgres
	return nil
}

// sqsMessages is the scaling signal's count on an SQS FIFO queue, where no call lists the
// message groups: the queue's messages, visible and in flight (ApproximateNumberOfMessages and
// ApproximateNumberOfMessagesNotVisible, one call), each counted as a group that may be ready.
// It is an upper bound of the groups with messages: a group of many messages asks for more
// replicas than it can use, and an empty queue asks for none.
func sqsMessages(client *sqs.Client, queueURL string, calls func(op string, n int)) func(ctx context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		calls("get_queue_attributes", 1)
		out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &queueURL, AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		}})
		if err != nil {
			return 0, fmt.Errorf("sqs: read the queue's message counts: %w", err)
		}
		n := 0
		for _, name := range []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
			v, err := strconv.Atoi(out.Attributes[string(name)])
			if err != nil {
				return 0, fmt.Errorf("sqs: %s %q: %w", name, out.Attributes[string(name)], err)
			}
			n += v
		}
		return n, nil
	}
}

// sqsSenders opens the outbox relay's sender of an entity with ProviderSQS: the SQS FIFO queue of
// that name (GetQueueUrl), so that the outbox names an SQS queue as it names a Service Bus queue.
func sqsSenders(client *sqs.Client) func(context.Context, string) (outbox.Sender, error) {
	return func(ctx context.Context, entity string) (outbox.Sender, error) {
		if !strings.HasSuffix(entity, ".fifo") {
			return nil, fmt.Errorf("worker: relay: entity %q is not the name of an SQS FIFO queue (such names end in .fifo)", entity)
		}
		out, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(entity)})
		if err != nil {
			return nil, fmt.Errorf("worker: relay: queue %q: %w", entity, err)
		}
		return sqsadapter.NewSender(client, aws.ToString(out.QueueUrl))
	}
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
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

// entityName is the entity as the logs, the traces, the state store and the sweeper's lease
// name it.
func (c Config) entityName() string {
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

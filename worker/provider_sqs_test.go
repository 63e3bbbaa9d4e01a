package worker

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

const testQueueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo"

// validSQS is a worker on an SQS FIFO queue with what SQS needs: the Postgres store, early
// messages held in it.
func validSQS() Config {
	c := DefaultConfig()
	c.Provider, c.SQSQueueURL = ProviderSQS, testQueueURL
	c.StateStore, c.DatabaseURL, c.EarlyMessages = StateStorePostgres, "postgres://u:p@localhost/seqbus", EarlyMessagesStore
	c.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	return c
}

func TestValidateSQS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string // problems the message names
	}{
		{"valid", func(*Config) {}, nil},
		{"unknown provider", func(c *Config) { c.Provider = "kafka" }, []string{`SEQBUS_PROVIDER: "kafka" is not one of servicebus, sqs`}},
		{"no queue url", func(c *Config) { c.SQSQueueURL = "" }, []string{"SEQBUS_SQS_QUEUE_URL: required with SEQBUS_PROVIDER=sqs"}},
		{"queue url not a url", func(c *Config) { c.SQSQueueURL = "orders.fifo" }, []string{`SEQBUS_SQS_QUEUE_URL: "orders.fifo" is not a queue URL`}},
		{"queue url without account", func(c *Config) { c.SQSQueueURL = "https://sqs.us-east-1.amazonaws.com/orders.fifo" }, []string{"its path must be /<account>/<queue>"}},
		{"standard queue", func(c *Config) { c.SQSQueueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/orders" }, []string{`SEQBUS_SQS_QUEUE_URL: queue "orders" is not a FIFO queue`}},
		{"service bus state store", func(c *Config) { c.StateStore, c.DatabaseURL = StateStoreServiceBus, "" },
			[]string{"SEQBUS_STATE_STORE: SEQBUS_PROVIDER=sqs needs SEQBUS_STATE_STORE=postgres: an SQS message group has no session state"}},
		{"deferral", func(c *Config) { c.EarlyMessages = EarlyMessagesDefer },
			[]string{"SEQBUS_EARLY_MESSAGES: SEQBUS_PROVIDER=sqs needs SEQBUS_EARLY_MESSAGES=store: SQS FIFO cannot defer a message"}},
		{"unordered", func(c *Config) { c.Ordering = OrderingNone }, []string{"SEQBUS_ORDERING: SEQBUS_PROVIDER=sqs restores the order of message groups: SEQBUS_ORDERING=none is Service Bus only"}},
		{"connection string", func(c *Config) { c.ConnectionString = testConn }, []string{"SEQBUS_CONNECTION_STRING: is a Service Bus setting, refused with SEQBUS_PROVIDER=sqs"}},
		{"namespace", func(c *Config) { c.Namespace = "x.servicebus.windows.net" }, []string{"SEQBUS_NAMESPACE: is a Service Bus setting"}},
		{"queue", func(c *Config) { c.Queue = "orders" }, []string{"SEQBUS_QUEUE: is a Service Bus setting"}},
		{"topic and subscription", func(c *Config) { c.Topic, c.Subscription = "t", "s" }, []string{"SEQBUS_TOPIC: is a Service Bus setting", "SEQBUS_SUBSCRIPTION: is a Service Bus setting"}},
		{"deferral on partitioned entities", func(c *Config) { c.DeferOnPartitioned = true }, []string{"SEQBUS_DEFER_ON_PARTITIONED: is a Service Bus setting"}},
		{"session connections", func(c *Config) { c.SessionConnections = 2 }, []string{"SEQBUS_SESSION_CONNECTIONS: is a Service Bus setting"}},
		{"the common settings are checked too", func(c *Config) { c.MaxConcurrentSessions = 0 }, []string{"SEQBUS_MAX_CONCURRENT_SESSIONS: must be positive"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validSQS()
			tt.mutate(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

// A queue URL belongs to the SQS provider: a Service Bus worker given one says so.
func TestValidateQueueURLWithServiceBus(t *testing.T) {
	t.Parallel()
	c := valid()
	c.SQSQueueURL = testQueueURL
	require.ErrorContains(t, c.Validate(), "SEQBUS_SQS_QUEUE_URL: is read with SEQBUS_PROVIDER=sqs only, got SEQBUS_PROVIDER=servicebus")
}

func TestSQSEntity(t *testing.T) {
	t.Parallel()
	tests := []struct{ url, want string }{
		{testQueueURL, "sqs:123456789012/orders.fifo"},
		{"https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo/", "sqs:123456789012/orders.fifo"},
		{"http://127.0.0.1:9324/000000000000/demo.fifo", "sqs:000000000000/demo.fifo"},
	}
	for _, tt := range tests {
		got, err := SQSEntity(tt.url)
		require.NoError(t, err, tt.url)
		require.Equal(t, tt.want, got)
	}
	for _, bad := range []string{"", "orders.fifo", "ftp://h/1/q.fifo", "https://h/1/q", "https://h/1/2/q.fifo", "https://h//q.fifo"} {
		_, err := SQSEntity(bad)
		require.Error(t, err, bad)
	}
}

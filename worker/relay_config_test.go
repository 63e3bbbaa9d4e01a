package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func validRelayConfig() RelayConfig {
	c := DefaultRelayConfig()
	c.ConnectionString, c.DatabaseURL = testConn, "postgres://u:p@localhost/seqbus"
	return c
}

func TestRelayConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(c *RelayConfig)
		wantErr string // "" means valid
	}{
		{"defaults", func(*RelayConfig) {}, ""},
		{"entra id namespace", func(c *RelayConfig) { c.ConnectionString, c.Namespace = "", "myns.servicebus.windows.net" }, ""},
		{"no credentials", func(c *RelayConfig) { c.ConnectionString = "" }, "SEQBUS_CONNECTION_STRING: set it"},
		{"both credentials", func(c *RelayConfig) { c.Namespace = "x.servicebus.windows.net" }, "SEQBUS_NAMESPACE: set either"},
		{"namespace is a URL", func(c *RelayConfig) { c.ConnectionString, c.Namespace = "", "sb://x.servicebus.windows.net/" }, "SEQBUS_NAMESPACE"},
		{"no database", func(c *RelayConfig) { c.DatabaseURL = "" }, "SEQBUS_DATABASE_URL: required"},
		{"zero batch", func(c *RelayConfig) { c.BatchSize = 0 }, "SEQBUS_RELAY_BATCH_SIZE"},
		{"retention off", func(c *RelayConfig) { c.EndedRetention = 0 }, ""},
		{"negative retention", func(c *RelayConfig) { c.EndedRetention = -time.Hour }, "SEQBUS_RELAY_ENDED_RETENTION: must not be negative"},
		{"backoff below its floor", func(c *RelayConfig) { c.MaxBackoff = time.Millisecond }, "SEQBUS_RELAY_MAX_BACKOFF: must be at least SEQBUS_RELAY_MIN_BACKOFF"},
		{"zero shutdown timeout", func(c *RelayConfig) { c.SoftStopTimeout = 0 }, "SEQBUS_SHUTDOWN_TIMEOUT"},
		{"sqs", func(c *RelayConfig) { c.Provider, c.ConnectionString = ProviderSQS, "" }, ""},
		{"sqs with a connection string", func(c *RelayConfig) { c.Provider = ProviderSQS }, "SEQBUS_CONNECTION_STRING: is a Service Bus setting, refused with SEQBUS_PROVIDER=sqs"},
		{"sqs with a namespace", func(c *RelayConfig) {
			c.Provider, c.ConnectionString, c.Namespace = ProviderSQS, "", "x.servicebus.windows.net"
		}, "SEQBUS_NAMESPACE: is a Service Bus setting"},
		{"unknown provider", func(c *RelayConfig) { c.Provider = "kafka" }, "SEQBUS_PROVIDER"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validRelayConfig()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// TestRelayConfigFromEnv uses t.Setenv, so it cannot run in parallel.
func TestRelayConfigFromEnv(t *testing.T) {
	t.Setenv("SEQBUS_RELAY_ENTITIES", "orders,billing")
	t.Setenv("SEQBUS_RELAY_ENDED_RETENTION", "0s")
	c := DefaultRelayConfig()
	require.NoError(t, FromEnv(&c))
	require.Equal(t, []string{"orders", "billing"}, c.Entities)
	require.Zero(t, c.EndedRetention, "0 keeps ended sessions forever")
	require.Equal(t, 100, c.BatchSize, "default")
	require.Equal(t, time.Minute, c.MaxBackoff, "default")
}

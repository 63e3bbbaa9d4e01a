package workerconfig

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func validRelayConfig() RelayConfig {
	return RelayConfig{
		ConnectionString: testConn,
		DatabaseURL:      "postgres://u:p@localhost/seqbus",
		SequenceProperty: "Sequence", LastProperty: "IsLast",
		BatchSize: 100, Concurrency: 4,
		PollInterval: 5 * time.Second, MinBackoff: time.Second, MaxBackoff: time.Minute,
		SendTimeout: 30 * time.Second, EndedRetention: 168 * time.Hour, PurgeInterval: time.Minute,
		HTTPAddr: ":9464", ReadyCheckInterval: 5 * time.Second, LogLevel: "info", ShutdownTimeout: 30 * time.Second,
	}
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
		{"bad log level", func(c *RelayConfig) { c.LogLevel = "loud" }, "SEQBUS_LOG_LEVEL"},
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

package worker

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sbadapter"
)

// statusTransport answers every management request with status and a Service Bus error body.
type statusTransport int

func (s statusTransport) Do(req *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: int(s), Status: http.StatusText(int(s)), Request: req, Header: http.Header{"Content-Type": {"application/xml"}},
		Body: io.NopCloser(strings.NewReader("<Error><Code>" + http.StatusText(int(s)) + "</Code><Detail>the claim Manage is required</Detail></Error>")),
	}, nil
}

// Without the Manage right (the management API answers 401 or 403) the start-time check logs
// that it could not check and lets the worker start; the read reports sbadapter.ErrUnauthorized.
func TestCheckPartitioningWithoutManage(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusInternalServerError} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			ac, err := admin.NewClientFromConnectionString(testConn, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{
				Transport: statusTransport(status), Retry: policy.RetryOptions{MaxRetries: -1},
			}})
			require.NoError(t, err)
			_, err = ReadEntityProperties(t.Context(), ac, sbadapter.Entity{Queue: "orders"})
			require.Error(t, err)
			require.Equal(t, status != http.StatusInternalServerError, errors.Is(err, sbadapter.ErrUnauthorized), err.Error())

			var logs strings.Builder
			cfg := valid()
			c := &Client{cfg: cfg, log: slog.New(slog.NewTextHandler(&logs, nil)), conn: &Connections{Admin: ac}}
			require.NoError(t, c.checkPartitioning(t.Context()))
			require.Contains(t, logs.String(), "could not check whether the entity is partitioned")
			if status != http.StatusInternalServerError {
				require.Contains(t, logs.String(), "lack the Manage right")
			}
		})
	}
}

// deferralRefused refuses exactly deferral on a partitioned entity without the override.
func TestDeferralRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		mutate    func(c *Config)
		props     EntityProperties
		wantError bool
	}{
		{"partitioned with defer", func(*Config) {}, EntityProperties{Partitioned: true, RequiresSession: true}, true},
		{"partitioned with the override", func(c *Config) { c.DeferOnPartitioned = true }, EntityProperties{Partitioned: true, RequiresSession: true}, false},
		{"not partitioned", func(*Config) {}, EntityProperties{RequiresSession: true}, false},
		{"unordered", func(c *Config) { c.Ordering = OrderingNone }, EntityProperties{Partitioned: true}, false},
		{"partitioned with store", func(c *Config) { c.EarlyMessages, c.StateStore = EarlyMessagesStore, StateStorePostgres },
			EntityProperties{Partitioned: true, RequiresSession: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tt.mutate(&c)
			err := c.deferralRefused(tt.props)
			if !tt.wantError {
				require.NoError(t, err)
				return
			}
			var ce *ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, "SEQBUS_EARLY_MESSAGES", ce.Var)
			require.Contains(t, err.Error(), "`worker doctor`")
			require.Contains(t, err.Error(), "SEQBUS_DEFER_ON_PARTITIONED=true")
		})
	}
}

package worker

import (
	"context"
	"testing"
	"time"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/sbadapter"
)

// The connections probe the broker they hold and name it: the SQS FIFO queue, answering while
// it exists; the Service Bus entity, refused when it does not exist.
func TestConnectionsProbeBroker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel) // after the parallel subtests

	t.Run("sqs", func(t *testing.T) {
		t.Parallel()
		client := localSQS(t)
		url := fifoQueueWithDLQ(t, client, "probed.fifo")
		cfg := validSQS()
		cfg.SQSClient, cfg.SQSQueueURL = client, url
		cfg.DatabaseURL = "postgres://nobody@127.0.0.1:1/none" // the probe reads no state
		conn, err := Connect(ctx, cfg)
		require.NoError(t, err)
		defer conn.Close(ctx)
		require.Equal(t, "sqs", conn.Broker())
		require.Equal(t, "sqs:000000000000/probed.fifo", cfg.EntityName())
		require.NoError(t, conn.ProbeBroker(ctx))

		_, err = client.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: &url})
		require.NoError(t, err)
		err = conn.ProbeBroker(ctx)
		require.Error(t, err)
		require.True(t, sqsFatal(err), "a deleted queue: %v", err)
	})

	t.Run("service bus", func(t *testing.T) {
		t.Parallel()
		srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"orders": {RequiresSession: true}}})
		for _, tt := range []struct {
			queue string
			ok    bool
		}{{"orders", true}, {"missing", false}} {
			cfg := DefaultConfig()
			cfg.ConnectionString, cfg.Entity = srv.ConnectionString(), sbadapter.Entity{Queue: tt.queue}
			conn, err := Connect(ctx, cfg)
			require.NoError(t, err)
			require.Equal(t, "service bus", conn.Broker())
			require.Equal(t, tt.queue, cfg.EntityName())
			err = conn.ProbeBroker(ctx)
			conn.Close(ctx)
			if tt.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err, tt.queue)
			}
		}
	})

	require.Error(t, (&Connections{}).ProbeBroker(ctx), "no broker connection")
}

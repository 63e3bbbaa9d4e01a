package sqs_test

import (
	"fmt"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/sqs"
)

// BenchmarkRoundTrip sends b.N messages over 100 groups in batches of 10, then
// receives up to 10 at a time and deletes them in batches, all through the SDK over
// loopback HTTP, with backlog messages waiting behind them (b.N plus the backlog in
// the queue at the start).
func BenchmarkRoundTrip(b *testing.B) {
	for _, backlog := range []int{0, 10000} {
		b.Run("backlog="+strconv.Itoa(backlog), func(b *testing.B) {
			srv := httptest.NewServer(sqs.New(sqs.Config{}))
			b.Cleanup(srv.Close)
			c := newClient(b, srv.URL)
			ctx := b.Context()
			q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("bench.fifo"), Attributes: map[string]string{"FifoQueue": "true"}})
			require.NoError(b, err)
			send := func(first, n int, group func(i int) string) {
				for i := first; i < first+n; i += 10 {
					var entries []types.SendMessageBatchRequestEntry
					for j := i; j < i+10 && j < first+n; j++ {
						entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j - i)),
							MessageBody: aws.String("payload-" + strconv.Itoa(j)), MessageGroupId: aws.String(group(j)), MessageDeduplicationId: aws.String(strconv.Itoa(j))})
					}
					out, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: entries})
					require.NoError(b, err)
					require.Empty(b, out.Failed)
				}
			}
			send(0, b.N, func(i int) string { return fmt.Sprintf("g%d", i%100) })
			send(b.N, backlog, func(int) string { return "backlog" })
			// The backlog group stays in flight so that every receive walks past it.
			if backlog > 0 {
				_, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 1, VisibilityTimeout: 43200})
				require.NoError(b, err)
			}
			b.ResetTimer()
			done := 0
			for done < b.N {
				out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10})
				require.NoError(b, err)
				require.NotEmpty(b, out.Messages)
				var entries []types.DeleteMessageBatchRequestEntry
				for i, m := range out.Messages {
					entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
				}
				del, err := c.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: q.QueueUrl, Entries: entries})
				require.NoError(b, err)
				require.Empty(b, del.Failed)
				done += len(out.Messages)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

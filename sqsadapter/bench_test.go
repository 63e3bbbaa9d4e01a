package sqsadapter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/sqsadapter"
)

const benchGroups = 8

// fill sends n messages round robin over benchGroups groups, in batches of 10.
func fill(b *testing.B, l *local, url string, n int) {
	b.Helper()
	ctx := context.Background()
	for lo := 0; lo < n; lo += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for i := lo; i < min(lo+10, n); i++ {
			attrs, err := sqsadapter.EncodeAttributes(map[string]any{contract.SequenceProperty: i/benchGroups + 1})
			require.NoError(b, err)
			entries = append(entries, types.SendMessageBatchRequestEntry{
				Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String("body"), MessageAttributes: attrs,
				MessageGroupId: aws.String(fmt.Sprint("g", i%benchGroups)), MessageDeduplicationId: aws.String(fmt.Sprint(i)),
			})
		}
		out, err := l.Client.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		require.NoError(b, err)
		require.Empty(b, out.Failed)
	}
}

// BenchmarkReceiveComplete receives and completes b.N messages of 8 groups on the local SQS,
// one at a time on one goroutine: through the adapter (AcceptNext, Receive, Complete, Close)
// and with a plain AWS SDK loop (ReceiveMessage of 10, DeleteMessage each) for comparison.
func BenchmarkReceiveComplete(b *testing.B) {
	b.Run("adapter", func(b *testing.B) {
		l := newLocal(b, nil)
		src, pub := newSource(b, l, sqsadapter.Config{Visibility: 30 * time.Second, Wait: time.Second})
		fill(b, l, pub.url, b.N)
		ctx := context.Background()
		b.ResetTimer()
		done := 0
		for done < b.N {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			sess, err := src.AcceptNext(actx)
			cancel()
			require.NoError(b, err)
			for {
				msgs, err := sess.Receive(ctx, 10) // empty at once when the receive is taken
				require.NoError(b, err)
				if len(msgs) == 0 {
					break
				}
				for _, m := range msgs {
					require.NoError(b, sess.Complete(ctx, m))
				}
				done += len(msgs)
			}
			require.NoError(b, sess.Close(ctx))
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("sdk", func(b *testing.B) {
		l := newLocal(b, nil)
		url, _ := l.queue(b, 100)
		fill(b, l, url, b.N)
		ctx := context.Background()
		b.ResetTimer()
		done := 0
		for done < b.N {
			out, err := l.Client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
				QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 30,
				MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
			require.NoError(b, err)
			for _, m := range out.Messages {
				_, err := l.Client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
				require.NoError(b, err)
			}
			done += len(out.Messages)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}

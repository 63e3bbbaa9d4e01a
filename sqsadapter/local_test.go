package sqsadapter_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator/sqs"
)

// local is a local SQS FIFO (emulator/sqs) behind httptest and a client for it.
type local struct {
	URL    string
	Client *awssqs.Client
}

// newLocal serves a local SQS on a free port for the test, on clk (nil: the wall clock).
func newLocal(t testing.TB, clk clock.Clock) *local {
	return newLocalWith(t, clk, nil)
}

// newLocalWith is newLocal with the server's handler wrapped (nil: not wrapped) and the SDK's
// retries off, so that a refusal the wrapper injects reaches the adapter.
func newLocalWith(t testing.TB, clk clock.Clock, wrap func(http.Handler) http.Handler) *local {
	t.Helper()
	var h http.Handler = sqs.New(sqs.Config{Clock: clk})
	retries := 0
	if wrap != nil {
		h, retries = wrap(h), 1
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := awssqs.New(awssqs.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(srv.URL),
		Credentials:      credentials.NewStaticCredentialsProvider("any", "any", ""),
		RetryMaxAttempts: retries,
	})
	return &local{URL: srv.URL, Client: c}
}

var queueSeq atomic.Int64

// queue creates a FIFO queue with a FIFO dead-letter queue (maxReceiveCount as given, 0: no
// redrive policy) and returns both URLs.
func (l *local) queue(t testing.TB, maxReceive int) (url, dlq string) {
	t.Helper()
	ctx := context.Background()
	n := queueSeq.Add(1)
	name := strings.NewReplacer("/", "-", "#", "-").Replace(t.Name())
	if len(name) > 50 {
		name = name[:50]
	}
	d, err := l.Client.CreateQueue(ctx, &awssqs.CreateQueueInput{
		QueueName:  aws.String(fmt.Sprintf("%s-%d-dlq.fifo", name, n)),
		Attributes: map[string]string{"FifoQueue": "true"},
	})
	require.NoError(t, err)
	attrs := map[string]string{"FifoQueue": "true"}
	if maxReceive > 0 {
		a, err := l.Client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
			QueueUrl: d.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		require.NoError(t, err)
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, a.Attributes["QueueArn"], maxReceive)
	}
	q, err := l.Client.CreateQueue(ctx, &awssqs.CreateQueueInput{
		QueueName: aws.String(fmt.Sprintf("%s-%d.fifo", name, n)), Attributes: attrs})
	require.NoError(t, err)
	return *q.QueueUrl, *d.QueueUrl
}

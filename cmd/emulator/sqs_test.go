package main

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/testio"
)

func TestRunServesSQS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr testio.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-amqp-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-sqs-addr", "127.0.0.1:0", "-sqs-region", "eu-west-1"}, noEnv, &stdout, &stderr)
	}()

	ready := regexp.MustCompile(`emulator: sqs ready" sqs_url=(\S+)`)
	var m []string
	for start := time.Now(); m == nil && time.Since(start) < 5*time.Second; {
		if m = ready.FindStringSubmatch(stderr.String()); m == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
	require.NotNil(t, m, "no sqs ready line; stderr: %s", stderr.String())

	c := sqs.New(sqs.Options{Region: "eu-west-1", BaseEndpoint: aws.String(m[1]),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDCMD", "secret", ""), RetryMaxAttempts: 1})
	created, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders.fifo"),
		Attributes: map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}})
	require.NoError(t, err)
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: created.QueueUrl, AttributeNames: []types.QueueAttributeName{"QueueArn"}})
	require.NoError(t, err)
	require.Equal(t, "arn:aws:sqs:eu-west-1:000000000000:orders.fifo", attrs.Attributes["QueueArn"])
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: created.QueueUrl, MessageBody: aws.String("hello"), MessageGroupId: aws.String("g")})
	require.NoError(t, err)
	got, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: created.QueueUrl, WaitTimeSeconds: 1})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	require.Equal(t, "hello", aws.ToString(got.Messages[0].Body))

	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code, "stderr: %s", stderr.String())
	case <-time.After(5 * time.Second):
		t.Fatal("run did not stop")
	}
}

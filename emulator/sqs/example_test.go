package sqs_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/seqbus/seqbus/emulator/sqs"
)

// A test embeds the local SQS with httptest and points the AWS SDK at it.
func ExampleNew() {
	srv := httptest.NewServer(sqs.New(sqs.Config{}))
	defer srv.Close()
	ctx := context.Background()
	c := awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("any", "any", "")})

	q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders.fifo"),
		Attributes: map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}})
	if err != nil {
		panic(err)
	}
	for _, body := range []string{"first", "second"} {
		if _, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body), MessageGroupId: aws.String("order-1")}); err != nil {
			panic(err)
		}
	}
	out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10})
	if err != nil {
		panic(err)
	}
	for _, m := range out.Messages {
		fmt.Println(aws.ToString(m.Body))
	}
	// Output:
	// first
	// second
}

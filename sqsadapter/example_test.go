package sqsadapter_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/emulator/sqs"
	"github.com/seqbus/seqbus/sqsadapter"
)

// Example creates a FIFO queue with its dead-letter queue on a local SQS, publishes two
// messages of one group and receives them through a Source, as docs/sqs.md shows.
func Example() {
	ctx := context.Background()
	srv := httptest.NewServer(sqs.New(sqs.Config{}))
	defer srv.Close()
	client := awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("any", "any", "")})

	// The queue needs a RedrivePolicy to a FIFO dead-letter queue.
	dlq, _ := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-dlq.fifo"),
		Attributes: map[string]string{"FifoQueue": "true"}})
	arn, _ := client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	q, _ := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders.fifo"),
		Attributes: map[string]string{"FifoQueue": "true",
			"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":50}`, arn.Attributes["QueueArn"])}})

	// Publish: the group is the session, the attributes carry the sequence.
	for seq := 1; seq <= 2; seq++ {
		attrs, err := sqsadapter.EncodeAttributes(map[string]any{contract.SequenceProperty: seq})
		if err != nil {
			panic(err)
		}
		_, err = client.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl,
			MessageGroupId: aws.String("order-42"), MessageDeduplicationId: aws.String(fmt.Sprint("order-42-", seq)),
			MessageBody: aws.String(fmt.Sprint("step ", seq)), MessageAttributes: attrs})
		if err != nil {
			panic(err)
		}
	}

	src, err := sqsadapter.New(sqsadapter.Config{Client: client, QueueURL: aws.ToString(q.QueueUrl), Visibility: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	defer src.Close(ctx)
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sess, err := src.AcceptNext(actx)
	if err != nil {
		panic(err)
	}
	msgs, err := sess.Receive(actx, 10)
	if err != nil {
		panic(err)
	}
	for _, m := range msgs {
		seq, _, _ := contract.Parse(m.Properties, contract.SequenceProperty, contract.LastProperty)
		fmt.Println(m.SessionID, seq, string(m.Body))
		if err := sess.Complete(ctx, m); err != nil {
			panic(err)
		}
	}
	_ = sess.Close(ctx)
	// Output:
	// order-42 1 step 1
	// order-42 2 step 2
}

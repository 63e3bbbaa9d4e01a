package sqsadapter

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// CreateFIFO creates the FIFO queue name.fifo with the FIFO dead-letter queue name-dlq.fifo that
// its RedrivePolicy names (maxReceiveCount as given: leave room for the releases the package
// documentation describes), as a Source needs it, and returns both URLs. Creating a queue that
// exists with the same attributes returns it. SQS asks for a second between creating a queue and
// using it.
func CreateFIFO(ctx context.Context, c *sqs.Client, name string, maxReceiveCount int) (queueURL, dlqURL string, err error) {
	dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq.fifo"),
		Attributes: map[string]string{"FifoQueue": "true"}})
	if err != nil {
		return "", "", fmt.Errorf("sqsadapter: create queue %s-dlq.fifo: %w", name, err)
	}
	arn, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", "", fmt.Errorf("sqsadapter: read the ARN of %s-dlq.fifo: %w", name, err)
	}
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + ".fifo"), Attributes: map[string]string{
		"FifoQueue": "true",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`,
			arn.Attributes[string(types.QueueAttributeNameQueueArn)], maxReceiveCount),
	}})
	if err != nil {
		return "", "", fmt.Errorf("sqsadapter: create queue %s.fifo: %w", name, err)
	}
	return aws.ToString(q.QueueUrl), aws.ToString(dlq.QueueUrl), nil
}

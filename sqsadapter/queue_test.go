package sqsadapter_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sqsadapter"
)

// CreateFIFO makes a queue a Source accepts: FIFO, redriving to its FIFO dead-letter queue; a
// second call returns the same queues.
func TestCreateFIFO(t *testing.T) {
	t.Parallel()
	l := newLocal(t, nil)
	url, dlq, err := sqsadapter.CreateFIFO(t.Context(), l.Client, "made", 7)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(url, "/made.fifo"), url)
	require.True(t, strings.HasSuffix(dlq, "/made-dlq.fifo"), dlq)
	attrs, err := l.Client.GetQueueAttributes(t.Context(), &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	require.NoError(t, err)
	require.Equal(t, "true", attrs.Attributes["FifoQueue"])
	require.Contains(t, attrs.Attributes["RedrivePolicy"], `"maxReceiveCount":"7"`)
	require.Contains(t, attrs.Attributes["RedrivePolicy"], "made-dlq.fifo")

	again, _, err := sqsadapter.CreateFIFO(t.Context(), l.Client, "made", 7)
	require.NoError(t, err)
	require.Equal(t, url, again)
	src, err := sqsadapter.New(sqsadapter.Config{Client: l.Client, QueueURL: url})
	require.NoError(t, err, "a Source accepts it")
	require.NoError(t, src.Close(t.Context()))
}

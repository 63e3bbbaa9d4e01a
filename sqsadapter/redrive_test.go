package sqsadapter_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sqsadapter"
)

func TestParseRedrivePolicy(t *testing.T) {
	t.Parallel()
	const arn = "arn:aws:sqs:eu-west-1:123456789012:orders-dlq.fifo"
	tests := []struct {
		name, policy string
		want         sqsadapter.RedrivePolicy
		err          string
	}{
		{"count as a number", `{"deadLetterTargetArn":"` + arn + `","maxReceiveCount":50}`,
			sqsadapter.RedrivePolicy{DeadLetterTargetARN: arn, Account: "123456789012", Name: "orders-dlq.fifo", MaxReceiveCount: 50}, ""},
		{"count as a string", `{"deadLetterTargetArn":"` + arn + `","maxReceiveCount":"7"}`,
			sqsadapter.RedrivePolicy{DeadLetterTargetARN: arn, Account: "123456789012", Name: "orders-dlq.fifo", MaxReceiveCount: 7}, ""},
		{"no account", `{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1::d.fifo","maxReceiveCount":3}`,
			sqsadapter.RedrivePolicy{DeadLetterTargetARN: "arn:aws:sqs:eu-west-1::d.fifo", Name: "d.fifo", MaxReceiveCount: 3}, ""},
		{"not json", `deadLetterTargetArn=x`, sqsadapter.RedrivePolicy{}, "is not JSON"},
		{"no target", `{"maxReceiveCount":5}`, sqsadapter.RedrivePolicy{}, "has no deadLetterTargetArn"},
		{"not an sqs arn", `{"deadLetterTargetArn":"arn:aws:sns:eu-west-1:1:t","maxReceiveCount":5}`, sqsadapter.RedrivePolicy{}, "is not an SQS queue ARN"},
		{"zero count", `{"deadLetterTargetArn":"` + arn + `","maxReceiveCount":0}`, sqsadapter.RedrivePolicy{}, "is not a positive number"},
		{"count not a number", `{"deadLetterTargetArn":"` + arn + `","maxReceiveCount":"many"}`, sqsadapter.RedrivePolicy{}, "is not a positive number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := sqsadapter.ParseRedrivePolicy(tt.policy)
			if tt.err != "" {
				require.ErrorIs(t, err, sqsadapter.ErrConfig)
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

package sqsadapter

import (
	"errors"
	"math/big"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
)

func TestBrokerSequence(t *testing.T) {
	two63 := new(big.Int).Lsh(big.NewInt(1), 63)
	plus := func(base *big.Int, n int64) string { return new(big.Int).Add(base, big.NewInt(n)).String() }
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1", 1},
		{"9223372036854775807", 9223372036854775807},
		{"18849496460467696128", 18849496460467696128 - 2*9223372036854775808},
		{plus(two63, 5), 5},
		{"340282366920938463463374607431768211455", 9223372036854775807}, // 2^128-1
	} {
		got, err := BrokerSequence(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{"", "-1", "12a", "1.5"} {
		_, err := BrokerSequence(bad)
		require.Error(t, err, bad)
	}
	// Order holds between numbers of one stretch of 2^63.
	a, _ := BrokerSequence("18849496460467696128")
	b, _ := BrokerSequence("18849496460467696129")
	require.Less(t, a, b)
}

func TestCodeKind(t *testing.T) {
	for _, tc := range []struct {
		code, msg string
		want      kind
	}{
		{"ReceiptHandleIsInvalid", "", kindLockLost},
		{"InvalidParameterValue", "Value x for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.", kindLockLost},
		{"AWS.SimpleQueueService.MessageNotInflight", "", kindLockLost},
		{"InvalidParameterValue", "Value 99 for parameter VisibilityTimeout is invalid.", kindOther},
		{"ThrottlingException", "Rate exceeded", kindThrottled},
		{"RequestThrottled", "", kindThrottled},
		{"AWS.SimpleQueueService.NonExistentQueue", "", kindNotFound},
		{"QueueDoesNotExist", "", kindNotFound},
		{"InternalError", "", kindOther},
	} {
		require.Equal(t, tc.want, codeKind(tc.code, tc.msg), "%s %s", tc.code, tc.msg)
	}
	err := wrapKind("complete", true, kindThrottled, errors.New("x"))
	require.ErrorIs(t, err, sequencer.ErrSettlementRefused)
	err = wrapKind("renew", false, kindThrottled, errors.New("x"))
	require.ErrorIs(t, err, ErrTransient)
	require.NotErrorIs(t, err, sequencer.ErrSettlementRefused)
}

func TestDeadLetterAttributes(t *testing.T) {
	attrs := func(n int) map[string]types.MessageAttributeValue {
		out := map[string]types.MessageAttributeValue{}
		for i := range n {
			out[string(rune('a'+i))] = str(typeString, "v")
		}
		return out
	}
	p := sequencer.DeadLetterParams{Reason: "R", Description: "D"}
	for _, tc := range []struct {
		name     string
		orig     map[string]types.MessageAttributeValue
		p        sequencer.DeadLetterParams
		wantLen  int
		reason   bool
		descript bool
	}{
		{"room for both", attrs(8), p, 10, true, true},
		{"room for the reason", attrs(9), p, 10, true, false},
		{"no room", attrs(10), p, 10, false, false},
		{"no description", attrs(2), sequencer.DeadLetterParams{Reason: "R"}, 3, true, false},
		{"none", nil, sequencer.DeadLetterParams{}, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := deadLetterAttributes(tc.orig, tc.p)
			require.Len(t, got, tc.wantLen)
			for k := range tc.orig {
				require.Contains(t, got, k, "the message's own attributes are kept")
			}
			_, r := got[DeadLetterReasonAttribute]
			_, d := got[DeadLetterDescriptionAttribute]
			require.Equal(t, tc.reason, r)
			require.Equal(t, tc.descript, d)
			if r {
				require.Equal(t, "R", aws.ToString(got[DeadLetterReasonAttribute].StringValue))
			}
		})
	}
}

package broker_test

import (
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

// TestDeliveryAnnotationsSurviveEncoding encodes a delivery with go-amqp and decodes it
// again, checking the AMQP types the azservicebus SDK asserts without checks.
func TestDeliveryAnnotationsSurviveEncoding(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	q := tb.queue(t, "q", broker.EntityProperties{MaxDeliveryCount: 1})
	m := msg("x")
	m.Annotations = amqp.Annotations{broker.AnnotationPartitionKey: "pk"}
	send(t, q, m)
	d := receiveOne(t, q, peekLock)
	require.NoError(t, q.Abandon(d.LockToken, nil)) // dead-lettered at the first abandon
	dl := receiveOne(t, tb.lookup(t, "q/$DeadLetterQueue"), peekLock)

	raw, err := dl.Message.MarshalBinary()
	require.NoError(t, err)
	var got amqp.Message
	require.NoError(t, got.UnmarshalBinary(raw))

	a := got.Annotations
	require.IsType(t, int64(0), a[broker.AnnotationSequenceNumber])
	require.IsType(t, time.Time{}, a[broker.AnnotationEnqueuedTime])
	require.IsType(t, time.Time{}, a[broker.AnnotationLockedUntil])
	require.IsType(t, int64(0), a[broker.AnnotationMessageState])
	require.Equal(t, "q", a[broker.AnnotationDeadLetterSource])
	require.Equal(t, "pk", a[broker.AnnotationPartitionKey])
	require.Equal(t, dl.LockToken, got.DeliveryAnnotations[broker.DeliveryAnnotationLockToken])
	require.IsType(t, "", got.ApplicationProperties[broker.PropertyDeadLetterReason])
	require.IsType(t, "", got.ApplicationProperties[broker.PropertyDeadLetterErrorDescription])
	require.NotNil(t, got.Properties)
	require.NotNil(t, got.Header)
	require.Equal(t, uint32(1), got.Header.DeliveryCount)
}

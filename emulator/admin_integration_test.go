package emulator_test

import (
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/admintransport"
	"github.com/seqbus/seqbus/emulator"
)

// TestAdminClientOnTheAMQPPort creates entities with the real admin client,
// which speaks HTTP to the Endpoint's port, and uses them over AMQP.
func TestAdminClientOnTheAMQPPort(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srv, err := emulator.Start(ctx, emulator.Config{HTTPAddr: "-"}) // the default admin handler
	require.NoError(t, err)
	defer srv.Close()

	adm, err := admintransport.NewAdminClient(srv.ConnectionString(), nil)
	require.NoError(t, err)
	_, err = adm.CreateQueue(ctx, "made-by-admin", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
		RequiresSession: to.Ptr(true), LockDuration: to.Ptr("PT45S"),
	}})
	require.NoError(t, err)

	client := newClient(t, srv.ConnectionString())
	s, err := client.NewSender("made-by-admin", nil)
	require.NoError(t, err)
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("x"), SessionID: to.Ptr("a")}, nil))
	sr, err := client.AcceptSessionForQueue(ctx, "made-by-admin", "a", nil)
	require.NoError(t, err)
	defer sr.Close(ctx)
	m := receiveN(ctx, t, sr, 1)[0]
	require.WithinDuration(t, time.Now().Add(45*time.Second), *m.LockedUntil, 5*time.Second, "the admin-set lock duration applies")
	require.NoError(t, sr.CompleteMessage(ctx, m, nil))

	props, err := adm.GetQueueRuntimeProperties(ctx, "made-by-admin", nil)
	require.NoError(t, err)
	require.Zero(t, props.ActiveMessageCount)
}

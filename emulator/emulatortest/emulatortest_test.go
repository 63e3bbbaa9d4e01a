package emulatortest_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartDeclaresEntitiesAndConnects(t *testing.T) {
	t.Parallel()
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues: map[string]broker.EntityProperties{"sessions": {RequiresSession: true}},
		Topics: map[string]emulatortest.Topic{"events": {Subscriptions: map[string]emulatortest.Subscription{
			"all": {},
			"red": {Rules: []broker.Rule{{Name: "red", FilterType: broker.FilterSQL, SQLExpression: "color = 'red'"}}},
		}}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	s, err := srv.Client.NewSender("events", nil)
	require.NoError(t, err)
	for _, color := range []string{"red", "blue"} {
		require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte(color), ApplicationProperties: map[string]any{"color": color}}, nil))
	}
	for sub, want := range map[string]int{"all": 2, "red": 1} {
		r, err := srv.Client.NewReceiverForSubscription("events", sub, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		require.NoError(t, err)
		var got int
		for got < want {
			msgs, err := r.ReceiveMessages(ctx, want, nil)
			require.NoError(t, err)
			got += len(msgs)
		}
		require.Equal(t, want, got, sub)
	}

	q, err := srv.NewAdminClient(t).GetQueue(ctx, "sessions", nil)
	require.NoError(t, err)
	require.NotNil(t, q, "the admin client sees the declared queue")
	require.True(t, *q.RequiresSession)
}

func TestCleanupClosesTheEmulator(t *testing.T) {
	t.Parallel()
	var addr string
	t.Run("test", func(t *testing.T) {
		addr = emulatortest.Start(t, nil).AMQPAddr()
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err, "the emulator listens during the test")
		require.NoError(t, c.Close())
	})
	_, err := net.Dial("tcp", addr)
	require.Error(t, err, "nothing listens once the test is over")
}

package emulator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
)

// noRetries makes each SDK call one attempt, so a refusal reaches the test as it came.
var noRetries = &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}}

func startPressured(t *testing.T, p emulator.Pressure) *emulatortest.Server {
	t.Helper()
	return emulatortest.Start(t, &emulatortest.Options{
		Queues: map[string]broker.EntityProperties{
			"q":        {},
			"sessions": {RequiresSession: true},
		},
		Config: emulator.Config{Pressure: p},
	})
}

func pressureCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// preload puts n messages into entity straight through the broker, which costs no credits.
func preload(t *testing.T, srv *emulatortest.Server, entity, sessionID string, n int) {
	t.Helper()
	e, err := srv.Broker().Lookup(entity)
	require.NoError(t, err)
	msgs := make([]*amqp.Message, n)
	for i := range msgs {
		msgs[i] = &amqp.Message{Data: [][]byte{fmt.Appendf(nil, "%d", i)}, Properties: &amqp.MessageProperties{}}
		if sessionID != "" {
			msgs[i].Properties.GroupID = &sessionID
		}
	}
	require.NoError(t, e.Send(context.Background(), msgs))
}

// requireServerBusy checks err is the service's throttling refusal, retry-after hint included.
func requireServerBusy(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.Contains(t, err.Error(), "Error code : 50009. Please wait 2 seconds and try again.")
	var amqpErr *amqp.Error
	var rpc interface{ RPCCode() int }
	switch {
	case errors.As(err, &amqpErr):
		require.Equal(t, amqp.ErrCond(emulator.ServerBusyCondition), amqpErr.Condition)
	case errors.As(err, &rpc):
		require.Equal(t, 503, rpc.RPCCode())
	default:
		t.Fatalf("want an AMQP error or a management status, got %T: %v", err, err)
	}
}

func TestThrottleRefusesWithServerBusy(t *testing.T) {
	t.Parallel()

	t.Run("a sender without retries sees ServerBusy once the credits are spent", func(t *testing.T) {
		t.Parallel()
		srv := startPressured(t, emulator.Pressure{CreditsPerSecond: 5})
		ctx := pressureCtx(t)
		sender, err := srv.NewClient(t, noRetries).NewSender("q", nil)
		require.NoError(t, err)
		var sent int
		for ; sent < 100; sent++ {
			if err = sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err != nil {
				break
			}
		}
		requireServerBusy(t, err)
		require.GreaterOrEqual(t, sent, 5, "the second's credits are spent first")
		info, err := srv.Broker().GetQueue("q")
		require.NoError(t, err)
		require.EqualValues(t, sent, info.Counts.Active, "a refused send stores nothing")
		require.Positive(t, srv.PressureStats().Throttled)
	})

	t.Run("a sender with the SDK's default retries gets everything through", func(t *testing.T) {
		t.Parallel()
		srv := startPressured(t, emulator.Pressure{CreditsPerSecond: 20})
		ctx := pressureCtx(t)
		sender, err := srv.NewClient(t, &azservicebus.ClientOptions{}).NewSender("q", nil)
		require.NoError(t, err)
		for i := range 30 {
			require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "%d", i)}, nil))
		}
		info, err := srv.Broker().GetQueue("q")
		require.NoError(t, err)
		require.EqualValues(t, 30, info.Counts.Active)
		require.Positive(t, srv.PressureStats().Throttled, "the sends went past the credits, so some were refused and retried")
	})

	t.Run("management without retries answers 503 server-busy", func(t *testing.T) {
		t.Parallel()
		srv := startPressured(t, emulator.Pressure{CreditsPerSecond: 3})
		ctx := pressureCtx(t)
		preload(t, srv, "sessions", "s1", 1)
		r, err := srv.NewClient(t, noRetries).AcceptSessionForQueue(ctx, "sessions", "s1", nil)
		require.NoError(t, err)
		for range 100 {
			if _, err = r.GetSessionState(ctx, nil); err != nil {
				break
			}
		}
		requireServerBusy(t, err)
	})

	t.Run("a receiver gets every message, later, instead of a refusal", func(t *testing.T) {
		t.Parallel()
		srv := startPressured(t, emulator.Pressure{CreditsPerSecond: 10})
		ctx := pressureCtx(t)
		preload(t, srv, "q", "", 25)
		r, err := srv.NewClient(t, noRetries).NewReceiverForQueue("q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		require.NoError(t, err)
		got := 0
		for got < 25 {
			msgs, err := r.ReceiveMessages(ctx, 5, nil)
			require.NoError(t, err)
			got += len(msgs)
		}
		st := srv.PressureStats()
		require.Positive(t, st.DeliveriesDelayed)
		require.Zero(t, st.Throttled, "deliveries wait; they are never refused")
	})
}

func TestThrottleChargesCreditsPerOperation(t *testing.T) {
	t.Parallel()
	// A limit never reached: the operations are only counted.
	srv := startPressured(t, emulator.Pressure{CreditsPerSecond: 1_000_000})
	ctx := pressureCtx(t)
	client := srv.NewClient(t, noRetries)
	sender, err := client.NewSender("q", nil)
	require.NoError(t, err)
	sessionSender, err := client.NewSender("sessions", nil)
	require.NoError(t, err)
	receiver, err := client.NewReceiverForQueue("q", nil)
	require.NoError(t, err)
	sid := "s1"
	require.NoError(t, sessionSender.SendMessage(ctx, &azservicebus.Message{SessionID: &sid, Body: []byte("x")}, nil))

	tests := []struct {
		name    string
		credits uint64
		op      func(t *testing.T)
	}{
		{"send one message", 1, func(t *testing.T) {
			require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil))
		}},
		{"send a batch of three", 3, func(t *testing.T) {
			batch, err := sender.NewMessageBatch(ctx, nil)
			require.NoError(t, err)
			for range 3 {
				require.NoError(t, batch.AddMessage(&azservicebus.Message{Body: []byte("x")}, nil))
			}
			require.NoError(t, sender.SendMessageBatch(ctx, batch, nil))
		}},
		{"receive and complete one message", 2, func(t *testing.T) {
			msgs, err := receiver.ReceiveMessages(ctx, 1, nil)
			require.NoError(t, err)
			require.Len(t, msgs, 1)
			require.NoError(t, receiver.CompleteMessage(ctx, msgs[0], nil))
		}},
		{"accept a session, get, set, renew", 3, func(t *testing.T) {
			r, err := client.AcceptSessionForQueue(ctx, "sessions", sid, nil)
			require.NoError(t, err)
			_, err = r.GetSessionState(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, r.SetSessionState(ctx, []byte("state"), nil))
			require.NoError(t, r.RenewSessionLock(ctx, nil))
			require.NoError(t, r.Close(ctx))
		}},
		{"list sessions (a management operation)", 10, func(t *testing.T) {
			pager := client.NewListSessionsForQueuePager("sessions", nil)
			_, err := pager.NextPage(ctx)
			require.NoError(t, err)
		}},
	}
	// One after the other: each measures the credits of its own operations.
	for _, tt := range tests {
		before := srv.PressureStats().Credits
		tt.op(t)
		require.Equal(t, tt.credits, srv.PressureStats().Credits-before, tt.name)
	}
}

func TestTransientErrors(t *testing.T) {
	t.Parallel()

	t.Run("every operation refused with a retryable timeout at rate 1", func(t *testing.T) {
		t.Parallel()
		srv := startPressured(t, emulator.Pressure{TransientErrorRate: 1})
		ctx := pressureCtx(t)
		sender, err := srv.NewClient(t, noRetries).NewSender("q", nil)
		require.NoError(t, err)
		err = sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
		var sbErr *azservicebus.Error
		require.ErrorAs(t, err, &sbErr, "com.microsoft:timeout is the SDK's CodeTimeout")
		require.Equal(t, azservicebus.CodeTimeout, sbErr.Code)
		require.Contains(t, err.Error(), "transient error injected by the emulator")
		info, err := srv.Broker().GetQueue("q")
		require.NoError(t, err)
		require.Zero(t, info.Counts.Active, "nothing was carried out")
		require.EqualValues(t, 1, srv.PressureStats().TransientErrors)
	})

	t.Run("the SDK's retries get everything through at rate 0.3", func(t *testing.T) {
		t.Parallel()
		srv := startPressured(t, emulator.Pressure{TransientErrorRate: 0.3})
		ctx := pressureCtx(t)
		client := srv.NewClient(t, &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{
			MaxRetries: 12, RetryDelay: time.Millisecond, MaxRetryDelay: 10 * time.Millisecond,
		}})
		sender, err := client.NewSender("q", nil)
		require.NoError(t, err)
		for range 20 {
			require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil))
		}
		sid := "s1"
		sessionSender, err := client.NewSender("sessions", nil)
		require.NoError(t, err)
		require.NoError(t, sessionSender.SendMessage(ctx, &azservicebus.Message{SessionID: &sid, Body: []byte("x")}, nil))
		r, err := client.AcceptSessionForQueue(ctx, "sessions", sid, nil)
		require.NoError(t, err)
		for range 10 {
			require.NoError(t, r.SetSessionState(ctx, []byte("state"), nil))
		}
		info, err := srv.Broker().GetQueue("q")
		require.NoError(t, err)
		require.EqualValues(t, 20, info.Counts.Active)
		require.Positive(t, srv.PressureStats().TransientErrors)
	})
}

func TestLatencyDelaysEveryAnswer(t *testing.T) {
	t.Parallel()
	const latency = 60 * time.Millisecond
	srv := startPressured(t, emulator.Pressure{Latency: latency, LatencyJitter: 10 * time.Millisecond})
	ctx := pressureCtx(t)
	sender, err := srv.NewClient(t, noRetries).NewSender("q", nil)
	require.NoError(t, err)
	require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("warm up: connect and attach")}, nil))

	start := time.Now()
	require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil))
	require.GreaterOrEqual(t, time.Since(start), latency, "the outcome of a send comes back after the latency")
}

package emulator_test

import (
	"errors"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
)

// The service's answer to a request on a session's messages without session-id, as
// azservicebus reports it once its retries are spent.
const noSessionIDAnswer = "rpc: failed, status code 500 and description: The service was unable to process the request; please retry the operation."

// TestSessionDeferralRoundTripWithStockSDK runs the stock SDK's deferral round trip on a
// session receiver (DeferMessage, ReceiveDeferredMessages, CompleteMessage). azservicebus
// sends receive-by-sequence-number and peek-message without session-id: on a partitioned
// session entity, or on any session entity under SessionIDAlways, the emulator refuses them
// as the service refused such requests (status 500, amqp:internal-error), and the deferred
// message stays at the broker. Elsewhere the round trip works.
func TestSessionDeferralRoundTripWithStockSDK(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// queue, or topic and subscription, is the entity; the session receiver uses it.
		queue        broker.EntityProperties
		topic        *broker.EntityProperties
		sub          broker.EntityProperties
		rule         broker.SessionIDRule
		wantRefusal  bool
		wantRuleText string
	}{
		{name: "session queue", queue: broker.EntityProperties{RequiresSession: true}},
		{name: "partitioned session queue", queue: broker.EntityProperties{RequiresSession: true, EnablePartitioning: true},
			wantRefusal: true, wantRuleText: "partitioned session entity"},
		{name: "session queue, session-id always required", queue: broker.EntityProperties{RequiresSession: true},
			rule: broker.SessionIDAlways, wantRefusal: true, wantRuleText: "session-id required on every session entity"},
		{name: "session subscription", topic: &broker.EntityProperties{}, sub: broker.EntityProperties{RequiresSession: true}},
		{name: "session subscription of a partitioned topic", topic: &broker.EntityProperties{EnablePartitioning: true},
			sub: broker.EntityProperties{RequiresSession: true}, wantRefusal: true, wantRuleText: "partitioned session entity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := &emulatortest.Options{ClientOptions: testClientOptions(), SessionIDRule: tt.rule}
			entity, path := "q", "q"
			if tt.topic != nil {
				entity, path = "t", "t/Subscriptions/s"
				opts.Topics = map[string]emulatortest.Topic{"t": {Properties: *tt.topic,
					Subscriptions: map[string]emulatortest.Subscription{"s": {Properties: tt.sub}}}}
			} else {
				opts.Queues = map[string]broker.EntityProperties{"q": tt.queue}
			}
			srv := emulatortest.Start(t, opts)
			ctx := testCtx(t)

			sender, err := srv.Client.NewSender(entity, nil)
			require.NoError(t, err)
			defer sender.Close(ctx)
			require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("early"), SessionID: ptr("a")}, nil))
			var sr *azservicebus.SessionReceiver
			if tt.topic != nil {
				sr, err = srv.Client.AcceptSessionForSubscription(ctx, "t", "s", "a", nil)
			} else {
				sr, err = srv.Client.AcceptSessionForQueue(ctx, "q", "a", nil)
			}
			require.NoError(t, err)
			defer sr.Close(ctx)

			m := receiveN(ctx, t, sr, 1)[0]
			require.NoError(t, sr.DeferMessage(ctx, m, nil), "deferral goes over the receiver link")
			got, err := sr.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
			_, peekErr := sr.PeekMessages(ctx, 10, nil)
			if !tt.wantRefusal {
				require.NoError(t, err)
				require.Len(t, got, 1)
				require.Equal(t, "early", string(got[0].Body))
				require.NoError(t, sr.CompleteMessage(ctx, got[0], nil), "settled through $management")
				require.NoError(t, peekErr)
				e, err := srv.Broker().Lookup(path)
				require.NoError(t, err)
				require.Zero(t, e.Info().Counts.Active, "completed")
				return
			}
			for what, err := range map[string]error{"receive deferred": err, "peek": peekErr} {
				require.Error(t, err, what)
				require.ErrorContains(t, err, noSessionIDAnswer, what)
				require.ErrorContains(t, err, tt.wantRuleText, what)
				// azservicebus gives it no Code, and it is no go-amqp error: a management
				// response, not a link or connection failure.
				var sbErr *azservicebus.Error
				require.False(t, errors.As(err, &sbErr), "%s: %v", what, err)
				var amqpErr *amqp.Error
				require.False(t, errors.As(err, &amqpErr), "%s: %v", what, err)
				var rpc interface{ RPCCode() int }
				require.True(t, errors.As(err, &rpc), "%s: %T", what, err)
				require.Equal(t, 500, rpc.RPCCode(), what)
			}
			require.Empty(t, got)
			e, err := srv.Broker().Lookup(path)
			require.NoError(t, err)
			require.EqualValues(t, 1, e.Info().Counts.Active, "the deferred message stays at the broker")
			peeked := e.Peek(1, 10, "a")
			require.Len(t, peeked, 1)
			require.Equal(t, *m.SequenceNumber, peeked[0].Annotations["x-opt-sequence-number"])
		})
	}
}

// TestPartitionedQueueWithoutSessions: partitioning alone changes nothing for a queue
// without sessions; the deferral round trip of a plain receiver works.
func TestPartitionedQueueWithoutSessions(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"pq": {EnablePartitioning: true}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "pq").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil))
	r := b.receiver(t, "pq", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.NoError(t, r.DeferMessage(ctx, m, nil))
	got, err := r.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, r.CompleteMessage(ctx, got[0], nil))
	peeked, err := r.PeekMessages(ctx, 10, nil)
	require.NoError(t, err)
	require.Empty(t, peeked)
}

// TestSessionIDRuleOfConfigJSON: a Config.json declares partitioning and can ask for
// session-id on every session entity; Config.SessionIDRule alone does the same.
func TestSessionIDRuleOfConfigJSON(t *testing.T) {
	t.Parallel()
	const file = `{"UserConfig": {"SessionIdRequired": "Always", "Namespaces": [{"Name": "ns",
		"Queues": [{"Name": "pq", "Properties": {"RequiresSession": true, "EnablePartitioning": true}},
		           {"Name": "sq", "Properties": {"RequiresSession": true}}]}]}}`
	uc, err := broker.ParseUserConfig([]byte(file))
	require.NoError(t, err)
	require.Equal(t, broker.SessionIDAlways, uc.SessionIDRule)

	tests := []struct {
		name     string
		cfg      emulator.Config
		wantSQ   bool // sq needs session-id
		wantRule broker.SessionIDRule
	}{
		{"file asks for always", emulator.Config{UserConfig: uc}, true, broker.SessionIDAlways},
		{"config asks for always", emulator.Config{SessionIDRule: broker.SessionIDAlways, UserConfig: withRule(uc, broker.SessionIDOnPartitioned)}, true, broker.SessionIDAlways},
		{"neither", emulator.Config{UserConfig: withRule(uc, broker.SessionIDOnPartitioned)}, false, broker.SessionIDOnPartitioned},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := emulatortest.Start(t, &emulatortest.Options{Config: tt.cfg})
			require.Equal(t, tt.wantRule, srv.Broker().SessionIDRule())
			pq, err := srv.Broker().Lookup("pq")
			require.NoError(t, err)
			require.True(t, pq.Partitioned())
			require.True(t, pq.NeedsSessionID())
			sq, err := srv.Broker().Lookup("sq")
			require.NoError(t, err)
			require.False(t, sq.Partitioned())
			require.Equal(t, tt.wantSQ, sq.NeedsSessionID())
		})
	}
}

func withRule(uc *broker.UserConfig, r broker.SessionIDRule) *broker.UserConfig {
	c := *uc
	c.SessionIDRule = r
	return &c
}

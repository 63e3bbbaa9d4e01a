package worker

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
)

// Without the Manage right the round trip runs on a session of its own in the worker's queue,
// locked before anything is sent to it, and leaves nothing behind: its dead letter is taken out
// of the dead-letter queue, the dead letters ahead of it stay. On a subscription it is skipped.
// (The emulator has one key with every right, so the round trip is called as RunDoctor calls it
// when the management API refused the credentials.)
func TestDoctorRoundTripWithoutManage(t *testing.T) {
	t.Parallel()
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues: map[string]broker.EntityProperties{"orders": {RequiresSession: true}},
		Topics: map[string]emulatortest.Topic{"events": {Subscriptions: map[string]emulatortest.Subscription{
			"billing": {Properties: broker.EntityProperties{RequiresSession: true}},
		}}},
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// A dead letter of the application's, ahead of the round trip's.
	sid := "order-1"
	sender, err := srv.Client.NewSender("orders", nil)
	require.NoError(t, err)
	require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{SessionID: &sid, Body: []byte("poison")}, nil))
	require.NoError(t, sender.Close(ctx))
	r, err := srv.Client.AcceptSessionForQueue(ctx, "orders", sid, nil)
	require.NoError(t, err)
	msgs, err := r.ReceiveMessages(ctx, 1, nil)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.NoError(t, r.DeadLetterMessage(ctx, msgs[0], nil))
	require.NoError(t, r.Close(ctx))

	run := func(t *testing.T, entity sbadapter.Entity) DoctorReport {
		cfg := DefaultConfig()
		cfg.ConnectionString, cfg.Entity, cfg.HTTPAddr = srv.ConnectionString(), entity, HTTPOff
		cfg.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
		conn, err := Connect(ctx, cfg)
		require.NoError(t, err)
		defer conn.Close(ctx)
		d := &doctor{cfg: cfg, log: slog.New(slog.DiscardHandler), step: 10 * time.Second, conn: conn, report: &DoctorReport{}}
		d.roundTrip(ctx, EntityProperties{Kind: "queue", RequiresSession: true}, false)
		return *d.report
	}

	t.Run("queue", func(t *testing.T) {
		rep := run(t, sbadapter.Entity{Queue: "orders"})
		var out strings.Builder
		require.NoError(t, rep.WriteTable(&out))
		require.False(t, rep.Failed(), out.String())
		var checks []string
		for _, c := range rep.Checks {
			require.Equal(t, DoctorPass, c.Result, "%s\n%s", c.Check, out.String())
			checks = append(checks, c.Check)
		}
		require.Equal(t, []string{
			"round trip: reserved session", "round trip: accept a session", "round trip: send", "round trip: receive",
			"round trip: defer", "round trip: receive deferred", "round trip: complete", "round trip: dead-letter",
			"round trip: set and get session state", "round trip: renew the lock", "round trip: remove the dead letter",
		}, checks)

		// Nothing of the round trip is left: the queue is empty, its dead-letter queue holds the
		// application's dead letter only, and it is available again.
		props, err := srv.NewAdminClient(t).GetQueueRuntimeProperties(ctx, "orders", nil)
		require.NoError(t, err)
		require.Zero(t, props.ActiveMessageCount)
		require.Zero(t, props.ScheduledMessageCount)
		require.EqualValues(t, 1, props.DeadLetterMessageCount)
		dlq, err := srv.Client.NewReceiverForQueue("orders", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
		require.NoError(t, err)
		defer dlq.Close(ctx)
		got, err := dlq.ReceiveMessages(ctx, 1, nil)
		require.NoError(t, err)
		require.Len(t, got, 1, "the dead letter held during the search was abandoned")
		require.Equal(t, sid, *got[0].SessionID)
	})

	t.Run("subscription", func(t *testing.T) {
		rep := run(t, sbadapter.Entity{Topic: "events", Subscription: "billing"})
		require.Len(t, rep.Checks, 1)
		require.Equal(t, DoctorSkip, rep.Checks[0].Result)
		require.Contains(t, rep.Checks[0].Detail, "subscription")
		require.Contains(t, rep.Checks[0].Action, "Manage")
	})
}

// A step that fails is a failed line with the broker's answer; the steps after it are skipped,
// and the scratch queue is deleted all the same.
func TestDoctorRoundTripStepFails(t *testing.T) {
	t.Parallel()
	srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"orders": {RequiresSession: true}}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cfg := DefaultConfig()
	cfg.ConnectionString, cfg.Entity, cfg.HTTPAddr = srv.ConnectionString(), sbadapter.Entity{Queue: "orders"}, HTTPOff
	conn, err := Connect(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	d := &doctor{cfg: cfg, log: slog.New(slog.DiscardHandler), step: 10 * time.Second, conn: conn, report: &DoctorReport{}}

	// The round trip's first $management request is the receive of the deferred message.
	srv.DropConnectionOnNextManagementCalls(1)
	d.roundTrip(ctx, EntityProperties{Kind: "queue", RequiresSession: true, Partitioned: true}, true)
	rep := *d.report
	var out strings.Builder
	require.NoError(t, rep.WriteTable(&out))
	require.True(t, rep.Failed(), out.String())
	results := map[string]DoctorResult{}
	for _, c := range rep.Checks {
		results[c.Check] = c.Result
		if c.Check == "round trip: receive deferred" {
			require.Contains(t, c.Detail, "the failure known on partitioned entities", out.String())
		}
	}
	require.Equal(t, map[string]DoctorResult{
		"round trip: scratch queue": DoctorPass, "round trip: send": DoctorPass, "round trip: accept a session": DoctorPass,
		"round trip: receive": DoctorPass, "round trip: defer": DoctorPass, "round trip: receive deferred": DoctorFail,
		"round trip: complete": DoctorSkip, "round trip: dead-letter": DoctorSkip, "round trip: set and get session state": DoctorSkip,
		"round trip: renew the lock": DoctorSkip, "round trip: delete the scratch queue": DoctorPass,
	}, results, out.String())
}

func TestWrap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		width int
		want  []string
	}{
		{"", 10, []string{""}},
		{"one two three", 20, []string{"one two three"}},
		{"one two three", 7, []string{"one two", "three"}},
		{"one\ntwo  three", 3, []string{"one", "two", "three"}},
		{"averyveryverylongword x", 5, []string{"averyveryverylongword", "x"}},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, wrap(tt.in, tt.width), "%q at %d", tt.in, tt.width)
	}
}

package emulator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/internal/sas"
)

func TestWrongKeyIsUnauthorized(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	bad := newClient(t, strings.Replace(b.srv.ConnectionString(), "SharedAccessKey=SAS_KEY_VALUE", "SharedAccessKey=wrong", 1))
	s, err := bad.NewSender("q1", nil)
	require.NoError(t, err)
	err = s.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	requireCode(t, err, azservicebus.CodeUnauthorizedAccess)

	r, err := bad.NewReceiverForQueue("q1", nil)
	require.NoError(t, err)
	_, err = r.ReceiveMessages(ctx, 1, nil)
	requireCode(t, err, azservicebus.CodeUnauthorizedAccess)
}

func TestUnknownKeyNameIsUnauthorized(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	bad := newClient(t, strings.Replace(b.srv.ConnectionString(), "SharedAccessKeyName=RootManageSharedAccessKey", "SharedAccessKeyName=someone", 1))
	s, err := bad.NewSender("q1", nil)
	require.NoError(t, err)
	requireCode(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil), azservicebus.CodeUnauthorizedAccess)
}

func TestMissingEntityIsNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := testCtx(t)
	s, err := b.client.NewSender("nope", nil)
	require.NoError(t, err)
	requireCode(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil), azservicebus.CodeNotFound)

	r, err := b.client.NewReceiverForQueue("nope", nil)
	require.NoError(t, err)
	_, err = r.ReceiveMessages(ctx, 1, nil)
	requireCode(t, err, azservicebus.CodeNotFound)
}

func TestDropConnectionsRecovers(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	s := b.sender(t, "q1")
	r := b.receiver(t, "q1", nil)
	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("before")}, nil))
	m := receiveN(ctx, t, r, 1)[0]
	require.NoError(t, r.CompleteMessage(ctx, m, nil))

	require.Equal(t, 1, b.srv.DropConnections())

	require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte("after")}, nil))
	m = receiveN(ctx, t, r, 1)[0]
	require.Equal(t, "after", string(m.Body))
	require.NoError(t, r.CompleteMessage(ctx, m, nil))
}

func TestMessageLockSurvivesLinkLossAndSettlesViaManagement(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.Equal(t, 2, b.srv.DetachEntityLinks("q1"), "the sender and the receiver link")
	// The receiver link is gone; the SDK settles through $management instead.
	require.NoError(t, r.CompleteMessage(ctx, m, nil))
	info, err := b.srv.Broker().GetQueue("q1")
	require.NoError(t, err)
	require.Zero(t, info.Counts.Active)
}

func TestFailNextManagementCallsIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil))
	r := b.receiver(t, "q1", nil)
	b.srv.FailNextManagementCalls(1)
	msgs, err := r.PeekMessages(ctx, 1, nil)
	require.NoError(t, err, "the SDK retries a 503")
	require.Len(t, msgs, 1)
}

func TestExpireMessageLockHook(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil))
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	require.NoError(t, b.srv.ExpireMessageLock(m.LockToken))
	requireCode(t, r.CompleteMessage(ctx, m, nil), azservicebus.CodeLockLost)
	m = receiveN(ctx, t, r, 1)[0]
	require.Equal(t, uint32(2), m.DeliveryCount)
	require.Error(t, b.srv.ExpireMessageLock([16]byte{1}))
}

func TestCloseWithOpenClientDoesNotHang(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	r := b.receiver(t, "q1", nil)
	go func() { _, _ = r.ReceiveMessages(ctx, 1, nil) }() // a pump blocked in the broker
	time.Sleep(100 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- b.srv.Close() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung")
	}
	_ = context.Background()
}

func TestDropConnectionsReleasesSessionLocksButKeepsMessageLocks(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{
		"q1": {},
		"sq": {RequiresSession: true},
	}})
	ctx := testCtx(t)
	require.NoError(t, b.sender(t, "q1").SendMessage(ctx, &azservicebus.Message{Body: []byte("locked")}, nil))
	sendToSession(ctx, t, b.sender(t, "sq"), "a", "a1")
	r := b.receiver(t, "q1", nil)
	m := receiveN(ctx, t, r, 1)[0]
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	defer sr.Close(ctx)

	require.Equal(t, 1, b.srv.DropConnections())

	// The session lock went with the connection: another client takes it at once.
	other := b.srv.NewClient(t, testClientOptions())
	sr2, err := other.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	require.NoError(t, sr2.Close(ctx))

	// The message lock outlives the connection (Service Bus keeps it until it
	// expires): another receiver does not get the message meanwhile.
	r2, err := other.NewReceiverForQueue("q1", nil)
	require.NoError(t, err)
	shortCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	msgs, err := r2.ReceiveMessages(shortCtx, 1, nil)
	if err != nil {
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	require.Empty(t, msgs, "a locked message is not redelivered")
	require.NoError(t, b.srv.ExpireMessageLock(m.LockToken), "the lock is still held")
	again := receiveN(ctx, t, r2, 1)[0]
	require.Equal(t, "locked", string(again.Body))
	require.Equal(t, uint32(2), again.DeliveryCount)
	require.NoError(t, r2.CompleteMessage(ctx, again, nil))
}

func TestExpiredSharedAccessSignatureIsUnauthorized(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"q1": {}}})
	ctx := testCtx(t)
	audience := "amqp://" + b.srv.AMQPAddr() + "/"
	for _, tc := range []struct {
		name   string
		expiry time.Time
		ok     bool
	}{
		{name: "expired", expiry: time.Now().Add(-time.Minute)},
		{name: "valid", expiry: time.Now().Add(time.Hour), ok: true},
	} {
		token := sas.Sign(emulator.DefaultKeyName, emulator.DefaultKey, audience, tc.expiry)
		client := newClient(t, "Endpoint=sb://"+b.srv.AMQPAddr()+";SharedAccessSignature="+token+";UseDevelopmentEmulator=true")
		s, err := client.NewSender("q1", nil)
		require.NoError(t, err)
		err = s.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
		if tc.ok {
			require.NoError(t, err, tc.name)
		} else {
			requireCode(t, err, azservicebus.CodeUnauthorizedAccess)
		}
	}
}

func TestSessionReceiverRecoversAfterDrop(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{queues: map[string]broker.EntityProperties{"sq": {RequiresSession: true}}})
	ctx := testCtx(t)
	s := b.sender(t, "sq")
	sendToSession(ctx, t, s, "a", "a1")
	sr, err := b.client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	require.NoError(t, err)
	defer sr.Close(ctx)
	m := receiveN(ctx, t, sr, 1)[0]
	require.NoError(t, sr.CompleteMessage(ctx, m, nil))

	b.srv.DropConnections()
	sendToSession(ctx, t, s, "a", "a2")
	// The SDK re-attaches the same session (its lock went with the old connection).
	m = receiveN(ctx, t, sr, 1)[0]
	require.Equal(t, "a2", string(m.Body))
	require.NoError(t, sr.CompleteMessage(ctx, m, nil))
	require.NoError(t, sr.SetSessionState(ctx, []byte("after-drop"), nil))
	st, err := sr.GetSessionState(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []byte("after-drop"), st)
}

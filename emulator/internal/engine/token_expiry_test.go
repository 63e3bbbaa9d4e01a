package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/internal/engine"
	"github.com/seqbus/seqbus/emulator/internal/sas"
)

// wallClock is a settable stand-in for the wall clock tokens are checked with.
type wallClock struct {
	mu  sync.Mutex
	now time.Time
}

func (w *wallClock) Now() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

func (w *wallClock) advance(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now = w.now.Add(d)
}

// rpcLinks is a request/response link pair to a $cbs or $management node.
type rpcLinks struct {
	node string
	snd  *amqp.Sender
	rcv  *amqp.Receiver
	n    int
}

func openRPC(ctx context.Context, t *testing.T, s *amqp.Session, node string) *rpcLinks {
	t.Helper()
	rcv, err := s.NewReceiver(ctx, node, &amqp.ReceiverOptions{TargetAddress: node + "-reply", Credit: 10})
	require.NoError(t, err)
	snd, err := s.NewSender(ctx, node, nil)
	require.NoError(t, err)
	return &rpcLinks{node: node, snd: snd, rcv: rcv}
}

// do sends one request and returns the response's status code.
func (r *rpcLinks) do(ctx context.Context, t *testing.T, req *amqp.Message) int32 {
	t.Helper()
	r.n++
	req.Properties = &amqp.MessageProperties{MessageID: fmt.Sprintf("req-%d", r.n), ReplyTo: ptrTo(r.node + "-reply")}
	require.NoError(t, r.snd.Send(ctx, req, nil))
	resp, err := r.rcv.Receive(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, r.rcv.AcceptMessage(ctx, resp))
	code, ok := resp.ApplicationProperties["status-code"].(int32)
	require.True(t, ok, "status-code is %T", resp.ApplicationProperties["status-code"])
	return code
}

// putToken puts a SAS token for audience on $cbs and returns the status code.
func putToken(ctx context.Context, t *testing.T, cbs *rpcLinks, audience, token string) int32 {
	t.Helper()
	return cbs.do(ctx, t, &amqp.Message{Value: token, ApplicationProperties: map[string]any{
		"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience,
	}})
}

func peek(ctx context.Context, t *testing.T, mgmt *rpcLinks) int32 {
	t.Helper()
	return mgmt.do(ctx, t, &amqp.Message{
		Value:                 map[string]any{"from-sequence-number": int64(1), "message-count": int32(1)},
		ApplicationProperties: map[string]any{"operation": "com.microsoft:peek-message"},
	})
}

func ptrTo[T any](v T) *T { return &v }

// TestExpiredTokenStopsOpenLinks: a token is checked when it is put and again
// while the links it authorized are used, so links outliving their token are
// refused, as on the service.
func TestExpiredTokenStopsOpenLinks(t *testing.T) {
	t.Parallel()
	wall := &wallClock{now: time.Now()}
	addr, b := startServer(t, engine.Config{Now: wall.Now})
	q, err := b.Lookup("q1")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := dialGoAMQP(t, addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
	s, err := c.NewSession(ctx, nil)
	require.NoError(t, err)
	audience := "amqp://" + addr + "/q1"
	cbs := openRPC(ctx, t, s, "$cbs")
	require.Equal(t, int32(202), putToken(ctx, t, cbs, audience, sas.Sign(keyName, key, audience, wall.Now().Add(time.Minute))))

	snd, err := s.NewSender(ctx, "q1", nil)
	require.NoError(t, err)
	require.NoError(t, snd.Send(ctx, amqp.NewMessage([]byte("in time")), nil))
	rcv, err := s.NewReceiver(ctx, "q1", &amqp.ReceiverOptions{SettlementMode: amqp.ReceiverSettleModeSecond.Ptr(), Credit: 10})
	require.NoError(t, err)
	m, err := rcv.Receive(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, rcv.AcceptMessage(ctx, m))
	mgmt := openRPC(ctx, t, s, "q1/$management")
	require.Equal(t, int32(204), peek(ctx, t, mgmt), "management works with the token (nothing to peek)")

	wall.advance(2 * time.Minute)
	require.Equal(t, int32(401), peek(ctx, t, mgmt), "management refused once the token expired")
	err = snd.Send(ctx, amqp.NewMessage([]byte("too late")), nil)
	var amqpErr *amqp.Error
	require.ErrorAs(t, err, &amqpErr)
	require.Equal(t, amqp.ErrCondUnauthorizedAccess, amqpErr.Condition)
	require.Zero(t, q.Info().Counts.Active, "the late message was not enqueued")

	// A message reaching the queue is not handed to a receiver whose token expired.
	require.NoError(t, q.Send(ctx, []*amqp.Message{amqp.NewMessage([]byte("waiting"))}))
	_, err = rcv.Receive(ctx, nil)
	require.ErrorAs(t, err, &amqpErr)
	require.Equal(t, amqp.ErrCondUnauthorizedAccess, amqpErr.Condition)
	require.Equal(t, int64(1), q.Info().Counts.Active, "the message stays in the queue")

	// A fresh token lets a new link work again.
	require.Equal(t, int32(202), putToken(ctx, t, cbs, audience, sas.Sign(keyName, key, audience, wall.Now().Add(time.Minute))))
	require.Equal(t, int32(200), peek(ctx, t, mgmt), "the management link works again (peeks the waiting message)")
	snd2, err := s.NewSender(ctx, "q1", nil)
	require.NoError(t, err)
	require.NoError(t, snd2.Send(ctx, amqp.NewMessage([]byte("renewed")), nil))
}

package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator/broker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type bundle struct {
	b   *broker.Broker
	clk *clock.Fake
}

func setup(t *testing.T) *bundle {
	t.Helper()
	clk := clock.NewFake(epoch)
	b := broker.New(broker.Config{Clock: clk})
	t.Cleanup(b.Close)
	return &bundle{b: b, clk: clk}
}

// queue creates a queue and returns its entity.
func (tb *bundle) queue(t *testing.T, name string, p broker.EntityProperties) *broker.Entity {
	t.Helper()
	require.NoError(t, tb.b.CreateQueue(name, p))
	return tb.lookup(t, name)
}

func (tb *bundle) lookup(t *testing.T, addr string) *broker.Entity {
	t.Helper()
	e, err := tb.b.Lookup(addr)
	require.NoError(t, err)
	return e
}

func msg(body string) *amqp.Message { return amqp.NewMessage([]byte(body)) }

func sessionMsg(session, body string) *amqp.Message {
	m := msg(body)
	m.Properties = &amqp.MessageProperties{GroupID: &session}
	return m
}

func send(t *testing.T, e *broker.Entity, msgs ...*amqp.Message) {
	t.Helper()
	require.NoError(t, e.Send(context.Background(), msgs))
}

func sendN(t *testing.T, e *broker.Entity, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		send(t, e, msg(fmt.Sprintf("m%d", i)))
	}
}

// receiveNow receives what is available without waiting.
func receiveNow(t *testing.T, e *broker.Entity, max int, o broker.ReceiveOptions) []*broker.Delivery {
	t.Helper()
	ds, err := e.TryReceive(max, o)
	require.NoError(t, err)
	return ds
}

func receiveOne(t *testing.T, e *broker.Entity, o broker.ReceiveOptions) *broker.Delivery {
	t.Helper()
	ds := receiveNow(t, e, 1, o)
	require.Len(t, ds, 1, "expected a message on %s", e.Path())
	return ds[0]
}

func bodies(ds []*broker.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Message.GetData())
	}
	return out
}

func seqs(ds []*broker.Delivery) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.SequenceNumber
	}
	return out
}

func peekBodies(ms []*amqp.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.GetData())
	}
	return out
}

// deliveryCount is what the SDK shows: header delivery-count + 1.
func deliveryCount(d *broker.Delivery) uint32 { return d.Message.Header.DeliveryCount + 1 }

var peekLock = broker.ReceiveOptions{Mode: broker.PeekLock}

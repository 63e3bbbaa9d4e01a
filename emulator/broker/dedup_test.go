package broker_test

import (
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

// idMsg returns a message with a MessageId ("" for none) whose body is body.
func idMsg(id any, body string) *amqp.Message {
	m := msg(body)
	if id != "" {
		m.Properties = &amqp.MessageProperties{MessageID: id}
	}
	return m
}

func TestDuplicateDetection(t *testing.T) {
	t.Parallel()
	type step struct {
		after time.Duration // advance the clock first
		msgs  []*amqp.Message
	}
	dedup := broker.EntityProperties{RequiresDuplicateDetection: true, DuplicateDetectionHistoryTimeWindow: time.Minute}
	tests := []struct {
		name  string
		props broker.EntityProperties
		steps []step
		want  []string
	}{
		{"repeat inside the window is dropped", dedup,
			[]step{{0, []*amqp.Message{idMsg("x", "1")}}, {59 * time.Second, []*amqp.Message{idMsg("x", "2")}}}, []string{"1"}},
		{"repeat after the window is accepted", dedup,
			[]step{{0, []*amqp.Message{idMsg("x", "1")}}, {time.Minute, []*amqp.Message{idMsg("x", "2")}}}, []string{"1", "2"}},
		{"a dropped repeat does not extend the window", dedup,
			[]step{{0, []*amqp.Message{idMsg("x", "1")}}, {30 * time.Second, []*amqp.Message{idMsg("x", "2")}},
				{30 * time.Second, []*amqp.Message{idMsg("x", "3")}}}, []string{"1", "3"}},
		{"duplicates within one batch", dedup,
			[]step{{0, []*amqp.Message{idMsg("x", "1"), idMsg("y", "2"), idMsg("x", "3"), idMsg("y", "4"), idMsg("z", "5")}}},
			[]string{"1", "2", "5"}},
		{"messages without MessageId are never duplicates", dedup,
			[]step{{0, []*amqp.Message{idMsg("", "1"), idMsg("", "2")}}}, []string{"1", "2"}},
		{"ids of different AMQP types differ", dedup,
			[]step{{0, []*amqp.Message{idMsg("1", "1"), idMsg(uint64(1), "2"), idMsg(uint64(1), "3")}}}, []string{"1", "2"}},
		{"default window is 10 minutes", broker.EntityProperties{RequiresDuplicateDetection: true},
			[]step{{0, []*amqp.Message{idMsg("x", "1")}}, {9 * time.Minute, []*amqp.Message{idMsg("x", "2")}},
				{time.Minute, []*amqp.Message{idMsg("x", "3")}}}, []string{"1", "3"}},
		{"off unless required", broker.EntityProperties{DuplicateDetectionHistoryTimeWindow: time.Minute},
			[]step{{0, []*amqp.Message{idMsg("x", "1"), idMsg("x", "2")}}}, []string{"1", "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, kind := range []string{"queue", "topic"} {
				tb := setup(t)
				var in, out *broker.Entity
				if kind == "queue" {
					in = tb.queue(t, "q", tt.props)
					out = in
				} else {
					require.NoError(t, tb.b.CreateTopic("t", tt.props))
					require.NoError(t, tb.b.CreateSubscription("t", "s", broker.EntityProperties{}))
					in, out = tb.lookup(t, "t"), tb.lookup(t, "t/Subscriptions/s")
				}
				for _, s := range tt.steps {
					tb.clk.Advance(s.after)
					send(t, in, s.msgs...)
				}
				require.Equal(t, tt.want, bodies(receiveNow(t, out, 10, peekLock)), kind)
			}
		})
	}
}

func TestDuplicateDetectionAppliesToForwardedMessages(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	dst := tb.queue(t, "dst", broker.EntityProperties{RequiresDuplicateDetection: true})
	src := tb.queue(t, "src", broker.EntityProperties{ForwardTo: "dst"})
	send(t, src, idMsg("x", "1"))
	send(t, src, idMsg("x", "2"))
	send(t, dst, idMsg("x", "3"))
	require.Equal(t, []string{"1"}, bodies(receiveNow(t, dst, 10, peekLock)))
	require.Equal(t, int64(0), counts(t, src).Total)
}

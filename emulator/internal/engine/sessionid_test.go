package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/internal/engine"
)

// call sends one request and returns the response.
func (r *rpcLinks) call(ctx context.Context, t *testing.T, req *amqp.Message) *amqp.Message {
	t.Helper()
	r.n++
	req.Properties = &amqp.MessageProperties{MessageID: fmt.Sprintf("req-%d", r.n), ReplyTo: ptrTo(r.node + "-reply")}
	require.NoError(t, r.snd.Send(ctx, req, nil))
	resp, err := r.rcv.Receive(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, r.rcv.AcceptMessage(ctx, resp))
	return resp
}

// TestSessionOperationsWithoutSessionID: receive-by-sequence-number, update-disposition and
// peek-message without session-id fail on a partitioned session queue (and, under
// SessionIDAlways, on every session queue) with status 500, amqp:internal-error and the
// service's text; with session-id, or on other entities, they run as before (here: the
// sequence number, the lock token are unknown; the peek finds the locked message, or nothing
// of a session the client does not hold).
func TestSessionOperationsWithoutSessionID(t *testing.T) {
	t.Parallel()
	type op struct {
		name string
		body map[string]any
	}
	ops := []op{
		{"com.microsoft:receive-by-sequence-number", map[string]any{"sequence-numbers": []int64{999}, "receiver-settle-mode": uint32(1)}},
		{"com.microsoft:update-disposition", map[string]any{"lock-tokens": []amqp.UUID{{1}}, "disposition-status": "completed"}},
		{"com.microsoft:peek-message", map[string]any{"from-sequence-number": int64(1), "message-count": int32(10)}},
	}
	// What each op answers when the request gets past the session-id check.
	passed := map[string]int32{
		"com.microsoft:receive-by-sequence-number": 404,
		"com.microsoft:update-disposition":         410,
		"com.microsoft:peek-message":               200,
	}
	// A session-id naming a session this client does not hold gets past the check too; the
	// operation then finds nothing of it.
	other := map[string]int32{
		"com.microsoft:receive-by-sequence-number": 410,
		"com.microsoft:update-disposition":         410,
		"com.microsoft:peek-message":               204,
	}
	tests := []struct {
		name      string
		rule      broker.SessionIDRule
		entity    string
		sessionID string
		refused   bool
		want      map[string]int32
	}{
		{"partitioned session queue", broker.SessionIDOnPartitioned, "ps", "", true, nil},
		{"partitioned session queue with session-id", broker.SessionIDOnPartitioned, "ps", "a", false, passed},
		{"partitioned session queue with another session-id", broker.SessionIDOnPartitioned, "ps", "b", false, other},
		{"session queue", broker.SessionIDOnPartitioned, "sq", "", false, passed},
		{"session queue, always", broker.SessionIDAlways, "sq", "", true, nil},
		{"session queue with session-id, always", broker.SessionIDAlways, "sq", "a", false, passed},
	}
	for _, tt := range tests {
		for _, o := range ops {
			t.Run(tt.name+"/"+o.name, func(t *testing.T) {
				t.Parallel()
				b := broker.New(broker.Config{SessionIDRule: tt.rule})
				require.NoError(t, b.CreateQueue("ps", broker.EntityProperties{RequiresSession: true, EnablePartitioning: true}))
				require.NoError(t, b.CreateQueue("sq", broker.EntityProperties{RequiresSession: true}))
				addr := serveBroker(t, engine.Config{}, b)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				e, err := b.Lookup(tt.entity)
				require.NoError(t, err)
				require.NoError(t, e.Send(ctx, []*amqp.Message{{Properties: &amqp.MessageProperties{GroupID: ptrTo("a")}, Data: [][]byte{[]byte("m")}}}))

				c := dialGoAMQP(t, addr, plain())
				s, err := c.NewSession(ctx, nil)
				require.NoError(t, err)
				rcv, err := s.NewReceiver(ctx, tt.entity, &amqp.ReceiverOptions{Name: "sr", Credit: 1,
					Filters: []amqp.LinkFilter{amqp.NewLinkFilter("com.microsoft:session-filter", 0x137000000c, "a")}})
				require.NoError(t, err)
				_, err = rcv.Receive(ctx, nil) // locked now, so the peek finds it
				require.NoError(t, err)
				mgmt := openRPC(ctx, t, s, tt.entity+"/$management")

				body := map[string]any{}
				for k, v := range o.body {
					body[k] = v
				}
				if tt.sessionID != "" {
					body["session-id"] = tt.sessionID
				}
				resp := mgmt.call(ctx, t, &amqp.Message{Value: body, ApplicationProperties: map[string]any{
					"operation": o.name, "associated-link-name": "sr",
				}})
				code := resp.ApplicationProperties["status-code"]
				desc, _ := resp.ApplicationProperties["status-description"].(string)
				if !tt.refused {
					require.Equal(t, tt.want[o.name], code, desc)
					return
				}
				require.Equal(t, int32(500), code, desc)
				require.Equal(t, "amqp:internal-error", resp.ApplicationProperties["error-condition"])
				require.True(t, strings.HasPrefix(desc, "The service was unable to process the request; please retry the operation."), desc)
				require.Contains(t, desc, o.name)
				require.Contains(t, desc, "without session-id")
			})
		}
	}
}

package engine_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/amqpwire"
	"github.com/seqbus/seqbus/emulator/internal/engine"
)

func frameBytes(t testing.TB, ch uint16, body any, payload []byte) []byte {
	b, err := amqpwire.AppendFrame(nil, amqpwire.Frame{Type: amqpwire.FrameTypeAMQP, Channel: ch, Body: body, Payload: payload})
	require.NoError(t, err)
	return b
}

// FuzzConnection feeds arbitrary bytes to a server after a valid open and
// checks that it neither panics nor stops serving other connections.
func FuzzConnection(f *testing.F) {
	begin := frameBytes(f, 0, &amqpwire.Begin{IncomingWindow: 10, OutgoingWindow: 10}, nil)
	attach := frameBytes(f, 0, &amqpwire.Attach{Name: "l", Role: amqpwire.RoleSender, Target: &amqpwire.Target{Address: "$cbs"}}, nil)
	one := uint32(0)
	transfer := frameBytes(f, 0, &amqpwire.Transfer{Handle: 0, DeliveryID: &one, DeliveryTag: []byte{1}, More: true}, []byte{0x00, 0x53, 0x77, 0xa1, 0x03, 'a', 'b', 'c'})
	f.Add(begin)
	f.Add(append(append([]byte{}, begin...), attach...))
	f.Add(append(append(append([]byte{}, begin...), attach...), transfer...))
	f.Add(append(append([]byte{}, begin...), frameBytes(f, 0, &amqpwire.Detach{Handle: 5, Closed: true}, nil)...))
	f.Add(append(append([]byte{}, begin...), frameBytes(f, 0, &amqpwire.Disposition{Role: amqpwire.RoleReceiver, First: 0, Last: new(uint32)}, nil)...))
	f.Add([]byte{0, 0, 0, 8, 2, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0})
	f.Add([]byte("garbage that is not a frame at all"))

	addr, _ := startServer(f, engine.Config{})
	f.Fuzz(func(t *testing.T, data []byte) {
		nc := rawHandshake(t, addr)
		_, _ = nc.Write(data)
		_ = nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		br := bufio.NewReader(nc)
		for {
			if _, err := amqpwire.ReadFrame(br, 1<<20); err != nil {
				break
			}
		}
		// The server still accepts and serves a new connection.
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_ = c.Close()
		rawHandshake(t, addr)
	})
}

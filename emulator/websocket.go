package emulator

import (
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/coder/websocket"
)

// WebSocketPath is where AMQP over WebSockets is served, as on Service Bus
// (wss://<namespace>/$servicebus/websocket).
const WebSocketPath = "/$servicebus/websocket"

// webSocketSubprotocols are the subprotocols accepted for AMQP over
// WebSockets: AMQPWSB10 (the AMQP WebSocket binding, which the service and
// uamqp use) and amqp (what the Go SDK's example dials with).
var webSocketSubprotocols = []string{"AMQPWSB10", "amqp"}

// serveWebSocket upgrades a request to a WebSocket and serves AMQP over it.
func (s *Server) serveWebSocket(w http.ResponseWriter, r *http.Request) {
	if !offersSubprotocol(r) {
		http.Error(w, "AMQP over WebSockets needs the subprotocol AMQPWSB10 (Sec-WebSocket-Protocol)", http.StatusBadRequest)
		return
	}
	// Clients are not browsers: no Origin to check.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: webSocketSubprotocols, InsecureSkipVerify: true})
	if err != nil {
		s.cfg.Logger.Debug("emulator: websocket upgrade failed", slog.String("remote", r.RemoteAddr), slog.Any("error", err))
		return
	}
	ws.SetReadLimit(-1) // AMQP frames are bounded by the engine
	nc := websocket.NetConn(s.wsCtx, ws, websocket.MessageBinary)
	remote, _ := net.ResolveTCPAddr("tcp", r.RemoteAddr)
	s.engine.ServeConn(&wsConn{Conn: nc, remote: remote})
}

// offersSubprotocol reports whether the client asks for a subprotocol of AMQP over WebSockets.
func offersSubprotocol(r *http.Request) bool {
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(h, ",") {
			if slices.Contains(webSocketSubprotocols, strings.TrimSpace(p)) {
				return true
			}
		}
	}
	return false
}

// wsConn is a WebSocket stream with the client's address (the library's has none).
type wsConn struct {
	net.Conn
	remote *net.TCPAddr
}

func (c *wsConn) RemoteAddr() net.Addr {
	if c.remote == nil {
		return c.Conn.RemoteAddr()
	}
	return c.remote
}

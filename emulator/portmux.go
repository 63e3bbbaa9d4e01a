package emulator

import (
	"bufio"
	"net"
	"sync"
	"time"
)

// sniffTimeout bounds the wait for a new connection's first bytes.
const sniffTimeout = 10 * time.Second

// peekedConn is a connection whose first bytes were read into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// chanListener is a net.Listener fed with connections by the port sniffer.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// deliver hands c to the listener's Accept, or closes it once the listener is closed.
func (l *chanListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		_ = c.Close()
	}
}

// acceptAMQPPort accepts on the AMQP port and routes each connection by its
// first bytes: "AMQP" goes to the AMQP engine, anything else (an HTTP request
// of the admin client) to the HTTP handler.
func (s *Server) acceptAMQPPort() {
	defer s.wg.Done()
	for {
		nc, err := s.amqpLn.Accept()
		if err != nil {
			return
		}
		s.sniffMu.Lock()
		if s.sniffing == nil {
			s.sniffMu.Unlock()
			_ = nc.Close()
			return
		}
		s.sniffing[nc] = struct{}{}
		s.sniffMu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.route(nc)
		}()
	}
}

func (s *Server) route(nc net.Conn) {
	_ = nc.SetReadDeadline(time.Now().Add(sniffTimeout))
	br := bufio.NewReader(nc)
	head, err := br.Peek(4)
	_ = nc.SetReadDeadline(time.Time{})
	s.sniffMu.Lock()
	_, open := s.sniffing[nc]
	delete(s.sniffing, nc)
	s.sniffMu.Unlock()
	if err != nil || !open {
		_ = nc.Close()
		return
	}
	pc := &peekedConn{Conn: nc, r: br}
	if string(head) == "AMQP" {
		s.engine.ServeConn(pc)
		return
	}
	s.portHTTP.deliver(pc)
}

// stopSniffing closes connections still waiting to be routed.
func (s *Server) stopSniffing() {
	s.sniffMu.Lock()
	pending := s.sniffing
	s.sniffing = nil
	s.sniffMu.Unlock()
	for c := range pending {
		_ = c.Close()
	}
}

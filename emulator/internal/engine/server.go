package engine

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/internal/sas"
)

// Config configures a Server.
type Config struct {
	// Broker holds the entities. Required.
	Broker *broker.Broker
	// Keys maps shared access key names to keys; put-token checks against them.
	Keys map[string]string
	// MaxMessageSize is announced on sender attaches and enforced on
	// transfers. Default broker.DefaultMaxMessageSize.
	MaxMessageSize int64
	// IdleTimeout is the idle-time-out the server announces; it drops
	// connections silent for twice that long. Default 60s.
	IdleTimeout time.Duration
	// AcceptNextTimeout is how long an accept-next-session attach waits when
	// the client gives no com.microsoft:timeout. Default 60s.
	AcceptNextTimeout time.Duration
	// Logger receives connection events. Default: discard.
	Logger *slog.Logger
	// Now returns the wall-clock time used for token expiry. Default time.Now.
	// (The SDK signs tokens with the wall clock, so a fake broker clock must
	// not be used here.)
	Now func() time.Time
	// Pressure is the load of a busy namespace put on clients (pressure.go). Default: none.
	Pressure Pressure
}

// Server accepts AMQP connections and serves them against a broker.
type Server struct {
	cfg      Config
	log      *slog.Logger
	verifier sas.Verifier

	failMgmt atomic.Int64
	dropMgmt atomic.Int64
	pressure *pressure // nil: none

	mu     sync.Mutex
	conns  map[*conn]struct{}
	lns    map[net.Listener]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New returns a server for cfg. It panics if cfg.Broker is nil.
func New(cfg Config) *Server {
	if cfg.Broker == nil {
		panic("engine.Config.Broker is required")
	}
	cfg.MaxMessageSize = cmp.Or(cfg.MaxMessageSize, broker.DefaultMaxMessageSize)
	cfg.IdleTimeout = cmp.Or(cfg.IdleTimeout, 60*time.Second)
	cfg.AcceptNextTimeout = cmp.Or(cfg.AcceptNextTimeout, 60*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Pressure != (Pressure{}) {
		cfg.Logger.Info("engine: pressure on", slog.String("pressure", describePressure(cfg.Pressure)))
	}
	return &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		pressure: newPressure(cfg.Pressure, cfg.Now),
		verifier: sas.Verifier{Keys: cfg.Keys, Now: cfg.Now},
		conns:    make(map[*conn]struct{}),
		lns:      make(map[net.Listener]struct{}),
	}
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("engine: server closed")

// Serve accepts connections on l until l fails or the server is closed. It
// always returns a non-nil error (ErrServerClosed after Close).
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = l.Close()
		return ErrServerClosed
	}
	s.lns[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, l)
		s.mu.Unlock()
	}()
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			return fmt.Errorf("engine: accept: %w", err)
		}
		if !s.ServeConn(nc) {
			return ErrServerClosed
		}
	}
}

// ServeConn serves one accepted connection on a goroutine of its own. It
// reports false (and closes nc) when the server is already closed.
func (s *Server) ServeConn(nc net.Conn) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = nc.Close()
		return false
	}
	c := newConn(s, nc)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	return true
}

// Close stops the listeners, drops every connection and waits for their
// goroutines to finish.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for l := range s.lns {
		_ = l.Close()
	}
	conns := s.connsLocked()
	s.mu.Unlock()
	for _, c := range conns {
		c.abort()
	}
	s.wg.Wait()
}

func (s *Server) connsLocked() []*conn {
	out := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	return out
}

func (s *Server) snapshot() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connsLocked()
}

// DropConnections closes every client connection abruptly (TCP close, no
// AMQP close), as a network failure would. It returns how many were dropped.
func (s *Server) DropConnections() int {
	conns := s.snapshot()
	for _, c := range conns {
		c.abort()
	}
	return len(conns)
}

// DetachEntityLinks detaches every entity link (sender or receiver) whose
// address matches address case-insensitively, with amqp:link:detach-forced,
// so the SDK recovers its links. It returns how many were detached.
func (s *Server) DetachEntityLinks(address string) int {
	n := 0
	for _, c := range s.snapshot() {
		n += c.detachEntityLinks(address, &errDetachForced)
	}
	return n
}

// PressureStats returns what Config.Pressure did so far.
func (s *Server) PressureStats() PressureStats { return s.pressure.stats() }

// FailNextManagementCalls makes the next n $management requests fail with
// status 503 (server busy), which the SDK retries.
func (s *Server) FailNextManagementCalls(n int) {
	s.failMgmt.Store(int64(n))
}

// DropConnectionOnNextManagementCalls makes the next n $management requests
// cut their connection (TCP close, no AMQP close) instead of being answered:
// the request is not carried out and the client never sees a response.
func (s *Server) DropConnectionOnNextManagementCalls(n int) {
	s.dropMgmt.Store(int64(n))
}

func (s *Server) takeMgmtFailure() bool { return takeOne(&s.failMgmt) }

func (s *Server) takeMgmtDrop() bool { return takeOne(&s.dropMgmt) }

// takeOne decrements a positive counter and reports whether it did.
func takeOne(n *atomic.Int64) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

// ExpireMessageLock expires the message lock token wherever it is held (an
// entity, its dead-letter queue or its transfer dead-letter queue), as if its
// time ran out. broker.ErrLockLost if no entity holds it.
func (s *Server) ExpireMessageLock(token amqp.UUID) error {
	b := s.cfg.Broker
	var paths []string
	for _, q := range b.ListQueues() {
		paths = append(paths, q.Path)
	}
	for _, t := range b.ListTopics() {
		subs, err := b.ListSubscriptions(t.Name)
		if err != nil {
			continue
		}
		for _, sub := range subs {
			paths = append(paths, sub.Path)
		}
	}
	for _, p := range paths {
		for _, addr := range []string{p, p + "/$DeadLetterQueue", p + "/$Transfer/$DeadLetterQueue"} {
			e, err := b.Lookup(addr)
			if err != nil {
				continue
			}
			if err := e.ExpireLock(token); err == nil {
				return nil
			}
		}
	}
	return fmt.Errorf("expire message lock %s: %w", uuidString(token), broker.ErrLockLost)
}

func uuidString(u amqp.UUID) string {
	return strings.ToLower(fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:]))
}

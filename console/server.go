package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server serves a Console on an address: Start listens and serves, Stop shuts down, letting
// requests in hand finish.
type Server struct {
	addr string
	log  *slog.Logger
	srv  *http.Server

	mu   sync.Mutex
	ln   net.Listener
	done chan struct{}
}

// NewServer returns a Server of c on addr (host:port; ":0" picks a free port, see Addr).
func NewServer(addr string, c *Console) *Server {
	return &Server{addr: addr, log: c.log, srv: &http.Server{
		Handler:           c,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// An action waits up to Config.ActionWait for a session, a replay for each session in turn.
		WriteTimeout: 10 * time.Minute,
		IdleTimeout:  2 * time.Minute,
		ErrorLog:     slog.NewLogLogger(c.log.Handler(), slog.LevelWarn),
	}}
}

// Start listens on the address and serves in the background.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return errors.New("console: server already started")
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("console: listen on %s (SEQBUS_CONSOLE_ADDR): %w", s.addr, err)
	}
	s.ln, s.done = ln, make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("console: serving stopped", slog.Any("error", err))
		}
	}()
	s.log.InfoContext(ctx, "console: listening", slog.String("addr", ln.Addr().String()))
	return nil
}

// Addr is the address the server listens on ("" before Start).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Stop stops accepting requests and waits for those in hand until ctx ends, then closes them.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	<-done
	if err != nil {
		return fmt.Errorf("console: stop: %w", err)
	}
	return nil
}

// StopAndCancel closes the server and the requests in hand at once.
func (s *Server) StopAndCancel(context.Context) error {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	err := s.srv.Close()
	<-done
	return err
}

package tcpproxy

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// Proxy forwards TCP connections from its listener to an upstream address.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu     sync.Mutex
	closed bool
	paused bool
	// pairs maps each client connection to its upstream connection.
	pairs map[net.Conn]net.Conn
	cuts  int
	wg    sync.WaitGroup
}

// Start listens on a free loopback port and forwards every connection to upstream.
func Start(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, upstream: upstream, pairs: map[net.Conn]net.Conn{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the address clients connect to instead of upstream.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection open through the proxy, both sides, and returns how many client
// connections it closed. New connections are accepted as before.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts++
	return p.closeAllLocked()
}

// Cuts returns how many times Cut was called.
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Open returns how many client connections are open through the proxy.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pairs)
}

// Pause closes every new connection at once until Resume: the upstream looks unreachable.
// Connections already open stay (Cut them too for a full outage).
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = true
}

// Resume undoes Pause.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = false
}

// Close stops accepting, closes every connection and waits for the forwarding goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.closeAllLocked()
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) closeAllLocked() int {
	n := len(p.pairs)
	for c, u := range p.pairs {
		_ = c.Close()
		_ = u.Close()
		delete(p.pairs, c)
	}
	return n
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // the listener was closed
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

func (p *Proxy) serve(client net.Conn) {
	p.mu.Lock()
	refuse := p.closed || p.paused
	p.mu.Unlock()
	if refuse {
		_ = client.Close()
		return
	}
	upstream, err := net.Dial("tcp", p.upstream)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if p.closed || p.paused {
		p.mu.Unlock()
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	p.pairs[client] = upstream
	p.mu.Unlock()

	// Each direction copies until its source ends (EOF, reset or a cut), then closes both
	// sides so that the other direction ends too.
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
	}
	wg.Go(func() { pipe(upstream, client) })
	wg.Go(func() { pipe(client, upstream) })
	wg.Wait()
	p.mu.Lock()
	delete(p.pairs, client)
	p.mu.Unlock()
}

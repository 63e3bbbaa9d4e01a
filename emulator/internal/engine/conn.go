package engine

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/seqbus/seqbus/emulator/amqpwire"
)

const (
	// ourMaxFrameSize is the max-frame-size the server announces.
	ourMaxFrameSize = 256 * 1024
	// handshakeTimeout bounds the protocol header, SASL and open exchange.
	handshakeTimeout = 10 * time.Second
	// writeTimeout bounds a single socket write.
	writeTimeout = 30 * time.Second
	// maxHeartbeat is the longest the writer stays silent.
	maxHeartbeat = 10 * time.Second
)

var (
	errDetachForced = amqpwire.Error{Condition: "amqp:link:detach-forced", Description: "link detached by the emulator"}
	errConnForced   = amqpwire.Error{Condition: "amqp:connection:forced", Description: "connection closed by the emulator"}
)

// conn is one client connection.
type conn struct {
	srv *Server
	nc  net.Conn
	log *slog.Logger
	id  string

	ctx    context.Context
	cancel context.CancelFunc
	out    chan outFrame
	delay  *delayLine     // nil without latency (Config.Pressure)
	wg     sync.WaitGroup // writer, delay line, pumps and watchers
	once   sync.Once

	mu           sync.Mutex
	peerMaxFrame uint32
	peerIdle     time.Duration
	sessions     map[uint16]*session // by channel (the client's; ours mirrors it)
	replyLinks   []*link             // $cbs and $management reply links, in attach order (reply.go)
	linksByName  map[string]*link    // entity links by link name
	claims       map[string]time.Time
	ending       map[uint16]bool // channels we ended; awaiting the client's end
	hostname     string
}

// outFrame is an encoded frame for the writer. When flushed is not nil, the
// writer closes it once the frame is on the wire.
type outFrame struct {
	b       []byte
	flushed chan struct{}
}

func newConn(s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	return &conn{
		srv:          s,
		nc:           nc,
		log:          s.log.With(slog.String("conn", id), slog.String("remote", nc.RemoteAddr().String())),
		id:           id,
		ctx:          ctx,
		cancel:       cancel,
		out:          make(chan outFrame, 256),
		delay:        newDelayLine(s.pressure),
		peerMaxFrame: amqpwire.MinMaxFrameSize,
		sessions:     make(map[uint16]*session),
		linksByName:  make(map[string]*link),
		claims:       make(map[string]time.Time),
		ending:       make(map[uint16]bool),
	}
}

// abort closes the socket; serve then cleans up.
func (c *conn) abort() {
	c.once.Do(func() {
		c.cancel()
		_ = c.nc.Close()
	})
}

// serve runs the connection until it ends, then releases everything it held.
func (c *conn) serve() {
	defer c.cleanup()
	br := bufio.NewReaderSize(c.nc, 64*1024)
	if err := c.handshake(br); err != nil {
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			c.log.Debug("engine: handshake failed", slog.Any("error", err))
		}
		return
	}
	c.wg.Add(1)
	go c.writeLoop()
	if c.delay != nil {
		c.wg.Add(1)
		go c.delay.run(c)
	}
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(2 * c.srv.cfg.IdleTimeout))
		fr, err := amqpwire.ReadFrame(br, ourMaxFrameSize)
		if err != nil {
			if c.ctx.Err() == nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.log.Debug("engine: read failed", slog.Any("error", err))
				var ne net.Error
				switch {
				case errors.Is(err, amqpwire.ErrMalformed) || errors.Is(err, amqpwire.ErrFrameTooLarge):
					c.closeWithError(&amqpwire.Error{Condition: "amqp:decode-error", Description: err.Error()})
				case errors.As(err, &ne) && ne.Timeout():
					c.closeWithError(&amqpwire.Error{Condition: "amqp:resource-limit-exceeded", Description: "local-idle-timeout-expired"})
				}
			}
			return
		}
		if fr.Body == nil {
			continue // heartbeat
		}
		if done := c.handleFrame(fr); done {
			return
		}
	}
}

// closeWithError sends close(error) and waits (briefly) until it is written.
func (c *conn) closeWithError(e *amqpwire.Error) {
	c.sendAndFlush(0, &amqpwire.Close{Error: e})
}

// sendAndFlush queues a frame and waits up to a second for the writer to put
// it on the wire. It must be called without c.mu held.
func (c *conn) sendAndFlush(ch uint16, body any) {
	done := make(chan struct{})
	c.enqueue(ch, body, nil, done)
	select {
	case <-done:
	case <-c.ctx.Done():
	case <-time.After(time.Second):
	}
}

func (c *conn) cleanup() {
	c.mu.Lock()
	for _, s := range c.sessions {
		s.endLocked()
	}
	c.sessions = map[uint16]*session{}
	c.mu.Unlock()
	c.abort()
	c.wg.Wait()
	c.log.Debug("engine: connection closed")
}

func (c *conn) handshake(br *bufio.Reader) error {
	_ = c.nc.SetDeadline(time.Now().Add(handshakeTimeout))
	defer func() { _ = c.nc.SetDeadline(time.Time{}) }()
	h, err := amqpwire.ReadProtocolHeader(br)
	if err != nil {
		return err
	}
	if h.ProtocolID == amqpwire.ProtocolSASL {
		if err := c.negotiateSASL(br); err != nil {
			return err
		}
		if h, err = amqpwire.ReadProtocolHeader(br); err != nil {
			return err
		}
	}
	amqpHdr := amqpwire.ProtocolHeader{ProtocolID: amqpwire.ProtocolAMQP, Major: 1}
	if h.ProtocolID != amqpwire.ProtocolAMQP || h.Major != 1 {
		// Answer with the header we support, then hang up (spec 2.2).
		_, _ = c.nc.Write(amqpwire.AppendProtocolHeader(nil, amqpHdr))
		return fmt.Errorf("unsupported protocol header %+v", h)
	}
	if _, err := c.nc.Write(amqpwire.AppendProtocolHeader(nil, amqpHdr)); err != nil {
		return fmt.Errorf("write protocol header: %w", err)
	}
	fr, err := amqpwire.ReadFrame(br, ourMaxFrameSize)
	if err != nil {
		return fmt.Errorf("read open: %w", err)
	}
	open, ok := fr.Body.(*amqpwire.Open)
	if !ok {
		return fmt.Errorf("expected open, got %T", fr.Body)
	}
	c.mu.Lock()
	c.peerMaxFrame = max(min(open.MaxFrameSize, ourMaxFrameSize), amqpwire.MinMaxFrameSize)
	c.peerIdle = open.IdleTimeout
	c.hostname = open.Hostname
	c.mu.Unlock()
	reply := &amqpwire.Open{
		ContainerID:  "seqbus-emulator-" + c.id,
		Hostname:     open.Hostname,
		MaxFrameSize: ourMaxFrameSize,
		ChannelMax:   65535,
		IdleTimeout:  c.srv.cfg.IdleTimeout,
		Properties:   map[amqpwire.Symbol]any{"product": "seqbus-emulator"},
	}
	b, err := amqpwire.AppendFrame(nil, amqpwire.Frame{Type: amqpwire.FrameTypeAMQP, Body: reply})
	if err != nil {
		return fmt.Errorf("encode open: %w", err)
	}
	if _, err := c.nc.Write(b); err != nil {
		return fmt.Errorf("write open: %w", err)
	}
	c.log.Debug("engine: connection opened", slog.String("container", open.ContainerID), slog.String("hostname", open.Hostname))
	return nil
}

func (c *conn) negotiateSASL(br *bufio.Reader) error {
	var buf []byte
	buf = amqpwire.AppendProtocolHeader(buf, amqpwire.ProtocolHeader{ProtocolID: amqpwire.ProtocolSASL, Major: 1})
	buf, err := amqpwire.AppendFrame(buf, amqpwire.Frame{Type: amqpwire.FrameTypeSASL, Body: &amqpwire.SASLMechanisms{
		Mechanisms: []amqpwire.Symbol{"ANONYMOUS", "PLAIN", "MSSBCBS"},
	}})
	if err != nil {
		return fmt.Errorf("encode sasl-mechanisms: %w", err)
	}
	if _, err := c.nc.Write(buf); err != nil {
		return fmt.Errorf("write sasl-mechanisms: %w", err)
	}
	fr, err := amqpwire.ReadFrame(br, ourMaxFrameSize)
	if err != nil {
		return fmt.Errorf("read sasl-init: %w", err)
	}
	init, ok := fr.Body.(*amqpwire.SASLInit)
	if !ok {
		return fmt.Errorf("expected sasl-init, got %T", fr.Body)
	}
	code := amqpwire.SASLCodeOK
	switch init.Mechanism {
	case "ANONYMOUS", "MSSBCBS":
	case "PLAIN":
		// authzid NUL authcid NUL passwd: the key name and key.
		parts := strings.Split(string(init.InitialResponse), "\x00")
		if len(parts) != 3 || c.srv.cfg.Keys[parts[1]] != parts[2] || parts[2] == "" {
			code = amqpwire.SASLCodeAuth
		} else {
			// The key itself authenticates the whole namespace for the
			// lifetime of the connection; no put-token needed.
			c.mu.Lock()
			c.claims[""] = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
			c.mu.Unlock()
		}
	default:
		code = amqpwire.SASLCodeAuth
	}
	out, err := amqpwire.AppendFrame(nil, amqpwire.Frame{Type: amqpwire.FrameTypeSASL, Body: &amqpwire.SASLOutcome{Code: code}})
	if err != nil {
		return fmt.Errorf("encode sasl-outcome: %w", err)
	}
	if _, err := c.nc.Write(out); err != nil {
		return fmt.Errorf("write sasl-outcome: %w", err)
	}
	if code != amqpwire.SASLCodeOK {
		return fmt.Errorf("sasl %s: authentication failed", init.Mechanism)
	}
	return nil
}

// send encodes a frame and queues it for the writer. It may be called with or
// without c.mu held. Frames are dropped once the connection is gone.
func (c *conn) send(ch uint16, body any, payload []byte) {
	c.enqueue(ch, body, payload, nil)
}

func (c *conn) enqueue(ch uint16, body any, payload []byte, flushed chan struct{}) {
	b, err := amqpwire.AppendFrame(nil, amqpwire.Frame{Type: amqpwire.FrameTypeAMQP, Channel: ch, Body: body, Payload: payload})
	if err != nil {
		c.log.Error("engine: encode frame", slog.Any("error", err), slog.String("body", fmt.Sprintf("%T", body)))
		c.abort()
		return
	}
	if c.delay != nil {
		c.delay.push(c.ctx, outFrame{b: b, flushed: flushed})
		return
	}
	select {
	case c.out <- outFrame{b: b, flushed: flushed}:
	case <-c.ctx.Done():
	}
}

func (c *conn) heartbeatInterval() time.Duration {
	c.mu.Lock()
	peer := c.peerIdle
	c.mu.Unlock()
	iv := maxHeartbeat
	if peer > 0 && peer/4 < iv {
		iv = max(peer/4, 10*time.Millisecond)
	}
	return iv
}

func (c *conn) writeLoop() {
	defer c.wg.Done()
	bw := bufio.NewWriterSize(c.nc, 64*1024)
	iv := c.heartbeatInterval()
	ticker := time.NewTicker(iv)
	defer ticker.Stop()
	last := time.Now()
	empty, _ := amqpwire.AppendFrame(nil, amqpwire.Frame{Type: amqpwire.FrameTypeAMQP})
	write := func(b []byte) bool {
		_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := bw.Write(b); err != nil {
			c.abort()
			return false
		}
		return true
	}
	flush := func() bool {
		if err := bw.Flush(); err != nil {
			c.abort()
			return false
		}
		last = time.Now()
		return true
	}
	for {
		select {
		case <-c.ctx.Done():
			return
		case f := <-c.out:
			var notify []chan struct{}
			if !write(f.b) {
				return
			}
			if f.flushed != nil {
				notify = append(notify, f.flushed)
			}
		drain:
			for {
				select {
				case f := <-c.out:
					if !write(f.b) {
						return
					}
					if f.flushed != nil {
						notify = append(notify, f.flushed)
					}
				default:
					break drain
				}
			}
			if !flush() {
				return
			}
			for _, ch := range notify {
				close(ch)
			}
		case <-ticker.C:
			if time.Since(last) >= iv {
				if !write(empty) || !flush() {
					return
				}
			}
		}
	}
}

// handleFrame dispatches one frame. It reports whether the connection is done.
func (c *conn) handleFrame(fr amqpwire.Frame) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch body := fr.Body.(type) {
	case *amqpwire.Begin:
		c.handleBegin(fr.Channel, body)
	case *amqpwire.End:
		s := c.sessions[fr.Channel]
		if s == nil && c.ending[fr.Channel] {
			delete(c.ending, fr.Channel) // the client acknowledges our end
			return false
		}
		if s == nil {
			// A client abandons a session whose begin it never wrote
			// (go-amqp: NewSession with a context that expired before its
			// writer took the frame) and later ends it on a channel we have
			// never seen. The client wants the channel gone and it is: no
			// reply, since the client has no remote channel to match one
			// to, and no connection error, which would take every other
			// session down with it.
			c.log.Debug("engine: end on unknown channel ignored", slog.Int("channel", int(fr.Channel)))
			return false
		}
		if s.staleEnd {
			// The client's answer to our end of the session that had this
			// channel before (see handleBegin): not meant for this one.
			s.staleEnd = false
			return false
		}
		s.endLocked()
		delete(c.sessions, fr.Channel)
		c.send(fr.Channel, &amqpwire.End{}, nil)
	case *amqpwire.Close:
		if body.Error != nil {
			c.log.Debug("engine: client closed with error", slog.Any("error", body.Error))
		}
		c.mu.Unlock()
		c.sendAndFlush(0, &amqpwire.Close{})
		c.mu.Lock()
		return true
	case *amqpwire.Open:
		return c.protocolErrorLocked("amqp:illegal-state", "second open")
	default:
		s := c.sessions[fr.Channel]
		if s == nil && c.ending[fr.Channel] {
			return false // in flight before the client saw our end
		}
		if s == nil {
			return c.protocolErrorLocked("amqp:not-found", fmt.Sprintf("%T on unknown channel %d", body, fr.Channel))
		}
		if err := s.handleLocked(body, fr.Payload); err != nil {
			c.log.Debug("engine: ending session", slog.Any("error", err))
			s.endLocked()
			delete(c.sessions, fr.Channel)
			c.ending[fr.Channel] = true
			c.send(fr.Channel, &amqpwire.End{Error: err}, nil)
		}
	}
	return false
}

// protocolErrorLocked closes the connection with an error. It reports true.
func (c *conn) protocolErrorLocked(cond amqpwire.Symbol, desc string) bool {
	c.log.Debug("engine: protocol error", slog.String("condition", string(cond)), slog.String("description", desc))
	c.mu.Unlock()
	c.sendAndFlush(0, &amqpwire.Close{Error: &amqpwire.Error{Condition: cond, Description: desc}})
	c.mu.Lock()
	return true
}

func (c *conn) handleBegin(ch uint16, b *amqpwire.Begin) {
	if old := c.sessions[ch]; old != nil {
		old.endLocked()
	}
	s := newSession(c, ch, b)
	// go-amqp frees a channel as soon as it reads our end and answers it
	// from another goroutine, so a new begin on the channel can overtake
	// the answering end. That end belongs to the old session.
	s.staleEnd = c.ending[ch]
	delete(c.ending, ch)
	c.sessions[ch] = s
	remote := ch
	c.send(ch, &amqpwire.Begin{
		RemoteChannel:  &remote,
		NextOutgoingID: 0,
		IncomingWindow: sessionWindow,
		OutgoingWindow: sessionWindow,
		HandleMax:      4294967295,
	}, nil)
}

// detachEntityLinks detaches matching entity links with e.
func (c *conn) detachEntityLinks(address string, e *amqpwire.Error) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.sessions {
		for _, l := range s.links {
			if l.kind == kindEntity && l.state == linkAttached && strings.EqualFold(l.address, address) {
				l.detachLocked(e)
				n++
			}
		}
	}
	return n
}

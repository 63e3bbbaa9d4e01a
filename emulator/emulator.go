package emulator

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator/atom"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/internal/engine"
)

// Defaults of Config.
const (
	DefaultKeyName = "RootManageSharedAccessKey"
	DefaultKey     = "SAS_KEY_VALUE"
	// DefaultMaxMessageSize is the Standard tier's limit, 256 KiB.
	DefaultMaxMessageSize = broker.DefaultMaxMessageSize
	// MaxMaxMessageSize is the largest MaxMessageSize accepted, 100 MB (Premium).
	MaxMaxMessageSize int64 = 100 * 1024 * 1024
)

// Config configures an emulator. The zero value starts an empty namespace on
// free loopback ports with the default key.
type Config struct {
	// AMQPAddr is the AMQP listen address. Default "127.0.0.1:0" (a free port).
	AMQPAddr string
	// HTTPAddr is the HTTP listen address (GET /health). Default "127.0.0.1:0";
	// "-" disables the HTTP endpoint.
	HTTPAddr string
	// KeyName and Key are the shared access key clients sign tokens with.
	// Defaults DefaultKeyName and DefaultKey.
	KeyName string
	Key     string
	// ConfigFile is a Config.json (Microsoft emulator format) declaring the
	// entities. Optional.
	ConfigFile string
	// UserConfig declares entities in code; applied after ConfigFile.
	UserConfig *broker.UserConfig
	// Clock drives lock expiry, TTL and schedules. Default clock.Real().
	Clock clock.Clock
	// MaxMessageSize is the largest message accepted, in bytes. Default
	// DefaultMaxMessageSize; at most MaxMaxMessageSize.
	MaxMessageSize int64
	// Logger receives the emulator's events. Default: discard.
	Logger *slog.Logger
	// AcceptNextTimeout is how long AcceptNextSession waits when the client
	// sets no deadline. Default 60s.
	AcceptNextTimeout time.Duration
	// AdminHandler builds the handler of the management API (ATOM over HTTP)
	// for the broker. It is served on HTTPAddr for every path but /health, and
	// on the AMQP port for connections that do not start with the AMQP
	// protocol header (the admin client talks to the Endpoint's port; see
	// admintransport). Default: the emulator/atom handler, checking
	// tokens against KeyName/Key with the wall clock.
	AdminHandler func(*broker.Broker) http.Handler
	// Pressure puts the load of a busy namespace on clients: latency per operation, a
	// credit-based throttle like the Standard tier's and transient errors (see Pressure).
	// Default: none.
	Pressure Pressure
	// SessionIDRule says which session entities refuse receive-by-sequence-number,
	// update-disposition and peek-message requests without session-id: by default
	// those with partitioning enabled, as the service does; broker.SessionIDAlways
	// refuses them on every session entity (the strict case). A Config.json's
	// "SessionIdRequired" can make it stricter.
	SessionIDRule broker.SessionIDRule
	// TLS, when set, serves the AMQP port over TLS only (AMQPS, HTTPS and
	// AMQP over WebSockets behind TLS), as Service Bus serves port 5671; see
	// TLSConfig. HTTPAddr stays plain HTTP. Default: no TLS.
	TLS *TLSConfig
}

func (c Config) withDefaults() Config {
	c.AMQPAddr = cmp.Or(c.AMQPAddr, "127.0.0.1:0")
	c.HTTPAddr = cmp.Or(c.HTTPAddr, "127.0.0.1:0")
	c.KeyName = cmp.Or(c.KeyName, DefaultKeyName)
	c.Key = cmp.Or(c.Key, DefaultKey)
	c.MaxMessageSize = cmp.Or(c.MaxMessageSize, DefaultMaxMessageSize)
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.AdminHandler == nil {
		keyName, key, logger := c.KeyName, c.Key, c.Logger
		c.AdminHandler = func(b *broker.Broker) http.Handler {
			// The SDK signs admin tokens with the wall clock, so the handler
			// keeps the real clock even when the broker's is fake.
			return atom.NewHandler(b, atom.Config{KeyName: keyName, Key: key, Logger: logger})
		}
	}
	return c
}

func (c Config) validate() error {
	if c.MaxMessageSize < 0 || c.MaxMessageSize > MaxMaxMessageSize {
		return fmt.Errorf("emulator: MaxMessageSize %d out of range (1..%d)", c.MaxMessageSize, MaxMaxMessageSize)
	}
	if c.TLS != nil {
		if err := c.TLS.validate(); err != nil {
			return err
		}
	}
	if _, err := broker.ParseSessionIDRule(c.SessionIDRule.String()); err != nil {
		return fmt.Errorf("emulator: SessionIDRule: %w", err)
	}
	return c.Pressure.validate()
}

// Server is a running emulator.
type Server struct {
	cfg    Config
	broker *broker.Broker
	engine *engine.Server
	amqpLn net.Listener
	http   *http.Server
	httpLn net.Listener
	wg     sync.WaitGroup
	once   sync.Once
	tls    *serverTLS // nil without TLS

	// wsCtx ends the WebSocket streams when the server closes.
	wsCtx    context.Context
	wsCancel context.CancelFunc

	// HTTP requests arriving on the AMQP port.
	portHTTP *chanListener
	portSrv  *http.Server
	sniffMu  sync.Mutex
	sniffing map[net.Conn]struct{} // accepted, first bytes not yet seen; nil once closed
}

// Start loads the configuration, opens the listeners and serves until Close.
// ctx bounds only the startup.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := broker.New(broker.Config{Clock: cfg.Clock, MaxMessageSize: cfg.MaxMessageSize, Logger: cfg.Logger, SessionIDRule: cfg.SessionIDRule})
	if cfg.ConfigFile != "" {
		if err := b.LoadConfigFile(cfg.ConfigFile); err != nil {
			b.Close()
			return nil, fmt.Errorf("emulator: config file %s: %w", cfg.ConfigFile, err)
		}
	}
	if cfg.UserConfig != nil {
		if err := b.ApplyUserConfig(cfg.UserConfig); err != nil {
			b.Close()
			return nil, fmt.Errorf("emulator: user config: %w", err)
		}
	}
	var lc net.ListenConfig
	amqpLn, err := lc.Listen(ctx, "tcp", cfg.AMQPAddr)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("emulator: listen AMQP on %s: %w", cfg.AMQPAddr, err)
	}
	var st *serverTLS
	if cfg.TLS != nil {
		if st, err = loadTLS(cfg.TLS, amqpLn.Addr().String()); err != nil {
			_ = amqpLn.Close()
			b.Close()
			return nil, err
		}
		amqpLn = tls.NewListener(amqpLn, st.config)
	}
	wsCtx, wsCancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:      cfg,
		broker:   b,
		amqpLn:   amqpLn,
		tls:      st,
		wsCtx:    wsCtx,
		wsCancel: wsCancel,
		engine: engine.New(engine.Config{
			Broker:            b,
			Keys:              map[string]string{cfg.KeyName: cfg.Key},
			MaxMessageSize:    cfg.MaxMessageSize,
			Logger:            cfg.Logger,
			AcceptNextTimeout: cfg.AcceptNextTimeout,
			Pressure:          engine.Pressure(cfg.Pressure),
		}),
	}
	handler := s.httpHandler()
	if cfg.HTTPAddr != "-" {
		httpLn, err := lc.Listen(ctx, "tcp", cfg.HTTPAddr)
		if err != nil {
			_ = amqpLn.Close()
			wsCancel()
			st.remove()
			b.Close()
			return nil, fmt.Errorf("emulator: listen HTTP on %s: %w", cfg.HTTPAddr, err)
		}
		s.httpLn = httpLn
		s.http = s.serveHTTP(handler, httpLn)
	}
	s.portHTTP = newChanListener(amqpLn.Addr())
	s.portSrv = s.serveHTTP(handler, s.portHTTP)
	s.sniffing = make(map[net.Conn]struct{})
	s.wg.Add(1)
	go s.acceptAMQPPort()
	cfg.Logger.Info("emulator: started", slog.String("amqp_addr", s.AMQPAddr()), slog.String("http_addr", s.HTTPAddr()),
		slog.Bool("tls", st != nil), slog.String("cert_file", s.CertFile()))
	return s, nil
}

func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"healthy"}`)
	})
	mux.HandleFunc("GET "+WebSocketPath, s.serveWebSocket)
	mux.HandleFunc("GET "+WebSocketPath+"/", s.serveWebSocket) // uamqp's path ends with a slash
	if s.cfg.AdminHandler != nil {
		mux.Handle("/", s.cfg.AdminHandler(s.broker))
	}
	return mux
}

func (s *Server) serveHTTP(h http.Handler, l net.Listener) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelDebug)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("emulator: http server stopped", slog.Any("error", err))
		}
	}()
	return srv
}

// AMQPAddr returns the AMQP listener's address (host:port).
func (s *Server) AMQPAddr() string { return s.amqpLn.Addr().String() }

// HTTPAddr returns the HTTP listener's address, or "" when disabled.
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// ConnectionString returns a connection string for the azservicebus SDK:
// Endpoint=sb://HOST:PORT;SharedAccessKeyName=…;SharedAccessKey=…;UseDevelopmentEmulator=true.
// The SDK dials the port given in the endpoint without TLS. In TLS mode
// UseDevelopmentEmulator is left out, so the SDKs speak TLS (they must trust
// CertFile). When listening on all interfaces (0.0.0.0 or ::) the host is
// "localhost".
func (s *Server) ConnectionString() string {
	cs := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s", s.endpointAddr(), s.cfg.KeyName, s.cfg.Key)
	if s.tls == nil {
		cs += ";UseDevelopmentEmulator=true"
	}
	return cs
}

// endpointAddr is the host:port of ConnectionString's endpoint.
func (s *Server) endpointAddr() string {
	if tcp, ok := s.amqpLn.Addr().(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		return net.JoinHostPort("localhost", strconv.Itoa(tcp.Port))
	}
	return s.AMQPAddr()
}

// Broker returns the in-memory broker, for creating entities and inspecting
// state in tests.
func (s *Server) Broker() *broker.Broker { return s.broker }

// Close stops the listeners, drops every connection, closes the broker and
// waits for all goroutines. It is safe to call more than once.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		_ = s.amqpLn.Close()
		s.stopSniffing()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if s.http != nil {
			err = s.http.Shutdown(ctx)
		}
		if perr := s.portSrv.Shutdown(ctx); err == nil {
			err = perr
		}
		_ = s.portHTTP.Close()
		s.wsCancel()
		s.engine.Close()
		s.broker.Close()
		s.wg.Wait()
		s.tls.remove()
	})
	return err
}

// DropConnections closes every client connection abruptly, as a network
// failure would; the SDK reconnects on its next operation. It returns how
// many connections were dropped.
func (s *Server) DropConnections() int { return s.engine.DropConnections() }

// DetachEntityLinks detaches every link to or from address with
// amqp:link:detach-forced; the SDK re-creates its links. It returns how many
// links were detached.
func (s *Server) DetachEntityLinks(address string) int { return s.engine.DetachEntityLinks(address) }

// FailNextManagementCalls makes the next n $management requests fail with
// status 503 (server busy).
func (s *Server) FailNextManagementCalls(n int) { s.engine.FailNextManagementCalls(n) }

// DropConnectionOnNextManagementCalls makes the next n $management requests
// (settling deferred messages, session state, lock renewal, peek, …) cut
// their client's connection instead of being answered, as a network failure
// in the middle of the call would. The request is not carried out.
func (s *Server) DropConnectionOnNextManagementCalls(n int) {
	s.engine.DropConnectionOnNextManagementCalls(n)
}

// ExpireMessageLock expires a message lock now, as if its time ran out: the
// message returns to its entity with its delivery count incremented.
func (s *Server) ExpireMessageLock(token [16]byte) error {
	if err := s.engine.ExpireMessageLock(amqp.UUID(token)); err != nil {
		return fmt.Errorf("emulator: %w", err)
	}
	return nil
}

// ExpireSessionLock expires the lock on a session of entity (a queue or
// "topic/Subscriptions/sub") now; the session receiver's link is detached
// with com.microsoft:session-lock-lost.
func (s *Server) ExpireSessionLock(entity, sessionID string) error {
	e, err := s.broker.Lookup(entity)
	if err != nil {
		return fmt.Errorf("emulator: expire session lock: %w", err)
	}
	if err := e.ExpireSessionLock(sessionID); err != nil {
		return fmt.Errorf("emulator: %w", err)
	}
	return nil
}

package emulatortest

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/coder/websocket"

	"github.com/seqbus/seqbus/admintransport"
	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
)

// LogEnv names the environment variable that sets the level of the
// emulator's log in tests ("debug", "info", "warn", "error"; any other
// non-empty value means debug).
const LogEnv = "SEQBUS_EMULATOR_TEST_LOG"

// Options say what Start declares and how it connects. A nil *Options starts
// an empty namespace.
type Options struct {
	// Queues maps queue names to their properties (broker defaults for the
	// zero value).
	Queues map[string]broker.EntityProperties
	// Topics maps topic names to topics and their subscriptions.
	Topics map[string]Topic
	// Config is the emulator configuration to start from. Start sets
	// AMQPAddr to a free loopback port unless given, leaves HTTPAddr
	// disabled ("-") unless given, and logs to t.Log unless Logger is set.
	// Entities of Config.UserConfig or Config.ConfigFile are declared too.
	Config emulator.Config
	// ClientOptions are the options of Server.Client. Default: FastRetries.
	// Clients of NewClient get the TLS configuration and WebSocket dialer
	// that TLS and WebSocket ask for, unless their options set their own.
	ClientOptions *azservicebus.ClientOptions
	// TLS serves the AMQP port over TLS with a certificate generated into
	// the test's temporary directory (unless Config.TLS is set); clients
	// trust it.
	TLS bool
	// WebSocket makes clients speak AMQP over WebSockets
	// (ClientOptions.NewWebSocketConn with Server.DialWebSocket).
	WebSocket bool
	// SessionIDRule, when stricter than Config.SessionIDRule, replaces it:
	// broker.SessionIDAlways makes every session entity refuse $management
	// operations on its messages without session-id, as partitioned ones do.
	SessionIDRule broker.SessionIDRule
}

// Topic is a topic to declare.
type Topic struct {
	Properties    broker.EntityProperties
	Subscriptions map[string]Subscription
}

// Subscription is a subscription to declare.
type Subscription struct {
	Properties broker.EntityProperties
	// Rules replace the $Default rule (which matches everything) when set.
	Rules []broker.Rule
}

// Server is a running emulator with a client of it.
type Server struct {
	*emulator.Server
	// Client is a client of the emulator with Options.ClientOptions (it
	// connects on first use, as every SDK client does), closed when the test
	// ends.
	Client *azservicebus.Client

	webSocket bool
}

// FastRetries are retry options for tests: the SDK's default backoff (4 s,
// then 12 s, 28 s) would turn a recoverable fault into a minute of waiting.
func FastRetries() azservicebus.RetryOptions {
	return azservicebus.RetryOptions{MaxRetries: 3, RetryDelay: 20 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond}
}

// Start starts an emulator for t and returns it once it accepts
// connections. It fails t if the emulator cannot start or an entity cannot be
// declared. Everything is closed by t.Cleanup.
func Start(t testing.TB, opts *Options) *Server {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	cfg := opts.Config
	cfg.AMQPAddr = cmp.Or(cfg.AMQPAddr, "127.0.0.1:0")
	cfg.HTTPAddr = cmp.Or(cfg.HTTPAddr, "-")
	cfg.SessionIDRule = max(cfg.SessionIDRule, opts.SessionIDRule)
	var stopped atomic.Bool
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t, &stopped)
	}
	if uc := userConfig(opts); uc != nil {
		if cfg.UserConfig != nil {
			uc.Namespaces = append(slices.Clone(cfg.UserConfig.Namespaces), uc.Namespaces...)
		}
		cfg.UserConfig = uc
	}
	if opts.TLS && cfg.TLS == nil {
		cfg.TLS = &emulator.TLSConfig{GeneratedCertFile: filepath.Join(t.TempDir(), "emulator-cert.pem")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := emulator.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("emulatortest: start the emulator: %v", err)
	}
	t.Cleanup(func() {
		err := srv.Close()
		stopped.Store(true)
		if err != nil {
			t.Errorf("emulatortest: close the emulator: %v", err)
		}
	})
	s := &Server{Server: srv, webSocket: opts.WebSocket}
	s.Client = s.NewClient(t, opts.ClientOptions)
	return s
}

// NewClient connects another SDK client (its own AMQP connection), closed
// when the test ends. nil opts means FastRetries. Over TLS the client trusts
// the emulator's certificate, and with Options.WebSocket it dials
// DialWebSocket, unless opts set TLSConfig or NewWebSocketConn.
func (s *Server) NewClient(t testing.TB, opts *azservicebus.ClientOptions) *azservicebus.Client {
	t.Helper()
	o := azservicebus.ClientOptions{RetryOptions: FastRetries()}
	if opts != nil {
		o = *opts
	}
	if o.TLSConfig == nil {
		o.TLSConfig = s.ClientTLSConfig()
	}
	if s.webSocket && o.NewWebSocketConn == nil {
		o.NewWebSocketConn = s.DialWebSocket
	}
	c, err := azservicebus.NewClientFromConnectionString(s.ConnectionString(), &o)
	if err != nil {
		t.Fatalf("emulatortest: new client: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// AdminClientOptions are admin client options for this emulator: an HTTP
// transport of the test's own (its idle connections closed when the test
// ends) and no retries, so errors surface at once. Use them with
// admintransport.NewAdminClient or anything built on it.
func (s *Server) AdminClientOptions(t testing.TB) *admin.ClientOptions {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: s.ClientTLSConfig()}
	t.Cleanup(tr.CloseIdleConnections)
	return &admin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: &http.Client{Transport: tr},
		Retry:     policy.RetryOptions{MaxRetries: -1},
	}}
}

// NewAdminClient returns an admin client (the ATOM management API) for this
// emulator, with AdminClientOptions.
func (s *Server) NewAdminClient(t testing.TB) *admin.Client {
	t.Helper()
	c, err := admintransport.NewAdminClient(s.ConnectionString(), s.AdminClientOptions(t))
	if err != nil {
		t.Fatalf("emulatortest: new admin client: %v", err)
	}
	return c
}

// DialWebSocket opens AMQP over WebSockets to the emulator, as the SDK's
// ClientOptions.NewWebSocketConn: it dials args.Host
// (wss://HOST:PORT/$servicebus/websocket) with the subprotocol AMQPWSB10,
// trusting the emulator's certificate, or over ws:// when the emulator
// serves no TLS.
func (s *Server) DialWebSocket(ctx context.Context, args azservicebus.NewWebSocketConnArgs) (net.Conn, error) {
	u := args.Host
	tlsConfig := s.ClientTLSConfig()
	if tlsConfig == nil {
		u = "ws://" + strings.TrimPrefix(u, "wss://")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	ws, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: hc, Subprotocols: []string{"AMQPWSB10"}})
	if err != nil {
		return nil, fmt.Errorf("emulatortest: dial %s: %w", u, err)
	}
	ws.SetReadLimit(-1)
	// The stream outlives the dial's context: it ends when the SDK closes it.
	return websocket.NetConn(context.WithoutCancel(ctx), ws, websocket.MessageBinary), nil
}

// userConfig turns the entities of opts into a user config, in name order
// (forwarding targets may come in any order; the broker resolves them).
func userConfig(opts *Options) *broker.UserConfig {
	if len(opts.Queues) == 0 && len(opts.Topics) == 0 {
		return nil
	}
	ns := broker.NamespaceConfig{Name: "emulatortest"}
	for _, name := range sortedKeys(opts.Queues) {
		ns.Queues = append(ns.Queues, broker.QueueConfig{Name: name, Properties: opts.Queues[name]})
	}
	for _, name := range sortedKeys(opts.Topics) {
		tp := opts.Topics[name]
		tc := broker.TopicConfig{Name: name, Properties: tp.Properties}
		for _, sub := range sortedKeys(tp.Subscriptions) {
			sc := tp.Subscriptions[sub]
			tc.Subscriptions = append(tc.Subscriptions, broker.SubscriptionConfig{Name: sub, Properties: sc.Properties, Rules: sc.Rules})
		}
		ns.Topics = append(ns.Topics, tc)
	}
	return &broker.UserConfig{Namespaces: []broker.NamespaceConfig{ns}}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// testLogger logs to t.Log at the level LogEnv names (by default Info in
// tests, Warn in benchmarks, whose log is always printed), until stopped is
// set: a test must not log once it has completed.
func testLogger(t testing.TB, stopped *atomic.Bool) *slog.Logger {
	level := slog.LevelInfo
	if _, isTest := t.(*testing.T); !isTest {
		level = slog.LevelWarn
	}
	if v := os.Getenv(LogEnv); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			level = slog.LevelDebug
		}
	}
	w := writerFunc(func(p []byte) (int, error) {
		if !stopped.Load() {
			t.Log(strings.TrimSuffix(string(p), "\n"))
		}
		return len(p), nil
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

var _ io.Writer = writerFunc(nil)

package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/kelseyhightower/envconfig"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sqsadapter"
)

// EnvPrefix prefixes every environment variable: a field tagged envconfig:"QUEUE" is set by
// SEQBUS_QUEUE.
const EnvPrefix = "SEQBUS"

// StateStore names where the worker keeps each session's state.
type StateStore string

// State stores.
const (
	// StateStoreServiceBus keeps the state in the Service Bus session state (no database).
	StateStoreServiceBus StateStore = "servicebus"
	// StateStorePostgres keeps the state in Postgres (seqbus_session_state, see migrations).
	StateStorePostgres StateStore = "postgres"
)

// HTTPOff as HTTPAddr serves no HTTP at all.
const HTTPOff = "off"

// ServiceBus says how a seqbus process reaches Service Bus: exactly one of a connection string
// and a namespace (with Entra ID).
type ServiceBus struct {
	// ConnectionString is a Service Bus connection string (SharedAccessKey or
	// SharedAccessSignature).
	ConnectionString string `envconfig:"CONNECTION_STRING" redact:"connection_string" desc:"Service Bus connection string with SharedAccessKey or SharedAccessSignature; its secret is redacted in logs. Set this or the namespace."`
	// Namespace is a fully qualified namespace (myns.servicebus.windows.net) reached with
	// Credential (default: azidentity.DefaultAzureCredential).
	Namespace  string                 `envconfig:"NAMESPACE" desc:"Fully qualified namespace (myns.servicebus.windows.net) reached with Entra ID (DefaultAzureCredential). Set this or the connection string."`
	Credential azcore.TokenCredential `ignored:"true" desc:"Entra ID credential used with Namespace (default: azidentity.DefaultAzureCredential)."`
}

// Database is the Postgres database of a seqbus process: the session states with
// StateStorePostgres, the outbox for the relay.
type Database struct {
	// DatabaseURL (or Pool) is the database: postgres://user:password@host/db or a
	// keyword/value string. A Pool given here is the caller's: it is never closed.
	DatabaseURL string        `envconfig:"DATABASE_URL" redact:"url" desc:"Postgres database of the postgres state store or the outbox: postgres://user:password@host/db or a keyword/value string; its password is redacted in logs."`
	Pool        *pgxpool.Pool `ignored:"true" desc:"A pgx pool to use instead of DatabaseURL; the caller owns it and it is never closed."`
	// MigrateOnStart applies the migrations at Start; otherwise Start refuses a schema that
	// lacks one (run `worker migrate up`).
	MigrateOnStart bool `envconfig:"MIGRATE_ON_START" desc:"Apply the database migrations at start; otherwise the process refuses a schema that lacks one (run worker migrate up)."`
}

// Service is what every seqbus service process has around its work: its HTTP endpoints, its
// readiness checks, how long a stop may drain, and the logger, registry and clock it is given.
type Service struct {
	// HTTPAddr is where /metrics, /healthz and /readyz are served (HTTPOff: nowhere; ":0" a
	// free port, see Client.HTTPAddr).
	HTTPAddr string `envconfig:"HTTP_ADDR" desc:"Where /metrics, /healthz, /readyz (and, for the worker and the scaler, /scale) are served: host:port, :port, :0 for a free port, or off."`
	// ReadyInterval is how often readiness is checked: the broker and, where there is one, the
	// database. /readyz turns 503 within two intervals of losing either.
	ReadyInterval time.Duration `envconfig:"READY_CHECK_INTERVAL" desc:"How often readiness is checked (the broker, the database); /readyz turns 503 within two intervals of losing one."`
	// SoftStopTimeout is how long Stop lets the work in hand finish before it cancels it (a
	// hard stop, as StopAndCancel), in which case Stop reports ErrSoftStopTimeout.
	SoftStopTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" desc:"How long a stop lets the work in hand finish before it cancels it."`
	// Registry receives the metrics and the Go and process collectors (default: a registry of
	// the service's own).
	Registry *prometheus.Registry `ignored:"true" desc:"Prometheus registry for the metrics (default: a registry of the service's own)."`
	// Logger receives the logs (default: discard).
	Logger *slog.Logger `ignored:"true" desc:"Logger (default: discard)."`
	// Clock times the background loops (default: the wall clock).
	Clock clock.Clock `ignored:"true" desc:"Clock of the background loops (default: the wall clock)."`
}

// Config configures a Client. Each field with an envconfig tag is also the environment variable
// EnvPrefix_<tag>, which FromEnv reads (cmd/worker runs on it).
//
// # Zero values
//
// A setting left unset takes its default: DefaultConfig holds them, and an unset variable
// leaves its field as DefaultConfig has it. A value that is set means what it says, in Go and
// in the environment alike: 0 is zero, which for ReorderWindow, TombstoneTTL, GapTimeout and
// LockRenewInterval is their "off" (no window, no tombstone, no gap timeout, renew at half the
// lock), and which New refuses, naming the field and its variable, where it means nothing (a
// zero MaxConcurrentSessions). So start from DefaultConfig and change what differs.
type Config struct {
	// Provider is the broker the worker consumes: ProviderServiceBus (sessions of a queue or
	// subscription) or ProviderSQS (message groups of an SQS FIFO queue, see SQS).
	Provider Provider `envconfig:"PROVIDER" desc:"Broker the worker consumes: servicebus (the sessions of a queue or subscription) or sqs (the message groups of an SQS FIFO queue; needs the postgres state store and early messages held in the store)."`
	ServiceBus
	// SQS is the SQS FIFO queue consumed with ProviderSQS.
	SQS
	// Entity is the session-enabled queue or topic subscription (an entity without sessions
	// with OrderingNone).
	sbadapter.Entity
	// Ordering is OrderingSession (restore each session's order) or OrderingNone (handle the
	// messages of an entity without sessions as they come, no state).
	Ordering Ordering `envconfig:"ORDERING" desc:"session: restore each session's order; none: handle the messages of an entity without sessions as they come, keeping no state."`

	// StateStore is where session states live. Database is used with StateStorePostgres only.
	StateStore StateStore `envconfig:"STATE_STORE" desc:"Where session states live: servicebus (the Service Bus session state, no database) or postgres (the database URL)."`
	Database
	// StateMaxBytes bounds the Service Bus session state: the entity's maximum message size
	// (256 KiB on the Standard tier; Premium allows up to 100 MiB).
	StateMaxBytes ByteSize `envconfig:"STATE_MAX_BYTES" desc:"Bound on the Service Bus session state: the entity's maximum message size (Standard 256KiB; Premium up to 100MiB)."`

	// Handler handles each message, in order within its session. Required unless Journal.
	Handler sequencer.Handler `ignored:"true" desc:"Handles each message, in order within its session; required unless Journal."`
	// Journal uses the journal handler (StateStorePostgres only): each message is inserted into
	// seqbus_journal in the transaction that advances its session's state (exactly-once effects).
	Journal bool `ignored:"true" desc:"Use the journal handler: each message is inserted into seqbus_journal in the transaction that advances its session (postgres only)."`
	// Transactional runs Handler and the state save in one Postgres transaction, reachable from
	// the handler's ctx with postgres.TxFromContext (StateStorePostgres only; Journal implies it).
	Transactional bool `ignored:"true" desc:"Run Handler and the state save in one Postgres transaction, reached with postgres.TxFromContext (postgres only)."`
	// HandlerTimeout bounds one handler call.
	HandlerTimeout time.Duration `envconfig:"HANDLER_TIMEOUT" desc:"Bound on one handler call."`
	// Middleware wraps the handler (Handler or the journal), the first outermost, inside the
	// worker's own tracing, metrics, panic recovery and timeout.
	Middleware []handler.Middleware `ignored:"true" desc:"Wraps the handler, the first outermost, inside the worker's tracing, metrics, panic recovery and timeout."`

	// The sequencing policy (sequencer.EngineConfig).

	// SequenceProperty and LastProperty name the application properties of the message
	// contract (see package contract); they must differ.
	SequenceProperty string `envconfig:"SEQUENCE_PROPERTY" desc:"Application property that carries a message's sequence number; must differ from the last property."`
	LastProperty     string `envconfig:"LAST_PROPERTY" desc:"Application property that marks a session's last message."`
	// SessionIdleTimeout is how long a receive waits before a session counts as idle and is
	// released.
	SessionIdleTimeout time.Duration `envconfig:"SESSION_IDLE_TIMEOUT" desc:"How long a receive waits before a session counts as idle and is released."`
	// PoisonPolicy is what happens to a message the handler still fails after
	// MaxHandlerAttempts calls: park, skip or block (see sequencer.PoisonPolicy).
	PoisonPolicy       sequencer.PoisonPolicy `envconfig:"POISON_POLICY" desc:"What happens to a message the handler still fails after the last attempt: park (dead-letter it and park the session until an operator resumes or skips it), skip (dead-letter it and go on) or block (give it back to the broker, which delivers it again until its max delivery count)."`
	MaxHandlerAttempts int                    `envconfig:"MAX_HANDLER_ATTEMPTS" desc:"Handler calls of one message before the poison policy applies."`
	// RetryBase and RetryMax space the handler calls: attempt n waits min(RetryBase·2^(n-1),
	// RetryMax) (RetryBase 0: no wait).
	RetryBase time.Duration `envconfig:"RETRY_BASE" desc:"Wait after the first failed handler call, doubling each attempt (0: no wait)."`
	RetryMax  time.Duration `envconfig:"RETRY_MAX" desc:"Longest wait between handler attempts."`
	// RetryReleaseAfter, when positive, spends the waits after that many in-place handler
	// attempts of a message with the session released (0: every wait in place, holding the session
	// and its slot): the next attempt's time is stored in the session's state, the message is
	// deferred, the later messages wait behind it, and the sweeper wakes the session when the
	// attempt is due (see sequencer.EngineConfig.RetryReleaseAfter). It must be below
	// MaxHandlerAttempts and does not go with PoisonPolicy block.
	RetryReleaseAfter int `envconfig:"RETRY_RELEASE_AFTER" desc:"0: every retry waits in place, holding the session; N: after N attempts each wait is spent with the session released (below the attempts; not with poison policy block)."`
	// SaveEachMessage saves the exact position before each message is completed instead of once
	// per run of in-order messages in hand; with PipelineRuns the saves run in the background
	// while the handler goes on (see sequencer.EngineConfig.SaveEachMessage).
	SaveEachMessage bool `envconfig:"SAVE_EACH_MESSAGE" desc:"Save the exact position before each message is completed instead of once per run of in-order messages in hand."`
	// PipelineRuns completes the messages of a recorded run in the background, as many at once
	// as the engine's completion pipeline holds, so that a session's handler calls are not spaced
	// by a broker round trip each; after a crash up to 17 of the messages handled last may be
	// handed over again, in order (see sequencer.EngineConfig.Pipelining). On by default, as in
	// the library: awaiting each completion caps a session at one message per broker round trip.
	// A transactional handler (Journal, Transactional) has no runs to pipeline.
	PipelineRuns bool `envconfig:"PIPELINE_RUNS" desc:"Complete a run's messages in the background while the handler goes on; after a crash up to 17 handled messages may be handed over again, in order (false: at most 1)."`
	// ReorderWindow bounds the early messages held in memory per session (0: no window, every
	// early message is deferred at the broker); ReorderWindowBytes bounds their bodies.
	ReorderWindow      int      `envconfig:"REORDER_WINDOW" desc:"Early messages held in memory per session (0: none, every early message is deferred at the broker)."`
	ReorderWindowBytes ByteSize `envconfig:"REORDER_WINDOW_BYTES" desc:"Bound on the bodies of the early messages held per session: a size such as 8MiB."`
	// DrainBatch caps the deferred messages fetched per receive-deferred call; Prefetch is how
	// many messages one receive asks for.
	DrainBatch int `envconfig:"DRAIN_BATCH" desc:"Deferred messages fetched per receive-deferred call."`
	Prefetch   int `envconfig:"PREFETCH" desc:"Messages asked for per receive."`
	// ReceiveWait is how long a receive waits for more messages once the first one arrived
	// (sbadapter.Config.ReceiveWait; the SDK's own default is 20ms). Positive, below
	// SessionIdleTimeout.
	ReceiveWait time.Duration `envconfig:"RECEIVE_WAIT" desc:"How long a receive waits for more messages once the first arrived; below the session idle timeout."`
	// TombstoneTTL is how long an ended session's state is kept so that late copies are
	// dropped (0: deleted at once).
	TombstoneTTL time.Duration `envconfig:"TOMBSTONE_TTL" desc:"How long an ended session's state is kept so that late copies are dropped (0: deleted at once)."`
	// LockRenewInterval is how often session locks are renewed (0: at half the remaining lock
	// time).
	LockRenewInterval time.Duration `envconfig:"LOCK_RENEW_INTERVAL" desc:"How often session locks are renewed (0: at half the remaining lock time)."`
	// GapTimeout is how long a missing sequence is waited for, while later ones wait, before
	// GapPolicy acts (0: forever; the wait is reported by the gauges and warnings).
	GapTimeout time.Duration       `envconfig:"GAP_TIMEOUT" desc:"How long a missing sequence is waited for, while later ones wait, before the gap policy acts (0: forever)."`
	GapPolicy  sequencer.GapPolicy `envconfig:"GAP_POLICY" desc:"After the gap timeout: wait (keep waiting), skip (go on from the lowest waiting sequence) or park (park the session until an operator resumes or skips it); skip and park need a gap timeout."`
	// Unsequenced is what happens to a message without the sequence property.
	Unsequenced sequencer.Unsequenced `envconfig:"UNSEQUENCED" desc:"A message without the sequence property: deadletter (reason InvalidSequence), or passthrough (handled at once, outside the session's order)."`
	// EarlyMessages is where a message that arrives before its turn waits beyond the reorder
	// window: EarlyMessagesDefer (deferred at the broker) or EarlyMessagesStore (held in the
	// Postgres store).
	EarlyMessages EarlyMessages `envconfig:"EARLY_MESSAGES" desc:"Where a message that arrives before its turn waits beyond the reorder window: defer (deferred at the broker, fetched back by sequence number) or store (copied into the Postgres state store, completed at the broker, handed over from the store; needs SEQBUS_STATE_STORE=postgres; works on partitioned entities)."`
	// HeldMaxSessionMessages, HeldMaxSessionBytes and HeldMaxBytes bound what
	// EarlyMessagesStore holds (0: no bound): per session, and for the entity, every session
	// together. When a batch's early messages would pass a bound, the worker holds none of them:
	// they wait unsettled in the reorder window, and at the broker once the session is released
	// (sequencer.HeldLimits).
	HeldMaxSessionMessages int      `envconfig:"HELD_MAX_SESSION_MESSAGES" desc:"With SEQBUS_EARLY_MESSAGES=store: the most early messages one session holds in the store (0: no bound); past it early messages wait unsettled in the reorder window, then at the broker."`
	HeldMaxSessionBytes    ByteSize `envconfig:"HELD_MAX_SESSION_BYTES" desc:"With SEQBUS_EARLY_MESSAGES=store: the most bytes (bodies and properties) one session holds in the store (0: no bound)."`
	HeldMaxBytes           ByteSize `envconfig:"HELD_MAX_BYTES" desc:"With SEQBUS_EARLY_MESSAGES=store: the most bytes the store holds for the entity, every session together (0: no bound); each replica stops holding more past it."`
	// DeferOnPartitioned lets the worker defer early messages on a partitioned entity, which
	// Start otherwise refuses (see EarlyMessages): for a namespace where `worker doctor`'s
	// round trip showed deferral to work.
	DeferOnPartitioned bool `envconfig:"DEFER_ON_PARTITIONED" desc:"Start with SEQBUS_EARLY_MESSAGES=defer on a partitioned entity, after worker doctor showed deferral to work on it."`

	// MaxConcurrentSessions bounds the sessions (with OrderingNone: the messages) handled at once.
	// A session's slot is free once its last handler call returned (unless a settlement was
	// refused as busy): its last save and close finish while the next session is accepted
	// (sequencer.RunnerConfig.MaxConcurrentSessions).
	MaxConcurrentSessions int `envconfig:"MAX_CONCURRENT_SESSIONS" desc:"Sessions handled at once by one replica (with ordering none: messages)."`
	// SessionConnections is how many connections the runner locks sessions on, in turn
	// (sbadapter.Config.AcceptClients). The SDK negotiates an accept's claims one at a time per
	// connection, so with one connection a replica takes sessions one after the other: with short
	// sessions and a far broker that, not MaxConcurrentSessions, bounds it. 1 to
	// MaxConcurrentSessions; session ordering only.
	SessionConnections int `envconfig:"SESSION_CONNECTIONS" desc:"Connections sessions are locked on, in turn; at most the concurrent sessions, session ordering only."`
	// SweepInterval is how often the sweeper looks for sessions that need a run the broker will
	// not start (stranded on deferred messages, past their gap timeout), refreshes the session
	// gauges and, with Postgres, purges expired tombstones.
	SweepInterval time.Duration `envconfig:"SWEEP_INTERVAL" desc:"How often the replica holding the sweeper lease wakes stranded sessions, refreshes the session gauges and, with Postgres, purges expired tombstones."`
	// ScaleInterval is how often the scaling signal (GET /scale, seqbus_replicas_wanted) is
	// evaluated: by `worker scaler`, and by the worker that holds the sweeper lease.
	ScaleInterval time.Duration `envconfig:"SCALE_INTERVAL" desc:"How often the scaling signal (GET /scale, seqbus_replicas_wanted) is evaluated."`
	// ScaleMaxReplicas bounds the replicas the scaling signal asks for.
	ScaleMaxReplicas int `envconfig:"SCALE_MAX_REPLICAS" desc:"Most replicas the scaling signal asks for."`
	// ScaleCreditsPerSecond bounds what the scaling signal spends at the broker, on average, in
	// a Standard namespace's credits (10 a management request, 1 another call): an evaluation
	// that cost N is followed by the next no sooner than N/ScaleCreditsPerSecond seconds after
	// it began (and no sooner than ScaleInterval). 0: no bound.
	ScaleCreditsPerSecond int `envconfig:"SCALE_CREDITS_PER_SECOND" desc:"Bound on the broker credits per second the scaling signal spends, on average (Standard tier: 10 a management request, 1 another call; 0: no bound)."`

	Service
	// TracerProvider traces each handler call (default: tracing off). TracingFromEnv builds one
	// from the standard OTEL_* variables.
	TracerProvider trace.TracerProvider `ignored:"true" desc:"Traces each handler call (default: off); worker.TracingFromEnv builds one from the OTEL_* variables."`
}

// DefaultConfig returns the defaults of every setting: what an empty environment gives.
func DefaultConfig() Config {
	engine := sequencer.EngineConfig{}.WithDefaults()
	return Config{
		Provider:               ProviderServiceBus,
		Ordering:               OrderingSession,
		StateStore:             StateStoreServiceBus,
		StateMaxBytes:          256 << 10,
		HandlerTimeout:         30 * time.Second,
		SequenceProperty:       contract.SequenceProperty,
		LastProperty:           contract.LastProperty,
		SessionIdleTimeout:     5 * time.Second, // the library's 30s holds a quiet session's lock too long for a service
		PoisonPolicy:           engine.Poison,
		MaxHandlerAttempts:     engine.Retry.Attempts,
		RetryBase:              engine.Retry.Base,
		RetryMax:               engine.Retry.Cap,
		ReorderWindow:          engine.WindowMessages,
		ReorderWindowBytes:     ByteSize(engine.WindowBytes),
		DrainBatch:             engine.DeferredBatch,
		Prefetch:               engine.ReceiveBatch,
		ReceiveWait:            sbadapter.DefaultReceiveWait,
		PipelineRuns:           true,
		TombstoneTTL:           engine.TombstoneTTL,
		GapPolicy:              engine.GapPolicy,
		Unsequenced:            engine.Unsequenced,
		EarlyMessages:          EarlyMessagesDefer,
		HeldMaxSessionMessages: 10_000,
		HeldMaxSessionBytes:    64 << 20,
		HeldMaxBytes:           1 << 30,
		MaxConcurrentSessions:  8,
		SessionConnections:     1,
		SweepInterval:          30 * time.Second,
		ScaleInterval:          10 * time.Second,
		ScaleMaxReplicas:       100,
		ScaleCreditsPerSecond:  100,
		Service:                defaultService(),
	}
}

func defaultService() Service {
	return Service{HTTPAddr: ":9464", ReadyInterval: 5 * time.Second, SoftStopTimeout: 30 * time.Second}
}

// FromEnv sets the fields of cfg (a *Config, *RelayConfig or any struct with envconfig tags)
// whose EnvPrefix_ variables are set, and leaves the others as they are. A value that does not
// parse is an error naming its variable.
func FromEnv(cfg any) error {
	if err := envconfig.Process(EnvPrefix, cfg); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	return nil
}

// EngineConfig returns the sequencing policy the worker's engine runs with (cmd/soak seeds ended
// sessions with it, so that their states are the worker's own).
func (c Config) EngineConfig() sequencer.EngineConfig { return c.engine() }

// engine returns the sequencing policy for the engine, whose zero values mean its defaults:
// the settings' 0 for "off" becomes the engine's word for it.
func (c Config) engine() sequencer.EngineConfig {
	e := sequencer.EngineConfig{
		SequenceProperty:  c.SequenceProperty,
		LastProperty:      c.LastProperty,
		WindowMessages:    c.ReorderWindow,
		WindowBytes:       int(c.ReorderWindowBytes),
		ReceiveBatch:      c.Prefetch,
		DeferredBatch:     c.DrainBatch,
		Retry:             sequencer.RetryPolicy{Attempts: c.MaxHandlerAttempts, Base: c.RetryBase, Cap: c.RetryMax},
		RetryReleaseAfter: c.RetryReleaseAfter,
		Poison:            c.PoisonPolicy,
		IdleTimeout:       c.SessionIdleTimeout,
		GapTimeout:        c.GapTimeout,
		GapPolicy:         c.GapPolicy,
		Unsequenced:       c.Unsequenced,
		TombstoneTTL:      c.TombstoneTTL,
		SaveEachMessage:   c.SaveEachMessage,
		LockRenewInterval: c.LockRenewInterval,
		EarlyMessages:     sequencer.EarlyDefer,
	}
	if c.EarlyMessages == EarlyMessagesStore {
		e.EarlyMessages = sequencer.EarlyStore
		e.Held = sequencer.HeldLimits{SessionMessages: c.HeldMaxSessionMessages,
			SessionBytes: int64(c.HeldMaxSessionBytes), TotalBytes: int64(c.HeldMaxBytes)}
	}
	if !c.PipelineRuns || c.Transactional || c.Journal {
		// A transactional handler runs no recorded runs; saying so here keeps the engine's
		// ReplayWindow exact (1) for it.
		e.Pipelining = sequencer.Awaited
	}
	if c.ReorderWindow == 0 {
		e.WindowMessages = sequencer.NoWindow
	}
	if c.Provider == ProviderSQS {
		// Awaited, each completion is deleted at once (sqsadapter.DeleteEach), one at a time, in
		// the order handled: a replay window of 1. Pipelined, a session's completions are deleted
		// when it closes (DeleteAtClose): a crash before then hands over again up to the
		// session's messages, one receive (sqsadapter.MaxReceive), which the window must cover.
		e.MaxPendingSettlements = 1
		if e.WithDefaults().Pipelining == sequencer.Pipelined {
			e.MaxPendingSettlements = sqsadapter.MaxReceive - 1
		}
	}
	if c.TombstoneTTL == 0 {
		e.TombstoneTTL = sequencer.NoTombstone
	}
	return e
}

// sqsDeletes is when the SQS FIFO sessions delete their completions: at close, in batches, when
// the engine runs pipelined (its replay window covers a session), each at once otherwise.
func (c Config) sqsDeletes() sqsadapter.Deletes {
	if c.EngineConfig().WithDefaults().Pipelining == sequencer.Pipelined {
		return sqsadapter.DeleteAtClose
	}
	return sqsadapter.DeleteEach
}

// ConfigError is a problem with one setting, found by New (the value) or Start (what it leads
// to: a database that does not answer, an entity that does not exist, a key that is refused).
// Field is the Config field; Var the environment variable that sets it ("" for a field only Go
// sets), read from the field's envconfig tag.
type ConfigError struct {
	Field string
	Var   string
	Err   error
}

func (e *ConfigError) Error() string {
	if e.Var == "" {
		return fmt.Sprintf("worker: Config.%s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("%s: %v (Config.%s)", e.Var, e.Err, e.Field)
}

// Unwrap returns the problem.
func (e *ConfigError) Unwrap() error { return e.Err }

// configError is a problem with field of Config (or of a struct it embeds).
func configError(field string, err error) error {
	return &ConfigError{Field: field, Var: envVar(reflect.TypeFor[Config](), field), Err: err}
}

// envVar returns the variable of the field at path in t (a name, promoted fields included, or
// a selector such as Entity.Queue), from its envconfig tag; "" when it has none.
func envVar(t reflect.Type, path string) string {
	var f reflect.StructField
	for name := range strings.SplitSeq(path, ".") {
		var ok bool
		if t.Kind() != reflect.Struct {
			return ""
		}
		if f, ok = t.FieldByName(name); !ok {
			return ""
		}
		t = f.Type
	}
	tag := f.Tag.Get("envconfig")
	if tag == "" || f.Tag.Get("ignored") == "true" {
		return ""
	}
	return EnvPrefix + "_" + tag
}

// problems collects what is wrong with a configuration of type T, each a *ConfigError.
type problems[T any] []error

func (p *problems[T]) add(field, format string, args ...any) {
	*p = append(*p, &ConfigError{Field: field, Var: envVar(reflect.TypeFor[T](), field), Err: fmt.Errorf(format, args...)})
}

// v names the setting of field: its variable, or Config.Field when it has none.
func (p *problems[T]) v(field string) string {
	if name := envVar(reflect.TypeFor[T](), field); name != "" {
		return name
	}
	return "Config." + field
}

func (p *problems[T]) positive(field string, n int64, show any) {
	if n <= 0 {
		p.add(field, "must be positive, got %v", show)
	}
}

func (p *problems[T]) err() error {
	if len(*p) == 0 {
		return nil
	}
	return fmt.Errorf("invalid configuration:\n%w", errors.Join(*p...))
}

func oneOf[T any, V ~string](p *problems[T], field string, value V, allowed ...V) {
	if !slices.Contains(allowed, value) {
		strs := make([]string, len(allowed))
		for i, a := range allowed {
			strs[i] = string(a)
		}
		p.add(field, "%q is not one of %s", value, strings.Join(strs, ", "))
	}
}

// Validate checks c and reports every problem at once, each a *ConfigError naming its field and
// variable. New calls it.
func (c *Config) Validate() error {
	var p problems[Config]
	oneOf(&p, "Provider", c.Provider, ProviderServiceBus, ProviderSQS)
	if c.Provider == ProviderSQS {
		checkSQS(&p, c)
	} else {
		checkServiceBusEntity(&p, c)
	}
	c.checkSettings(&p)
	return p.err()
}

// checkServiceBusEntity checks how the worker reaches Service Bus and which entity it consumes.
func checkServiceBusEntity(p *problems[Config], c *Config) {
	checkServiceBus(p, c.ServiceBus)
	if c.SQSQueueURL != "" {
		p.add("SQSQueueURL", "is read with %s=%s only, got %s=%s", p.v("Provider"), ProviderSQS, p.v("Provider"), c.Provider)
	}
	switch e := c.Entity; {
	case e.Queue != "" && (e.Topic != "" || e.Subscription != ""):
		p.add("Entity.Queue", "set either %s or %s with %s, not both", p.v("Queue"), p.v("Topic"), p.v("Subscription"))
	case e.Queue != "":
	case e.Topic != "" && e.Subscription == "":
		p.add("Entity.Subscription", "required with %s", p.v("Topic"))
	case e.Topic == "" && e.Subscription != "":
		p.add("Entity.Topic", "required with %s", p.v("Subscription"))
	case e.Topic == "":
		p.add("Entity.Queue", "set it, or %s with %s", p.v("Topic"), p.v("Subscription"))
	}
}

// checkSettings checks what every provider reads: the ordering, the store, the policy and the
// service.
func (c *Config) checkSettings(p *problems[Config]) {
	oneOf(p, "Ordering", c.Ordering, OrderingSession, OrderingNone)
	transactional := c.Transactional || c.Journal
	if c.Ordering == OrderingNone && (c.StateStore != StateStoreServiceBus || transactional) {
		p.add("Ordering", "none keeps no state: it needs neither %s=postgres nor the journal handler (Config.Journal, Transactional)", p.v("StateStore"))
	}
	oneOf(p, "StateStore", c.StateStore, StateStoreServiceBus, StateStorePostgres)
	switch c.StateStore {
	case StateStorePostgres:
		checkDatabase(p, c.Database, "required when "+p.v("StateStore")+"=postgres")
	case StateStoreServiceBus:
		if c.DatabaseURL != "" || c.Pool != nil || c.MigrateOnStart {
			p.add("StateStore", "%s, Config.Pool and %s need %s=postgres", p.v("DatabaseURL"), p.v("MigrateOnStart"), p.v("StateStore"))
		}
		if transactional {
			p.add("Transactional", "needs %s=postgres (the handler runs in the state's database transaction)", p.v("StateStore"))
		}
	}
	if c.StateMaxBytes < 1024 {
		p.add("StateMaxBytes", "must be at least 1KiB (the entity's maximum message size), got %d bytes", c.StateMaxBytes)
	}
	switch {
	case c.Journal && c.Handler != nil:
		p.add("Handler", "set either Handler or Journal, not both")
	case !c.Journal && c.Handler == nil:
		p.add("Handler", "required (or Journal)")
	}
	if c.Journal && c.Unsequenced == sequencer.UnsequencedPassThrough {
		p.add("Journal", "the journal records each message by its sequence: it does not go with %s=passthrough", p.v("Unsequenced"))
	}
	p.positive("HandlerTimeout", int64(c.HandlerTimeout), c.HandlerTimeout)

	checkContract(p, c.SequenceProperty, c.LastProperty)
	p.positive("SessionIdleTimeout", int64(c.SessionIdleTimeout), c.SessionIdleTimeout)
	oneOf(p, "PoisonPolicy", c.PoisonPolicy, sequencer.PoisonPark, sequencer.PoisonSkip, sequencer.PoisonBlock)
	p.positive("MaxHandlerAttempts", int64(c.MaxHandlerAttempts), c.MaxHandlerAttempts)
	if c.RetryBase < 0 {
		p.add("RetryBase", "must not be negative, got %s", c.RetryBase)
	}
	if c.RetryMax < c.RetryBase {
		p.add("RetryMax", "must be at least %s (%s), got %s", p.v("RetryBase"), c.RetryBase, c.RetryMax)
	}
	switch {
	case c.RetryReleaseAfter < 0:
		p.add("RetryReleaseAfter", "must not be negative (0 retries in place), got %d", c.RetryReleaseAfter)
	case c.RetryReleaseAfter > 0 && c.RetryReleaseAfter >= c.MaxHandlerAttempts:
		p.add("RetryReleaseAfter", "must be below %s (%d): the attempts after the first %d are the released ones, got %d",
			p.v("MaxHandlerAttempts"), c.MaxHandlerAttempts, c.RetryReleaseAfter, c.RetryReleaseAfter)
	case c.RetryReleaseAfter > 0 && c.PoisonPolicy == sequencer.PoisonBlock:
		p.add("RetryReleaseAfter", "does not go with %s=block (block gives the message back to the broker after the attempts; a released retry keeps it deferred): use park or skip", p.v("PoisonPolicy"))
	}
	if c.ReorderWindow < 0 {
		p.add("ReorderWindow", "must not be negative (0 turns the window off), got %d", c.ReorderWindow)
	}
	p.positive("ReorderWindowBytes", int64(c.ReorderWindowBytes), int64(c.ReorderWindowBytes))
	p.positive("DrainBatch", int64(c.DrainBatch), c.DrainBatch)
	p.positive("Prefetch", int64(c.Prefetch), c.Prefetch)
	p.positive("ReceiveWait", int64(c.ReceiveWait), c.ReceiveWait)
	if c.ReceiveWait >= c.SessionIdleTimeout && c.SessionIdleTimeout > 0 {
		p.add("ReceiveWait", "must be below %s (%s): it is the wait for more messages after the first, got %s",
			p.v("SessionIdleTimeout"), c.SessionIdleTimeout, c.ReceiveWait)
	}
	if c.TombstoneTTL < 0 {
		p.add("TombstoneTTL", "must not be negative (0 deletes an ended session's state at once), got %s", c.TombstoneTTL)
	}
	if c.LockRenewInterval < 0 {
		p.add("LockRenewInterval", "must not be negative (0 renews at half the remaining lock time), got %s", c.LockRenewInterval)
	}
	if c.GapTimeout < 0 {
		p.add("GapTimeout", "must not be negative (0 waits for a missing sequence forever), got %s", c.GapTimeout)
	}
	oneOf(p, "GapPolicy", c.GapPolicy, sequencer.GapWait, sequencer.GapSkip, sequencer.GapPark)
	if c.GapTimeout == 0 && (c.GapPolicy == sequencer.GapSkip || c.GapPolicy == sequencer.GapPark) {
		p.add("GapPolicy", "%s acts after %s, which is 0 (wait forever): set %s", c.GapPolicy, p.v("GapTimeout"), p.v("GapTimeout"))
	}
	oneOf(p, "Unsequenced", c.Unsequenced, sequencer.UnsequencedDeadLetter, sequencer.UnsequencedPassThrough)
	checkEarlyMessages(p, *c)

	p.positive("MaxConcurrentSessions", int64(c.MaxConcurrentSessions), c.MaxConcurrentSessions)
	p.positive("SessionConnections", int64(c.SessionConnections), c.SessionConnections)
	switch {
	case c.SessionConnections > 1 && c.Ordering == OrderingNone:
		p.add("SessionConnections", "locks sessions, which %s=%s does not use: leave it at 1, got %d", p.v("Ordering"), c.Ordering, c.SessionConnections)
	case c.SessionConnections > c.MaxConcurrentSessions && c.MaxConcurrentSessions > 0:
		p.add("SessionConnections", "must not exceed %s (%d): a connection takes one accept at a time, got %d",
			p.v("MaxConcurrentSessions"), c.MaxConcurrentSessions, c.SessionConnections)
	}
	p.positive("SweepInterval", int64(c.SweepInterval), c.SweepInterval)
	p.positive("ScaleInterval", int64(c.ScaleInterval), c.ScaleInterval)
	p.positive("ScaleMaxReplicas", int64(c.ScaleMaxReplicas), c.ScaleMaxReplicas)
	if c.ScaleCreditsPerSecond < 0 {
		p.add("ScaleCreditsPerSecond", "must not be negative (0: no bound), got %d", c.ScaleCreditsPerSecond)
	}
	checkService(p, c.Service)
}

// checkServiceBus checks how Service Bus is reached: a connection string or, for Entra ID, a
// fully qualified namespace, exactly one of them.
func checkServiceBus[T any](p *problems[T], sb ServiceBus) {
	switch {
	case sb.ConnectionString == "" && sb.Namespace == "":
		p.add("ConnectionString", "set it, or %s to use Entra ID", p.v("Namespace"))
	case sb.ConnectionString != "" && sb.Namespace != "":
		p.add("Namespace", "set either %s or %s, not both", p.v("ConnectionString"), p.v("Namespace"))
	case sb.ConnectionString != "":
		if err := checkConnectionString(sb.ConnectionString); err != nil {
			p.add("ConnectionString", "%v", err)
		}
	default:
		if strings.Contains(sb.Namespace, "/") || strings.ContainsAny(sb.Namespace, " ;") {
			p.add("Namespace", "%q is not a fully qualified namespace such as myns.servicebus.windows.net", sb.Namespace)
		}
	}
}

// checkContract checks the property names of the message contract: both set, and different.
func checkContract[T any](p *problems[T], sequenceProperty, lastProperty string) {
	switch {
	case strings.TrimSpace(sequenceProperty) == "":
		p.add("SequenceProperty", "must not be empty")
	case strings.TrimSpace(lastProperty) == "":
		p.add("LastProperty", "must not be empty")
	case sequenceProperty == lastProperty:
		p.add("LastProperty", "must differ from %s (%q)", p.v("SequenceProperty"), sequenceProperty)
	}
}

// checkDatabase checks that the database is given once, as a URL or a pool; missing says why
// it is needed.
func checkDatabase[T any](p *problems[T], db Database, missing string) {
	switch {
	case db.DatabaseURL == "" && db.Pool == nil:
		p.add("DatabaseURL", "%s", missing)
	case db.DatabaseURL != "" && db.Pool != nil:
		p.add("DatabaseURL", "set either %s or Config.Pool, not both", p.v("DatabaseURL"))
	case db.DatabaseURL != "":
		if err := checkDatabaseURL(db.DatabaseURL); err != nil {
			p.add("DatabaseURL", "%v", err)
		}
	}
}

// Validate checks that the database is given, as a URL or a pool, each problem a *ConfigError
// naming its variable (what `worker migrate` needs).
func (db Database) Validate() error {
	var p problems[Database]
	checkDatabase(&p, db, "required")
	return p.err()
}

// checkService checks the settings every service has.
func checkService[T any](p *problems[T], s Service) {
	if s.HTTPAddr == "" {
		p.add("HTTPAddr", `must not be empty (an address such as :9464, or %q)`, HTTPOff)
	} else if s.HTTPAddr != HTTPOff {
		if _, _, err := net.SplitHostPort(s.HTTPAddr); err != nil {
			p.add("HTTPAddr", "%q is not host:port, :port or %s", s.HTTPAddr, HTTPOff)
		}
	}
	p.positive("ReadyInterval", int64(s.ReadyInterval), s.ReadyInterval)
	p.positive("SoftStopTimeout", int64(s.SoftStopTimeout), s.SoftStopTimeout)
}

// withDefaults fills what has a default but no setting: the logger, the clock, the journal's
// transaction.
func (c Config) withDefaults() Config {
	c.Service = c.Service.withDefaults()
	if c.Journal {
		c.Transactional = true
	}
	return c
}

func (s Service) withDefaults() Service {
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Clock == nil {
		s.Clock = clock.Real()
	}
	if s.Registry == nil {
		s.Registry = prometheus.NewRegistry()
	}
	return s
}

// httpAddr is the address to serve ("" for none).
func (s Service) httpAddr() string {
	if s.HTTPAddr == HTTPOff {
		return ""
	}
	return s.HTTPAddr
}

// LogValue renders c for logs, its secrets redacted.
func (c Config) LogValue() slog.Value { return SettingsLogValue(c) }

// String renders c with its secrets redacted, so printing a Config never leaks them.
func (c Config) String() string { return c.LogValue().String() }

// SettingsLogValue renders a struct of settings for a log: each field with an envconfig tag
// under its tag in lower case, durations as "10s", the values of fields tagged
// redact:"connection_string" or redact:"url" with their secrets hidden, those tagged
// redact:"secret" hidden whole.
func SettingsLogValue(settings any) slog.Value {
	v := reflect.ValueOf(settings)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	var attrs []slog.Attr
	for _, f := range reflect.VisibleFields(v.Type()) {
		tag := f.Tag.Get("envconfig")
		if tag == "" || f.Tag.Get("ignored") == "true" || !f.IsExported() {
			continue
		}
		fv := v.FieldByIndex(f.Index)
		key := strings.ToLower(tag)
		switch x := fv.Interface().(type) {
		case time.Duration:
			attrs = append(attrs, slog.String(key, x.String()))
		case string:
			switch f.Tag.Get("redact") {
			case "connection_string":
				x = RedactConnectionString(x)
			case "url":
				x = RedactDatabaseURL(x)
			case "secret":
				if x != "" {
					x = redacted
				}
			}
			attrs = append(attrs, slog.String(key, x))
		default:
			attrs = append(attrs, slog.Any(key, fv.Interface()))
		}
	}
	return slog.GroupValue(attrs...)
}

func checkConnectionString(s string) error {
	var endpoint, key bool
	for part := range strings.SplitSeq(s, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch strings.ToLower(k) {
		case "endpoint":
			u, err := url.Parse(v)
			if err != nil || u.Host == "" {
				return fmt.Errorf("Endpoint %q is not a URL such as sb://myns.servicebus.windows.net/", v)
			}
			endpoint = true
		case "sharedaccesskey", "sharedaccesssignature":
			key = v != ""
		}
	}
	if !endpoint {
		return errors.New("no Endpoint=sb://... in the connection string")
	}
	if !key {
		return errors.New("no SharedAccessKey or SharedAccessSignature in the connection string")
	}
	return nil
}

func checkDatabaseURL(s string) error {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		if _, err := url.Parse(s); err != nil {
			return fmt.Errorf("not a valid URL (%s)", RedactDatabaseURL(s))
		}
		return nil
	}
	if strings.Contains(s, "=") {
		return nil // keyword/value form, checked by pgx when connecting
	}
	return errors.New("expected postgres://user:password@host/db or host=... dbname=...")
}

// ConsoleSettings configure `worker console` (package console), read from the environment with
// FromEnv next to Config, whose entity, connection and state store the console operates on.
// At least one way to authenticate must be set: the console refuses to start without one.
type ConsoleSettings struct {
	ConsoleAddr      string `envconfig:"CONSOLE_ADDR" desc:"Address the web console listens on (host:port)."`
	ConsoleToken     string `envconfig:"CONSOLE_TOKEN" redact:"secret" desc:"Token of the act role (read and change): sent as Authorization: Bearer, or entered in the login form. At least 16 characters."`
	ConsoleReadToken string `envconfig:"CONSOLE_READ_TOKEN" redact:"secret" desc:"Token of the read role (pages and JSON, no action). At least 16 characters; must differ from SEQBUS_CONSOLE_TOKEN."`
	// ConsoleProxyUserHeader, when set, trusts that request header as the identity an
	// authenticating proxy (oauth2-proxy style) established: a request carrying it has the act
	// role under that name. Only for a console that nothing but the proxy can reach.
	ConsoleProxyUserHeader string `envconfig:"CONSOLE_PROXY_USER_HEADER" desc:"Request header an authenticating proxy sets to the user's name (for example X-Forwarded-User); set, it is trusted and grants the act role. Off when empty; only for a console reachable through the proxy alone."`
}

// consoleTokenMin is the shortest console token accepted.
const consoleTokenMin = 16

// DefaultConsoleSettings are the console's defaults: listening on :8080, no way to
// authenticate (which Validate refuses).
func DefaultConsoleSettings() ConsoleSettings { return ConsoleSettings{ConsoleAddr: ":8080"} }

// LogValue renders s for logs, the tokens hidden.
func (s ConsoleSettings) LogValue() slog.Value { return SettingsLogValue(s) }

// Validate reports every problem of s, each naming its variable.
func (s ConsoleSettings) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, _, err := net.SplitHostPort(s.ConsoleAddr); err != nil {
		bad("SEQBUS_CONSOLE_ADDR: %q is not host:port: %v", s.ConsoleAddr, err)
	}
	if s.ConsoleToken == "" && s.ConsoleReadToken == "" && s.ConsoleProxyUserHeader == "" {
		bad("SEQBUS_CONSOLE_TOKEN, SEQBUS_CONSOLE_READ_TOKEN, SEQBUS_CONSOLE_PROXY_USER_HEADER: none is set; the console needs at least one way to authenticate")
	}
	for _, t := range []struct{ name, value string }{{"SEQBUS_CONSOLE_TOKEN", s.ConsoleToken}, {"SEQBUS_CONSOLE_READ_TOKEN", s.ConsoleReadToken}} {
		if t.value != "" && len(t.value) < consoleTokenMin {
			bad("%s: must be at least %d characters, got %d", t.name, consoleTokenMin, len(t.value))
		}
		if strings.TrimSpace(t.value) != t.value {
			bad("%s: must not start or end with white space", t.name)
		}
	}
	if s.ConsoleToken != "" && s.ConsoleToken == s.ConsoleReadToken {
		bad("SEQBUS_CONSOLE_READ_TOKEN: must differ from SEQBUS_CONSOLE_TOKEN (a read token that acts is no read token)")
	}
	if h := s.ConsoleProxyUserHeader; h != "" && strings.IndexFunc(h, func(r rune) bool {
		return !(r == '-' || r >= '0' && r <= '9' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z')
	}) >= 0 {
		bad("SEQBUS_CONSOLE_PROXY_USER_HEADER: %q is not a header name (letters, digits and '-')", h)
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid configuration:\n%w", errors.Join(errs...))
	}
	return nil
}

package worker

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
)

// StateStore names where the worker keeps each session's state.
type StateStore string

// State stores.
const (
	// StateStoreServiceBus keeps the state in the Service Bus session state (no database).
	StateStoreServiceBus StateStore = "servicebus"
	// StateStorePostgres keeps the state in Postgres (seqbus_session_state, see migrations).
	StateStorePostgres StateStore = "postgres"
)

// Defaults of Config.
const (
	DefaultMaxConcurrentSessions = 8
	DefaultSweepInterval         = 30 * time.Second
	DefaultHandlerTimeout        = 30 * time.Second
	DefaultReadyInterval         = 5 * time.Second
)

// Config configures a Client. Zero fields take the defaults named on each field; New reports the
// first problems of a Config, each naming its field.
type Config struct {
	// ConnectionString is a Service Bus connection string. Exactly one of ConnectionString and
	// Namespace is set.
	ConnectionString string
	// Namespace is a fully qualified namespace (myns.servicebus.windows.net) reached with
	// Credential (default: azidentity.DefaultAzureCredential).
	Namespace  string
	Credential azcore.TokenCredential
	// Entity is the session-enabled queue or topic subscription (an entity without sessions with
	// OrderingNone).
	Entity sbadapter.Entity
	// Ordering is OrderingSession (default: restore each session's order) or OrderingNone
	// (handle the messages of an entity without sessions as they come, no state).
	Ordering Ordering

	// StateStore is where session states live (default StateStoreServiceBus).
	StateStore StateStore
	// DatabaseURL (or Pool) is the Postgres database of StateStorePostgres. A Pool given here is
	// the caller's: the Client never closes it.
	DatabaseURL string
	Pool        *pgxpool.Pool
	// MigrateOnStart applies the Postgres migrations at Start; otherwise Start refuses a schema
	// that lacks one (run `worker migrate up`).
	MigrateOnStart bool
	// StateMaxBytes bounds the Service Bus session state: the entity's maximum message size
	// (default 256 KiB, the Standard tier; Premium allows up to 100 MiB).
	StateMaxBytes int

	// Handler handles each message, in order within its session. Required unless Journal.
	Handler sequencer.Handler
	// Journal uses the journal handler (StateStorePostgres only): each message is inserted into
	// seqbus_journal in the transaction that advances its session's state (exactly-once effects).
	Journal bool
	// Transactional runs Handler and the state save in one Postgres transaction, reachable from
	// the handler's ctx with postgres.TxFromContext (StateStorePostgres only; Journal implies it).
	Transactional bool
	// HandlerTimeout bounds one handler call (default DefaultHandlerTimeout).
	HandlerTimeout time.Duration
	// Middleware wraps the handler (Handler or the journal), the first outermost, inside the
	// worker's own tracing, metrics, panic recovery and timeout.
	Middleware []handler.Middleware

	// Engine is the sequencing policy: retry, poison and gap policies, reorder window, drain
	// batch, tombstone TTL, lock renewal. Zero fields take the engine's defaults.
	Engine sequencer.EngineConfig
	// MaxConcurrentSessions bounds the sessions handled at once (default 8).
	MaxConcurrentSessions int
	// SweepInterval is how often the sweeper looks for sessions that need a run the broker will
	// not start (stranded on deferred messages, past their gap timeout), refreshes the session
	// gauges and, with Postgres, purges expired tombstones (default DefaultSweepInterval).
	SweepInterval time.Duration

	// HTTPAddr is where /metrics, /healthz and /readyz are served ("" serves nothing; ":0" a free
	// port, see Client.HTTPAddr).
	HTTPAddr string
	// ReadyInterval is how often readiness is checked: the broker connection and, with
	// Postgres, the database (default DefaultReadyInterval). /readyz turns 503 within two
	// intervals of losing either.
	ReadyInterval time.Duration
	// Registry receives the worker's metrics, the Go and the process collectors (default: a
	// registry of the Client's own).
	Registry *prometheus.Registry
	// TracerProvider traces each handler call (default: tracing off). TracingFromEnv builds one
	// from the standard OTEL_* variables.
	TracerProvider trace.TracerProvider
	// Logger receives the worker's logs (default: discard).
	Logger *slog.Logger
}

// withDefaults returns a copy of c with its defaults filled in.
func (c Config) withDefaults() Config {
	c.StateStore = cmp.Or(c.StateStore, StateStoreServiceBus)
	c.Ordering = cmp.Or(c.Ordering, OrderingSession)
	c.HandlerTimeout = cmp.Or(c.HandlerTimeout, DefaultHandlerTimeout)
	c.MaxConcurrentSessions = cmp.Or(c.MaxConcurrentSessions, DefaultMaxConcurrentSessions)
	c.SweepInterval = cmp.Or(c.SweepInterval, DefaultSweepInterval)
	c.ReadyInterval = cmp.Or(c.ReadyInterval, DefaultReadyInterval)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Journal {
		c.Transactional = true
	}
	return c
}

// ConfigError is a problem with one field of Config, found by New (the value) or Start (what
// it leads to: a database that does not answer, an entity that does not exist, a key that is
// refused). Field is the Config field's name, which a program that fills Config from its own
// settings (cmd/worker: SEQBUS_* variables) maps back to the setting.
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("worker: Config.%s: %v", e.Field, e.Err) }

// Unwrap returns the problem.
func (e *ConfigError) Unwrap() error { return e.Err }

func configError(field string, err error) error { return &ConfigError{Field: field, Err: err} }

// validate reports every problem of c (after withDefaults), each a *ConfigError.
func (c Config) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, configError(field, fmt.Errorf(format, args...)))
	}
	switch {
	case c.ConnectionString == "" && c.Namespace == "":
		bad("ConnectionString", "set it or Namespace")
	case c.ConnectionString != "" && c.Namespace != "":
		bad("Namespace", "set either ConnectionString or Namespace, not both")
	}
	if err := c.Entity.Validate(); err != nil {
		bad("Entity", "%v", err)
	}
	switch c.Ordering {
	case OrderingSession:
	case OrderingNone:
		if c.StateStore != StateStoreServiceBus || c.Transactional {
			bad("Ordering", "OrderingNone keeps no state: leave StateStore, Journal and Transactional unset")
		}
	default:
		bad("Ordering", "%q is neither %q nor %q", c.Ordering, OrderingSession, OrderingNone)
	}
	switch c.StateStore {
	case StateStoreServiceBus:
		if c.DatabaseURL != "" || c.Pool != nil || c.MigrateOnStart {
			bad("StateStore", "DatabaseURL, Pool and MigrateOnStart need StateStorePostgres")
		}
		if c.Transactional {
			bad("Transactional", "needs StateStorePostgres (the handler runs in the state's database transaction)")
		}
	case StateStorePostgres:
		if (c.DatabaseURL == "") == (c.Pool == nil) {
			bad("DatabaseURL", "set exactly one of DatabaseURL and Pool with StateStorePostgres")
		}
	default:
		bad("StateStore", "%q is neither %q nor %q", c.StateStore, StateStoreServiceBus, StateStorePostgres)
	}
	switch {
	case c.Journal && c.Handler != nil:
		bad("Handler", "set either Handler or Journal, not both")
	case !c.Journal && c.Handler == nil:
		bad("Handler", "required (or Journal)")
	}
	if c.StateMaxBytes < 0 {
		bad("StateMaxBytes", "must not be negative, got %d", c.StateMaxBytes)
	}
	if c.HandlerTimeout < 0 || c.SweepInterval < 0 || c.ReadyInterval < 0 {
		bad("HandlerTimeout", "HandlerTimeout, SweepInterval and ReadyInterval must not be negative")
	}
	if c.MaxConcurrentSessions < 0 {
		bad("MaxConcurrentSessions", "must be positive, got %d", c.MaxConcurrentSessions)
	}
	if err := c.Engine.WithDefaults().Validate(); err != nil {
		bad("Engine", "%v", err)
	}
	if c.Journal && c.Engine.Unsequenced == sequencer.UnsequencedPassThrough {
		bad("Journal", "the journal records each message by its sequence: it does not go with Engine.Unsequenced passthrough")
	}
	return errors.Join(errs...)
}

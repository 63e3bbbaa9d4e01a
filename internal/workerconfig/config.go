package workerconfig

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
)

// Prefix is the prefix of every environment variable the worker reads.
const Prefix = "SEQBUS"

// State stores.
const (
	StateStoreServiceBus = "servicebus"
	StateStorePostgres   = "postgres"
)

// Poison policies: what the engine does with a message the handler keeps failing.
const (
	// PoisonPark dead-letters the message and parks the session until an operator acts (the
	// values match sequencer.PoisonPolicy).
	PoisonPark = "park"
	// PoisonSkip dead-letters the message and moves on to the next sequence.
	PoisonSkip = "skip"
	// PoisonBlock marks the session blocked and abandons the message: the broker delivers it
	// again (holding up its session) until it succeeds or the max delivery count dead-letters it.
	PoisonBlock = "block"
)

// Orderings (SEQBUS_ORDERING).
const (
	OrderingSession = "session"
	OrderingNone    = "none"
)

// Gap policies (SEQBUS_GAP_POLICY): what happens once a missing sequence has been waited for
// SEQBUS_GAP_TIMEOUT (the values match sequencer.GapPolicy).
const (
	GapWait = "wait"
	GapSkip = "skip"
	GapPark = "park"
)

// What happens to a message without the sequence property (SEQBUS_UNSEQUENCED; the values match
// sequencer.Unsequenced).
const (
	UnsequencedDeadLetter  = "deadletter"
	UnsequencedPassThrough = "passthrough"
)

var (
	gapPolicies    = []string{GapWait, GapSkip, GapPark}
	unsequenced    = []string{UnsequencedDeadLetter, UnsequencedPassThrough}
	orderings      = []string{OrderingSession, OrderingNone}
	stateStores    = []string{StateStoreServiceBus, StateStorePostgres}
	poisonPolicies = []string{PoisonPark, PoisonSkip, PoisonBlock}
	logLevels      = []string{"debug", "info", "warn", "error"}
)

// Config is the worker's whole configuration. Each field's envconfig tag, prefixed with SEQBUS_,
// is the environment variable that sets it. The defaults of SequenceProperty and LastProperty
// are the names of package contract, spelled out because a tag cannot name a constant
// (TestLoadFromEnvironment checks that they agree).
type Config struct {
	// ConnectionString is a Service Bus connection string (SharedAccessKey or SharedAccessSignature).
	ConnectionString string `envconfig:"CONNECTION_STRING"`
	// Namespace is a fully qualified namespace (ns.servicebus.windows.net) reached with Entra ID
	// through DefaultAzureCredential. Exclusive with ConnectionString.
	Namespace string `envconfig:"NAMESPACE"`

	Queue        string `envconfig:"QUEUE"`
	Topic        string `envconfig:"TOPIC"`
	Subscription string `envconfig:"SUBSCRIPTION"`

	// Ordering is session (restore each session's order) or none (an entity without sessions:
	// messages handled as they come, no state).
	Ordering string `envconfig:"ORDERING" default:"session"`

	StateStore     string `envconfig:"STATE_STORE" default:"servicebus"`
	DatabaseURL    string `envconfig:"DATABASE_URL"`
	MigrateOnStart bool   `envconfig:"MIGRATE_ON_START" default:"false"`

	MaxConcurrentSessions int           `envconfig:"MAX_CONCURRENT_SESSIONS" default:"8"`
	SessionIdleTimeout    time.Duration `envconfig:"SESSION_IDLE_TIMEOUT" default:"5s"`
	SequenceProperty      string        `envconfig:"SEQUENCE_PROPERTY" default:"Sequence"`
	LastProperty          string        `envconfig:"LAST_PROPERTY" default:"IsLast"`
	PoisonPolicy          string        `envconfig:"POISON_POLICY" default:"park"`
	MaxHandlerAttempts    int           `envconfig:"MAX_HANDLER_ATTEMPTS" default:"5"`
	SweepInterval         time.Duration `envconfig:"SWEEP_INTERVAL" default:"30s"`
	// SaveEachMessage makes the engine save the state after every handler call (handler → save →
	// complete) instead of once per run of in-order messages in hand: one state write per message,
	// and a message the broker drops on its own (TTL, purge) while in hand shows as a gap rather
	// than counting as handled. See sequencer.EngineConfig.SaveEachMessage.
	SaveEachMessage bool `envconfig:"SAVE_EACH_MESSAGE" default:"false"`

	// Retry policy of a failing handler: attempt n waits min(RetryBase·2^(n-1), RetryMax).
	RetryBase time.Duration `envconfig:"RETRY_BASE" default:"1s"`
	RetryMax  time.Duration `envconfig:"RETRY_MAX" default:"30s"`
	// ReorderWindow bounds the early messages held in memory per session (0 turns the window
	// off: every early message is deferred at the broker); ReorderWindowBytes bounds their bodies.
	ReorderWindow      int      `envconfig:"REORDER_WINDOW" default:"256"`
	ReorderWindowBytes ByteSize `envconfig:"REORDER_WINDOW_BYTES" default:"8MiB"`
	// DrainBatch caps the deferred messages fetched per receive-deferred call.
	DrainBatch int `envconfig:"DRAIN_BATCH" default:"32"`
	// Prefetch is how many messages one receive asks for.
	Prefetch int `envconfig:"PREFETCH" default:"32"`
	// TombstoneTTL is how long an ended session's state is kept so that late copies are
	// dropped (0 deletes it at once).
	TombstoneTTL time.Duration `envconfig:"TOMBSTONE_TTL" default:"24h"`
	// StateMaxBytes bounds the Service Bus session state: the entity's maximum message size.
	StateMaxBytes ByteSize `envconfig:"STATE_MAX_BYTES" default:"256KiB"`
	// LockRenewInterval is how often session locks are renewed (0: half the remaining lock time).
	LockRenewInterval time.Duration `envconfig:"LOCK_RENEW_INTERVAL" default:"0s"`
	// GapTimeout is how long a missing sequence is waited for, while later ones wait, before
	// GapPolicy acts (0: forever; the wait is reported by the gauges and warnings).
	GapTimeout time.Duration `envconfig:"GAP_TIMEOUT" default:"0s"`
	// GapPolicy is wait, skip (give up the missing sequences) or park (stop the session for an
	// operator).
	GapPolicy string `envconfig:"GAP_POLICY" default:"wait"`
	// Unsequenced is what happens to a message without the sequence property: deadletter it
	// (InvalidSequence), or passthrough (handle it at once, outside the session's order).
	Unsequenced string `envconfig:"UNSEQUENCED" default:"deadletter"`

	// HTTPAddr serves /metrics, /healthz and /readyz ("off" serves nothing).
	HTTPAddr string `envconfig:"HTTP_ADDR" default:":9464"`
	// ReadyCheckInterval is how often readiness (broker, database) is checked.
	ReadyCheckInterval time.Duration `envconfig:"READY_CHECK_INTERVAL" default:"5s"`

	Handler        string        `envconfig:"HANDLER" default:"log"`
	HandlerURL     string        `envconfig:"HANDLER_URL"`
	HandlerTimeout time.Duration `envconfig:"HANDLER_TIMEOUT" default:"30s"`

	LogLevel        string        `envconfig:"LOG_LEVEL" default:"info"`
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"30s"`

	// TestCrashBeforeCommit is a test hook, ignored unless set (0): the worker exits abruptly
	// (exit code 137, no cleanup) after the handler ran for the n-th message, before the state
	// advance commits. The end-to-end tests use it to crash inside the journal transaction.
	TestCrashBeforeCommit int `envconfig:"TEST_CRASH_BEFORE_COMMIT"`
}

// HTTPOff is the SEQBUS_HTTP_ADDR value that serves no HTTP at all.
const HTTPOff = "off"

// HandlerJournal is the handler that writes in the postgres store's transaction.
const HandlerJournal = "journal"

// Load reads the configuration from the environment and validates it. handlers lists the
// handler names the binary knows (for SEQBUS_HANDLER).
func Load(handlers []string) (*Config, error) {
	return load(func(c *Config) error { return c.Validate(handlers) })
}

// load fills a T from the SEQBUS_* environment (envconfig: a value that does not parse names its
// variable), then validates it.
func load[T any](validate func(*T) error) (*T, error) {
	var c T
	if err := envconfig.Process(Prefix, &c); err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	if err := validate(&c); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks c and returns every problem at once, each naming its variable. handlers lists
// the known handler names (nil: any non-empty name).
func (c *Config) Validate(handlers []string) error {
	var p problems
	bad := p.add
	oneOf := func(name, value string, allowed []string) {
		if !slices.Contains(allowed, value) {
			bad(name, "%q is not one of %s", value, strings.Join(allowed, ", "))
		}
	}

	p.serviceBus(c.ConnectionString, c.Namespace)

	switch {
	case c.Queue != "" && (c.Topic != "" || c.Subscription != ""):
		bad("QUEUE", "set either SEQBUS_QUEUE or SEQBUS_TOPIC with SEQBUS_SUBSCRIPTION, not both")
	case c.Queue != "":
	case c.Topic != "" && c.Subscription == "":
		bad("SUBSCRIPTION", "required with SEQBUS_TOPIC")
	case c.Topic == "" && c.Subscription != "":
		bad("TOPIC", "required with SEQBUS_SUBSCRIPTION")
	case c.Topic == "":
		bad("QUEUE", "set it, or SEQBUS_TOPIC with SEQBUS_SUBSCRIPTION")
	}

	oneOf("ORDERING", c.Ordering, orderings)
	if c.Ordering == OrderingNone && (c.StateStore != StateStoreServiceBus || c.Handler == HandlerJournal) {
		bad("ORDERING", "none keeps no state: it needs neither SEQBUS_STATE_STORE=postgres nor the journal handler")
	}
	oneOf("STATE_STORE", c.StateStore, stateStores)
	if c.StateStore == StateStorePostgres && c.DatabaseURL == "" {
		bad("DATABASE_URL", "required when SEQBUS_STATE_STORE=postgres")
	}
	if c.DatabaseURL != "" {
		if err := checkDatabaseURL(c.DatabaseURL); err != nil {
			bad("DATABASE_URL", "%v", err)
		}
	}
	if c.MigrateOnStart && c.StateStore != StateStorePostgres {
		bad("MIGRATE_ON_START", "only applies with SEQBUS_STATE_STORE=postgres")
	}

	if c.MaxConcurrentSessions <= 0 {
		bad("MAX_CONCURRENT_SESSIONS", "must be positive, got %d", c.MaxConcurrentSessions)
	}
	if c.SessionIdleTimeout <= 0 {
		bad("SESSION_IDLE_TIMEOUT", "must be positive, got %s", c.SessionIdleTimeout)
	}
	if c.MaxHandlerAttempts <= 0 {
		bad("MAX_HANDLER_ATTEMPTS", "must be positive, got %d", c.MaxHandlerAttempts)
	}
	if c.SweepInterval <= 0 {
		bad("SWEEP_INTERVAL", "must be positive, got %s", c.SweepInterval)
	}
	if strings.TrimSpace(c.SequenceProperty) == "" {
		bad("SEQUENCE_PROPERTY", "must not be empty")
	}
	if strings.TrimSpace(c.LastProperty) == "" {
		bad("LAST_PROPERTY", "must not be empty")
	}
	if c.SequenceProperty != "" && c.SequenceProperty == c.LastProperty {
		bad("LAST_PROPERTY", "must differ from SEQBUS_SEQUENCE_PROPERTY (%q)", c.SequenceProperty)
	}
	oneOf("POISON_POLICY", c.PoisonPolicy, poisonPolicies)

	if handlers != nil {
		oneOf("HANDLER", c.Handler, handlers)
	} else if c.Handler == "" {
		bad("HANDLER", "must not be empty")
	}
	if c.Handler == "http" {
		if c.HandlerURL == "" {
			bad("HANDLER_URL", "required when SEQBUS_HANDLER=http")
		} else if u, err := url.Parse(c.HandlerURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("HANDLER_URL", "%q is not an http(s) URL", RedactDatabaseURL(c.HandlerURL))
		}
	}
	if c.Handler == HandlerJournal && c.StateStore != StateStorePostgres {
		bad("HANDLER", "journal requires SEQBUS_STATE_STORE=postgres (it writes in the state store's transaction)")
	}
	if c.TestCrashBeforeCommit < 0 {
		bad("TEST_CRASH_BEFORE_COMMIT", "must not be negative, got %d", c.TestCrashBeforeCommit)
	}
	if c.HandlerTimeout <= 0 {
		bad("HANDLER_TIMEOUT", "must be positive, got %s", c.HandlerTimeout)
	}
	if c.RetryBase < 0 {
		bad("RETRY_BASE", "must not be negative, got %s", c.RetryBase)
	}
	if c.RetryMax < c.RetryBase {
		bad("RETRY_MAX", "must be at least SEQBUS_RETRY_BASE (%s), got %s", c.RetryBase, c.RetryMax)
	}
	if c.ReorderWindow < 0 {
		bad("REORDER_WINDOW", "must not be negative (0 turns the window off), got %d", c.ReorderWindow)
	}
	if c.ReorderWindowBytes <= 0 {
		bad("REORDER_WINDOW_BYTES", "must be positive, got %d", c.ReorderWindowBytes)
	}
	if c.DrainBatch <= 0 {
		bad("DRAIN_BATCH", "must be positive, got %d", c.DrainBatch)
	}
	if c.Prefetch <= 0 {
		bad("PREFETCH", "must be positive, got %d", c.Prefetch)
	}
	if c.TombstoneTTL < 0 {
		bad("TOMBSTONE_TTL", "must not be negative (0 deletes an ended session's state at once), got %s", c.TombstoneTTL)
	}
	if c.StateMaxBytes < 1024 {
		bad("STATE_MAX_BYTES", "must be at least 1KiB (the entity's maximum message size), got %d bytes", c.StateMaxBytes)
	}
	if c.LockRenewInterval < 0 {
		bad("LOCK_RENEW_INTERVAL", "must not be negative (0 renews at half the remaining lock time), got %s", c.LockRenewInterval)
	}
	if c.GapTimeout < 0 {
		bad("GAP_TIMEOUT", "must not be negative (0 waits for a missing sequence forever), got %s", c.GapTimeout)
	}
	oneOf("GAP_POLICY", c.GapPolicy, gapPolicies)
	if c.GapTimeout == 0 && c.GapPolicy != GapWait && slices.Contains(gapPolicies, c.GapPolicy) {
		bad("GAP_POLICY", "%s acts after SEQBUS_GAP_TIMEOUT, which is 0 (wait forever): set SEQBUS_GAP_TIMEOUT", c.GapPolicy)
	}
	oneOf("UNSEQUENCED", c.Unsequenced, unsequenced)
	if c.Unsequenced == UnsequencedPassThrough && c.Handler == HandlerJournal {
		bad("UNSEQUENCED", "passthrough does not go with the journal handler, which records each message by its sequence")
	}
	if c.HTTPAddr == "" {
		bad("HTTP_ADDR", `must not be empty (an address such as :9464, or "off")`)
	} else if c.HTTPAddr != HTTPOff {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			bad("HTTP_ADDR", "%q is not host:port, :port or off", c.HTTPAddr)
		}
	}
	if c.ReadyCheckInterval <= 0 {
		bad("READY_CHECK_INTERVAL", "must be positive, got %s", c.ReadyCheckInterval)
	}

	oneOf("LOG_LEVEL", strings.ToLower(c.LogLevel), logLevels)
	if c.ShutdownTimeout <= 0 {
		bad("SHUTDOWN_TIMEOUT", "must be positive, got %s", c.ShutdownTimeout)
	}
	return p.err()
}

// problems collects what is wrong with a configuration, each naming its variable.
type problems []error

// add records a problem with the variable SEQBUS_<name>.
func (p *problems) add(name, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s_%s: %s", Prefix, name, fmt.Sprintf(format, args...)))
}

// serviceBus checks how the namespace is reached: a connection string or, for Entra ID, a
// fully qualified namespace, exactly one of them.
func (p *problems) serviceBus(connectionString, namespace string) {
	switch {
	case connectionString == "" && namespace == "":
		p.add("CONNECTION_STRING", "set it, or SEQBUS_NAMESPACE to use Entra ID")
	case connectionString != "" && namespace != "":
		p.add("NAMESPACE", "set either SEQBUS_CONNECTION_STRING or SEQBUS_NAMESPACE, not both")
	case connectionString != "":
		if err := checkConnectionString(connectionString); err != nil {
			p.add("CONNECTION_STRING", "%v", err)
		}
	default:
		if strings.Contains(namespace, "/") || strings.ContainsAny(namespace, " ;") {
			p.add("NAMESPACE", "%q is not a fully qualified namespace such as myns.servicebus.windows.net", namespace)
		}
	}
}

// err returns the problems joined, or nil when there are none.
func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("invalid configuration:\n%w", errors.Join(p...))
}

// SlogLevel returns LogLevel as a slog level (info when unknown).
func (c *Config) SlogLevel() slog.Level {
	switch strings.ToLower(c.LogLevel) {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// LogValue renders c for logs with its secrets redacted.
func (c Config) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("connection_string", RedactConnectionString(c.ConnectionString)),
		slog.String("namespace", c.Namespace),
		slog.String("queue", c.Queue),
		slog.String("topic", c.Topic),
		slog.String("subscription", c.Subscription),
		slog.String("ordering", c.Ordering),
		slog.String("state_store", c.StateStore),
		slog.String("database_url", RedactDatabaseURL(c.DatabaseURL)),
		slog.Bool("migrate_on_start", c.MigrateOnStart),
		slog.Int("max_concurrent_sessions", c.MaxConcurrentSessions),
		slog.Duration("session_idle_timeout", c.SessionIdleTimeout),
		slog.String("sequence_property", c.SequenceProperty),
		slog.String("last_property", c.LastProperty),
		slog.String("poison_policy", c.PoisonPolicy),
		slog.Int("max_handler_attempts", c.MaxHandlerAttempts),
		slog.Bool("save_each_message", c.SaveEachMessage),
		slog.Duration("sweep_interval", c.SweepInterval),
		slog.Duration("retry_base", c.RetryBase),
		slog.Duration("retry_max", c.RetryMax),
		slog.Int("reorder_window", c.ReorderWindow),
		slog.Int64("reorder_window_bytes", int64(c.ReorderWindowBytes)),
		slog.Int("drain_batch", c.DrainBatch),
		slog.Int("prefetch", c.Prefetch),
		slog.Duration("tombstone_ttl", c.TombstoneTTL),
		slog.Int64("state_max_bytes", int64(c.StateMaxBytes)),
		slog.Duration("lock_renew_interval", c.LockRenewInterval),
		slog.Duration("gap_timeout", c.GapTimeout),
		slog.String("gap_policy", c.GapPolicy),
		slog.String("unsequenced", c.Unsequenced),
		slog.String("http_addr", c.HTTPAddr),
		slog.Duration("ready_check_interval", c.ReadyCheckInterval),
		slog.String("handler", c.Handler),
		slog.String("handler_url", RedactDatabaseURL(c.HandlerURL)),
		slog.Duration("handler_timeout", c.HandlerTimeout),
		slog.String("log_level", c.LogLevel),
		slog.Duration("shutdown_timeout", c.ShutdownTimeout),
	}
	if c.TestCrashBeforeCommit > 0 {
		attrs = append(attrs, slog.Int("test_crash_before_commit", c.TestCrashBeforeCommit))
	}
	return slog.GroupValue(attrs...)
}

// String renders c with its secrets redacted, so printing a Config never leaks them.
func (c Config) String() string { return c.LogValue().String() }

const redacted = "REDACTED"

var (
	// secretKV matches the secret values of a Service Bus connection string: a value runs to
	// the next ';' (a SharedAccessSignature value contains spaces and '&').
	secretKV = regexp.MustCompile(`(?i)((?:SharedAccessKey|SharedAccessSignature)\s*=\s*)('[^']*'|[^;]*)`)
	// passwordKV matches the password of a keyword/value Postgres DSN, whose values end at a space.
	passwordKV = regexp.MustCompile(`(?i)(password\s*=\s*)('[^']*'|[^;\s]*)`)
	// queryPasswordKV matches password and sslpassword query parameters of a URL.
	queryPasswordKV = regexp.MustCompile(`(?i)([?&](?:ssl)?password=)([^&#]*)`)
)

// RedactConnectionString hides the SharedAccessKey and SharedAccessSignature values of a Service
// Bus connection string.
func RedactConnectionString(s string) string {
	return secretKV.ReplaceAllString(s, "${1}"+redacted)
}

// RedactDatabaseURL hides the password of a Postgres URL (postgres://u:p@h/db, including its
// password and sslpassword query parameters) or keyword/value string (password=p). A URL that
// does not parse is redacted too, from its userinfo to the last '@' (an unescaped '%' or space
// in a password is the usual reason it does not parse). It also serves any other URL with
// userinfo, such as SEQBUS_HANDLER_URL.
func RedactDatabaseURL(s string) string {
	if s == "" {
		return ""
	}
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Host != "" {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), redacted)
		}
		q := u.Query()
		for _, k := range []string{"password", "sslpassword"} {
			if q.Has(k) {
				q.Set(k, redacted)
				u.RawQuery = q.Encode()
			}
		}
		return u.String()
	}
	if scheme, rest, ok := strings.Cut(s, "://"); ok && !strings.ContainsAny(scheme, " =") {
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if user, _, hasPW := strings.Cut(rest[:at], ":"); hasPW {
				rest = user + ":" + redacted + rest[at:]
			}
		}
		return scheme + "://" + queryPasswordKV.ReplaceAllString(rest, "${1}"+redacted)
	}
	return passwordKV.ReplaceAllString(s, "${1}"+redacted)
}

func checkConnectionString(s string) error {
	var endpoint bool
	var key bool
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

// MigrateConfig is what `worker migrate` needs: only the database.
type MigrateConfig struct {
	DatabaseURL string `envconfig:"DATABASE_URL"`
	LogLevel    string `envconfig:"LOG_LEVEL" default:"info"`
}

// LoadMigrate reads the migrate subcommand's configuration from the environment.
func LoadMigrate() (*MigrateConfig, error) { return load((*MigrateConfig).Validate) }

// Validate checks c, naming the offending variable.
func (c *MigrateConfig) Validate() error {
	var errs []error
	switch {
	case c.DatabaseURL == "":
		errs = append(errs, fmt.Errorf("%s_DATABASE_URL: required for migrate", Prefix))
	default:
		if err := checkDatabaseURL(c.DatabaseURL); err != nil {
			errs = append(errs, fmt.Errorf("%s_DATABASE_URL: %w", Prefix, err))
		}
	}
	if !slices.Contains(logLevels, strings.ToLower(c.LogLevel)) {
		errs = append(errs, fmt.Errorf("%s_LOG_LEVEL: %q is not one of %s", Prefix, c.LogLevel, strings.Join(logLevels, ", ")))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid configuration:\n%w", errors.Join(errs...))
	}
	return nil
}

// SlogLevel returns LogLevel as a slog level.
func (c *MigrateConfig) SlogLevel() slog.Level { return (&Config{LogLevel: c.LogLevel}).SlogLevel() }

// fieldVars maps the fields of worker.Config that settings fill to their variables.
var fieldVars = map[string]string{
	"ConnectionString":      "CONNECTION_STRING",
	"Namespace":             "NAMESPACE",
	"StateStore":            "STATE_STORE",
	"Ordering":              "ORDERING",
	"DatabaseURL":           "DATABASE_URL",
	"MigrateOnStart":        "MIGRATE_ON_START",
	"StateMaxBytes":         "STATE_MAX_BYTES",
	"Handler":               "HANDLER",
	"Journal":               "HANDLER",
	"Transactional":         "HANDLER",
	"HandlerTimeout":        "HANDLER_TIMEOUT",
	"MaxConcurrentSessions": "MAX_CONCURRENT_SESSIONS",
	"SweepInterval":         "SWEEP_INTERVAL",
	"HTTPAddr":              "HTTP_ADDR",
	"ReadyInterval":         "READY_CHECK_INTERVAL",
}

// Var names the variable behind a worker.Config field ("" when none does). The entity names
// SEQBUS_QUEUE, or SEQBUS_TOPIC/SEQBUS_SUBSCRIPTION as configured.
func (c *Config) Var(field string) string {
	if field == "Entity" {
		if c.Queue != "" {
			return Prefix + "_QUEUE"
		}
		return Prefix + "_TOPIC/" + Prefix + "_SUBSCRIPTION"
	}
	if v, ok := fieldVars[field]; ok {
		return Prefix + "_" + v
	}
	return ""
}

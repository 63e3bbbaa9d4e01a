package workerconfig

import (
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"
)

// RelayConfig is what `worker relay` reads: the Service Bus connection and the database of the
// worker's own settings, and the relay's tuning (SEQBUS_RELAY_*).
type RelayConfig struct {
	ConnectionString string `envconfig:"CONNECTION_STRING"`
	Namespace        string `envconfig:"NAMESPACE"`
	DatabaseURL      string `envconfig:"DATABASE_URL"`
	MigrateOnStart   bool   `envconfig:"MIGRATE_ON_START" default:"false"`
	SequenceProperty string `envconfig:"SEQUENCE_PROPERTY" default:"Sequence"`
	LastProperty     string `envconfig:"LAST_PROPERTY" default:"IsLast"`

	// Entities restricts the relay to these queues and topics (comma-separated; default all).
	Entities       []string      `envconfig:"RELAY_ENTITIES"`
	BatchSize      int           `envconfig:"RELAY_BATCH_SIZE" default:"100"`
	Concurrency    int           `envconfig:"RELAY_CONCURRENCY" default:"4"`
	PollInterval   time.Duration `envconfig:"RELAY_POLL_INTERVAL" default:"5s"`
	MinBackoff     time.Duration `envconfig:"RELAY_MIN_BACKOFF" default:"1s"`
	MaxBackoff     time.Duration `envconfig:"RELAY_MAX_BACKOFF" default:"1m"`
	SendTimeout    time.Duration `envconfig:"RELAY_SEND_TIMEOUT" default:"30s"`
	EndedRetention time.Duration `envconfig:"RELAY_ENDED_RETENTION" default:"168h"`
	PurgeInterval  time.Duration `envconfig:"RELAY_PURGE_INTERVAL" default:"1m"`

	HTTPAddr           string        `envconfig:"HTTP_ADDR" default:":9464"`
	ReadyCheckInterval time.Duration `envconfig:"READY_CHECK_INTERVAL" default:"5s"`
	LogLevel           string        `envconfig:"LOG_LEVEL" default:"info"`
	ShutdownTimeout    time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"30s"`
}

// LoadRelay reads the relay's configuration from the environment and validates it.
func LoadRelay() (*RelayConfig, error) { return load((*RelayConfig).Validate) }

// Validate checks c, naming the offending variable in each error.
func (c *RelayConfig) Validate() error {
	var p problems
	bad := p.add
	p.serviceBus(c.ConnectionString, c.Namespace)
	if c.DatabaseURL == "" {
		bad("DATABASE_URL", "required: the outbox lives in Postgres")
	} else if err := checkDatabaseURL(c.DatabaseURL); err != nil {
		bad("DATABASE_URL", "%v", err)
	}
	if strings.TrimSpace(c.SequenceProperty) == "" || strings.TrimSpace(c.LastProperty) == "" || c.SequenceProperty == c.LastProperty {
		bad("SEQUENCE_PROPERTY", "SEQBUS_SEQUENCE_PROPERTY and SEQBUS_LAST_PROPERTY must be set and differ")
	}
	for _, e := range c.Entities {
		if strings.TrimSpace(e) == "" {
			bad("RELAY_ENTITIES", "has an empty entity name")
		}
	}
	if c.BatchSize < 1 {
		bad("RELAY_BATCH_SIZE", "must be positive, got %d", c.BatchSize)
	}
	if c.Concurrency < 1 {
		bad("RELAY_CONCURRENCY", "must be positive, got %d", c.Concurrency)
	}
	for name, d := range map[string]time.Duration{"RELAY_POLL_INTERVAL": c.PollInterval, "RELAY_MIN_BACKOFF": c.MinBackoff,
		"RELAY_SEND_TIMEOUT": c.SendTimeout, "RELAY_PURGE_INTERVAL": c.PurgeInterval, "READY_CHECK_INTERVAL": c.ReadyCheckInterval,
		"SHUTDOWN_TIMEOUT": c.ShutdownTimeout} {
		if d <= 0 {
			bad(name, "must be positive, got %s", d)
		}
	}
	if c.MaxBackoff < c.MinBackoff {
		bad("RELAY_MAX_BACKOFF", "must be at least SEQBUS_RELAY_MIN_BACKOFF (%s), got %s", c.MinBackoff, c.MaxBackoff)
	}
	if c.EndedRetention < 0 {
		bad("RELAY_ENDED_RETENTION", "must not be negative (0 keeps ended sessions forever), got %s", c.EndedRetention)
	}
	if c.HTTPAddr == "" {
		bad("HTTP_ADDR", `must not be empty (an address such as :9464, or "off")`)
	} else if c.HTTPAddr != HTTPOff {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			bad("HTTP_ADDR", "%q is not host:port, :port or off", c.HTTPAddr)
		}
	}
	if !slices.Contains(logLevels, strings.ToLower(c.LogLevel)) {
		bad("LOG_LEVEL", "%q is not one of %s", c.LogLevel, strings.Join(logLevels, ", "))
	}
	return p.err()
}

// SlogLevel returns LogLevel as a slog level.
func (c *RelayConfig) SlogLevel() slog.Level { return (&Config{LogLevel: c.LogLevel}).SlogLevel() }

// LogValue renders c for logs with its secrets redacted.
func (c RelayConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("connection_string", RedactConnectionString(c.ConnectionString)),
		slog.String("namespace", c.Namespace),
		slog.String("database_url", RedactDatabaseURL(c.DatabaseURL)),
		slog.Bool("migrate_on_start", c.MigrateOnStart),
		slog.Any("entities", c.Entities),
		slog.Int("batch_size", c.BatchSize),
		slog.Int("concurrency", c.Concurrency),
		slog.Duration("poll_interval", c.PollInterval),
		slog.Duration("min_backoff", c.MinBackoff),
		slog.Duration("max_backoff", c.MaxBackoff),
		slog.Duration("send_timeout", c.SendTimeout),
		slog.Duration("ended_retention", c.EndedRetention),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("log_level", c.LogLevel),
	)
}

// String renders c with its secrets redacted.
func (c RelayConfig) String() string { return c.LogValue().String() }

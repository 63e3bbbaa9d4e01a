package worker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/sequencer"
)

const testConn = "Endpoint=sb://localhost:5672;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=s3cr3tKey==;UseDevelopmentEmulator=true"

func valid() Config {
	c := DefaultConfig()
	c.ConnectionString, c.Queue = testConn, "orders"
	c.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	return c
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr string // "" means valid
	}{
		{"defaults with queue", func(*Config) {}, ""},
		{"topic subscription", func(c *Config) { c.Queue, c.Topic, c.Subscription = "", "t", "s" }, ""},
		{"entra id namespace", func(c *Config) { c.ConnectionString, c.Namespace = "", "myns.servicebus.windows.net" }, ""},
		{"postgres store", func(c *Config) {
			c.StateStore, c.DatabaseURL, c.MigrateOnStart = "postgres", "postgres://u:p@localhost/seqbus", true
		}, ""},
		{"postgres keyword dsn", func(c *Config) { c.StateStore, c.DatabaseURL = "postgres", "host=localhost dbname=x" }, ""},
		{"journal handler", func(c *Config) {
			c.Handler, c.Journal, c.StateStore, c.DatabaseURL = nil, true, "postgres", "postgres://u:p@localhost/seqbus"
		}, ""},

		{"early messages deferred", func(c *Config) { c.EarlyMessages = EarlyMessagesDefer }, ""},
		{"deferral on partitioned entities allowed", func(c *Config) { c.DeferOnPartitioned = true }, ""},
		{"early messages in the postgres store", func(c *Config) {
			c.EarlyMessages, c.StateStore, c.DatabaseURL = EarlyMessagesStore, "postgres", "postgres://u:p@localhost/seqbus"
		}, ""},
		{"early messages in the session state", func(c *Config) { c.EarlyMessages = EarlyMessagesStore },
			"SEQBUS_EARLY_MESSAGES: store holds early messages in the state store, which needs SEQBUS_STATE_STORE=postgres"},
		{"early messages in the store, poison policy block", func(c *Config) {
			c.EarlyMessages, c.StateStore, c.DatabaseURL, c.PoisonPolicy = EarlyMessagesStore, "postgres", "postgres://u:p@localhost/seqbus", sequencer.PoisonBlock
		}, "SEQBUS_EARLY_MESSAGES: store does not go with SEQBUS_POISON_POLICY=block"},
		{"negative held bound", func(c *Config) { c.HeldMaxSessionMessages = -1 }, "SEQBUS_HELD_MAX_SESSION_MESSAGES: must not be negative"},
		{"unknown early messages", func(c *Config) { c.EarlyMessages = "memory" }, `SEQBUS_EARLY_MESSAGES: "memory" is not one of defer, store`},
		{"no early messages", func(c *Config) { c.EarlyMessages = "" }, `SEQBUS_EARLY_MESSAGES: "" is not one of defer, store`},
		{"no credentials", func(c *Config) { c.ConnectionString = "" }, "SEQBUS_CONNECTION_STRING: set it"},
		{"both credentials", func(c *Config) { c.Namespace = "x.servicebus.windows.net" }, "SEQBUS_NAMESPACE: set either"},
		{"connection string without endpoint", func(c *Config) { c.ConnectionString = "SharedAccessKey=abc" }, "SEQBUS_CONNECTION_STRING: no Endpoint"},
		{"connection string without key", func(c *Config) { c.ConnectionString = "Endpoint=sb://x/" }, "SEQBUS_CONNECTION_STRING: no SharedAccessKey"},
		{"namespace is a URL", func(c *Config) { c.ConnectionString, c.Namespace = "", "sb://x.servicebus.windows.net/" }, "SEQBUS_NAMESPACE"},
		{"no entity", func(c *Config) { c.Queue = "" }, "SEQBUS_QUEUE: set it"},
		{"queue and topic", func(c *Config) { c.Topic, c.Subscription = "t", "s" }, "SEQBUS_QUEUE: set either"},
		{"topic without subscription", func(c *Config) { c.Queue, c.Topic = "", "t" }, "SEQBUS_SUBSCRIPTION: required"},
		{"subscription without topic", func(c *Config) { c.Queue, c.Subscription = "", "s" }, "SEQBUS_TOPIC: required"},
		{"unknown store", func(c *Config) { c.StateStore = "redis" }, `SEQBUS_STATE_STORE: "redis" is not one of servicebus, postgres`},
		{"postgres without url", func(c *Config) { c.StateStore = "postgres" }, "SEQBUS_DATABASE_URL: required"},
		{"bad database url", func(c *Config) { c.StateStore, c.DatabaseURL = "postgres", "localhost" }, "SEQBUS_DATABASE_URL: expected"},
		{"migrate without postgres", func(c *Config) { c.MigrateOnStart = true }, "SEQBUS_MIGRATE_ON_START"},
		{"zero sessions", func(c *Config) { c.MaxConcurrentSessions = 0 }, "SEQBUS_MAX_CONCURRENT_SESSIONS: must be positive"},
		{"negative sessions", func(c *Config) { c.MaxConcurrentSessions = -3 }, "SEQBUS_MAX_CONCURRENT_SESSIONS: must be positive, got -3"},
		{"zero session connections", func(c *Config) { c.SessionConnections = 0 }, "SEQBUS_SESSION_CONNECTIONS: must be positive"},
		{"more session connections than sessions", func(c *Config) { c.SessionConnections = 9 }, "SEQBUS_SESSION_CONNECTIONS: must not exceed SEQBUS_MAX_CONCURRENT_SESSIONS (8)"},
		{"session connections", func(c *Config) { c.SessionConnections = 8 }, ""},
		{"session connections without sessions", func(c *Config) {
			c.Ordering, c.SessionConnections = OrderingNone, 2
		}, "SEQBUS_SESSION_CONNECTIONS: locks sessions, which SEQBUS_ORDERING=none does not use"},
		{"zero idle timeout", func(c *Config) { c.SessionIdleTimeout = 0 }, "SEQBUS_SESSION_IDLE_TIMEOUT: must be positive"},
		{"zero receive wait", func(c *Config) { c.ReceiveWait = 0 }, "SEQBUS_RECEIVE_WAIT: must be positive, got 0s"},
		{"receive wait at the idle timeout", func(c *Config) { c.ReceiveWait = c.SessionIdleTimeout },
			"SEQBUS_RECEIVE_WAIT: must be below SEQBUS_SESSION_IDLE_TIMEOUT (5s)"},
		{"receive wait", func(c *Config) { c.ReceiveWait = 20 * time.Millisecond }, ""},
		{"zero attempts", func(c *Config) { c.MaxHandlerAttempts = 0 }, "SEQBUS_MAX_HANDLER_ATTEMPTS"},
		{"zero sweep", func(c *Config) { c.SweepInterval = 0 }, "SEQBUS_SWEEP_INTERVAL"},
		{"zero scale interval", func(c *Config) { c.ScaleInterval = 0 }, "SEQBUS_SCALE_INTERVAL: must be positive"},
		{"zero max replicas", func(c *Config) { c.ScaleMaxReplicas = 0 }, "SEQBUS_SCALE_MAX_REPLICAS: must be positive, got 0"},
		{"empty sequence property", func(c *Config) { c.SequenceProperty = " " }, "SEQBUS_SEQUENCE_PROPERTY: must not be empty"},
		{"empty last property", func(c *Config) { c.LastProperty = "" }, "SEQBUS_LAST_PROPERTY: must not be empty"},
		{"same properties", func(c *Config) { c.LastProperty = "Sequence" }, "SEQBUS_LAST_PROPERTY: must differ"},
		{"unknown poison policy", func(c *Config) { c.PoisonPolicy = "ignore" }, `SEQBUS_POISON_POLICY: "ignore" is not one of`},
		{"zero handler timeout", func(c *Config) { c.HandlerTimeout = 0 }, "SEQBUS_HANDLER_TIMEOUT"},
		{"zero shutdown timeout", func(c *Config) { c.SoftStopTimeout = 0 }, "SEQBUS_SHUTDOWN_TIMEOUT: must be positive"},
		{"window off", func(c *Config) { c.ReorderWindow = 0 }, ""},
		{"no ordering", func(c *Config) { c.Ordering = "none" }, ""},
		{"unknown ordering", func(c *Config) { c.Ordering = "fifo" }, `SEQBUS_ORDERING: "fifo" is not one of session, none`},
		{"no ordering with postgres", func(c *Config) {
			c.Ordering, c.StateStore, c.DatabaseURL = "none", "postgres", "postgres://u:p@h/db"
		}, "SEQBUS_ORDERING: none keeps no state"},
		{"no retry wait", func(c *Config) { c.RetryBase, c.RetryMax = 0, 0 }, ""},
		{"released retries", func(c *Config) { c.RetryReleaseAfter = 2 }, ""},
		{"negative release after", func(c *Config) { c.RetryReleaseAfter = -1 }, "SEQBUS_RETRY_RELEASE_AFTER: must not be negative"},
		{"release after every attempt", func(c *Config) { c.RetryReleaseAfter = 5 }, "SEQBUS_RETRY_RELEASE_AFTER: must be below SEQBUS_MAX_HANDLER_ATTEMPTS (5)"},
		{"released retries with block", func(c *Config) { c.RetryReleaseAfter, c.PoisonPolicy = 1, "block" }, "SEQBUS_RETRY_RELEASE_AFTER: does not go with SEQBUS_POISON_POLICY=block"},
		{"tombstone off", func(c *Config) { c.TombstoneTTL = 0 }, ""},
		{"http off", func(c *Config) { c.HTTPAddr = "off" }, ""},
		{"http on a host", func(c *Config) { c.HTTPAddr = "127.0.0.1:0" }, ""},
		{"negative retry base", func(c *Config) { c.RetryBase = -time.Second }, "SEQBUS_RETRY_BASE: must not be negative"},
		{"retry max below base", func(c *Config) { c.RetryMax = 100 * time.Millisecond }, "SEQBUS_RETRY_MAX: must be at least SEQBUS_RETRY_BASE (1s)"},
		{"negative window", func(c *Config) { c.ReorderWindow = -1 }, "SEQBUS_REORDER_WINDOW: must not be negative"},
		{"zero window bytes", func(c *Config) { c.ReorderWindowBytes = 0 }, "SEQBUS_REORDER_WINDOW_BYTES: must be positive"},
		{"zero drain batch", func(c *Config) { c.DrainBatch = 0 }, "SEQBUS_DRAIN_BATCH: must be positive"},
		{"zero prefetch", func(c *Config) { c.Prefetch = 0 }, "SEQBUS_PREFETCH: must be positive"},
		{"negative tombstone", func(c *Config) { c.TombstoneTTL = -time.Hour }, "SEQBUS_TOMBSTONE_TTL: must not be negative"},
		{"tiny state limit", func(c *Config) { c.StateMaxBytes = 100 }, "SEQBUS_STATE_MAX_BYTES: must be at least 1KiB"},
		{"negative renew", func(c *Config) { c.LockRenewInterval = -time.Second }, "SEQBUS_LOCK_RENEW_INTERVAL"},
		{"http address without port", func(c *Config) { c.HTTPAddr = "localhost" }, `SEQBUS_HTTP_ADDR: "localhost" is not host:port`},
		{"empty http address", func(c *Config) { c.HTTPAddr = "" }, "SEQBUS_HTTP_ADDR: must not be empty"},
		{"zero ready interval", func(c *Config) { c.ReadyInterval = 0 }, "SEQBUS_READY_CHECK_INTERVAL"},
		{"gap park", func(c *Config) { c.GapTimeout, c.GapPolicy = time.Hour, "park" }, ""},
		{"gap wait with a timeout", func(c *Config) { c.GapTimeout = time.Hour }, ""},
		{"negative gap timeout", func(c *Config) { c.GapTimeout = -time.Second }, "SEQBUS_GAP_TIMEOUT: must not be negative"},
		{"unknown gap policy", func(c *Config) { c.GapTimeout, c.GapPolicy = time.Hour, "drop" }, `SEQBUS_GAP_POLICY: "drop" is not one of wait, skip, park`},
		{"gap skip without a timeout", func(c *Config) { c.GapPolicy = "skip" }, "SEQBUS_GAP_POLICY: skip acts after SEQBUS_GAP_TIMEOUT, which is 0"},
		{"pass-through", func(c *Config) { c.Unsequenced = "passthrough" }, ""},
		{"unknown unsequenced", func(c *Config) { c.Unsequenced = "drop" }, `SEQBUS_UNSEQUENCED: "drop" is not one of deadletter, passthrough`},
		{"pass-through with the journal", func(c *Config) {
			c.Unsequenced, c.Handler, c.Journal, c.StateStore, c.DatabaseURL = "passthrough", nil, true, "postgres", "postgres://u:p@h/db"
		}, "Config.Journal: the journal records each message by its sequence: it does not go with SEQBUS_UNSEQUENCED=passthrough"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			require.NotContains(t, err.Error(), "s3cr3tKey", "errors never show the key")
		})
	}
}

func TestValidateReportsAllProblems(t *testing.T) {
	t.Parallel()
	c := valid()
	c.Queue = ""
	c.MaxConcurrentSessions = 0
	c.PoisonPolicy = "x"
	err := c.Validate()
	require.ErrorContains(t, err, "SEQBUS_QUEUE")
	require.ErrorContains(t, err, "SEQBUS_MAX_CONCURRENT_SESSIONS")
	require.ErrorContains(t, err, "SEQBUS_POISON_POLICY")
}

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
		redact         func(string) string
	}{
		{"sas key", testConn, "Endpoint=sb://localhost:5672;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=REDACTED;UseDevelopmentEmulator=true", RedactConnectionString},
		{"sas signature", "Endpoint=sb://x/;SharedAccessSignature=SharedAccessSignature sr=a&sig=b", "Endpoint=sb://x/;SharedAccessSignature=REDACTED", RedactConnectionString},
		{"empty", "", "", RedactConnectionString},
		{"url password", "postgres://app:hunter2@db:5432/seqbus?sslmode=disable", "postgres://app:REDACTED@db:5432/seqbus?sslmode=disable", RedactDatabaseURL},
		{"url without password", "postgres://app@db/seqbus", "postgres://app@db/seqbus", RedactDatabaseURL},
		{"url query password", "postgres://db/seqbus?password=hunter2", "postgres://db/seqbus?password=REDACTED", RedactDatabaseURL},
		{"keyword password", "host=db user=app password=hunter2 dbname=x", "host=db user=app password=REDACTED dbname=x", RedactDatabaseURL},
		{"quoted keyword password", "host=db password='hun ter2' dbname=x", "host=db password=REDACTED dbname=x", RedactDatabaseURL},
		{"url sslpassword", "postgres://db/seqbus?sslpassword=hunter2&sslmode=verify-full", "postgres://db/seqbus?sslmode=verify-full&sslpassword=REDACTED", RedactDatabaseURL},
		// url.Parse refuses these (a bad escape, a space): the password must not leak anyway.
		{"unparsable url password", "postgres://app:hun%zzter2@db:5432/seqbus", "postgres://app:REDACTED@db:5432/seqbus", RedactDatabaseURL},
		{"unparsable url with @ in password", "postgres://app:p@ss w0rd@db/seqbus", "postgres://app:REDACTED@db/seqbus", RedactDatabaseURL},
		{"unparsable url query password", "postgres://db:x/seqbus?password=hunter2&x=%zz", "postgres://db:x/seqbus?password=REDACTED&x=%zz", RedactDatabaseURL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.redact(tt.in))
		})
	}
}

// A setting that fails validation is quoted in the error, which goes to stderr: the quote must
// not carry its password, even when the value is too broken to parse as a URL.
func TestValidationErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"database url with bad escape", func(c *Config) {
			c.StateStore, c.DatabaseURL = "postgres", "postgres://app:hunter2%zz@db/seqbus"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tt.mutate(&c)
			err := c.Validate()
			require.Error(t, err)
			require.NotContains(t, err.Error(), "hunter2")
			require.Contains(t, err.Error(), "REDACTED", "the value is still shown, redacted")
		})
	}
}

func TestConfigLogsNoSecrets(t *testing.T) {
	t.Parallel()
	c := valid()
	c.StateStore, c.DatabaseURL = "postgres", "postgres://app:hunter2@db/seqbus"
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("worker: starting", slog.Any("config", c))
	out := buf.String() + fmt.Sprint(c) + fmt.Sprintf("%v %+v", c, &c)
	require.NotContains(t, out, "s3cr3tKey")
	require.NotContains(t, out, "hunter2")
	require.Contains(t, buf.String(), `"queue":"orders"`)
}

// TestLoadFromEnvironment uses t.Setenv, so it cannot run in parallel.
func TestLoadFromEnvironment(t *testing.T) {
	t.Setenv("SEQBUS_CONNECTION_STRING", testConn)
	t.Setenv("SEQBUS_TOPIC", "orders")
	t.Setenv("SEQBUS_SUBSCRIPTION", "billing")
	t.Setenv("SEQBUS_MAX_CONCURRENT_SESSIONS", "32")
	t.Setenv("SEQBUS_SESSION_CONNECTIONS", "4")
	t.Setenv("SEQBUS_SESSION_IDLE_TIMEOUT", "1500ms")
	t.Setenv("SEQBUS_RECEIVE_WAIT", "5ms")
	t.Setenv("SEQBUS_POISON_POLICY", "skip")
	c, err := load()
	require.NoError(t, err)
	require.Equal(t, "orders", c.Topic)
	require.Equal(t, "billing", c.Subscription)
	require.Equal(t, 32, c.MaxConcurrentSessions)
	require.Equal(t, 4, c.SessionConnections)
	require.Equal(t, 1500*time.Millisecond, c.SessionIdleTimeout)
	require.Equal(t, 5*time.Millisecond, c.ReceiveWait)
	require.Equal(t, sequencer.PoisonSkip, c.PoisonPolicy)
	require.Equal(t, StateStoreServiceBus, c.StateStore, "default")
	require.Equal(t, 30*time.Second, c.SoftStopTimeout, "default")
	require.False(t, c.SaveEachMessage, "default")
	require.Equal(t, contract.SequenceProperty, c.SequenceProperty, "default")
	require.Equal(t, contract.LastProperty, c.LastProperty, "default")
	require.Equal(t, sequencer.GapWait, c.GapPolicy, "default")
	require.Zero(t, c.GapTimeout, "default")
	require.Equal(t, sequencer.UnsequencedDeadLetter, c.Unsequenced, "default")
	require.Equal(t, EarlyMessagesDefer, c.EarlyMessages, "default")
	require.False(t, c.DeferOnPartitioned, "default")

	require.Equal(t, 10_000, c.HeldMaxSessionMessages, "default")
	require.Equal(t, ByteSize(64<<20), c.HeldMaxSessionBytes, "default")
	require.Equal(t, ByteSize(1<<30), c.HeldMaxBytes, "default")
	t.Setenv("SEQBUS_EARLY_MESSAGES", "store")
	_, err = load()
	require.ErrorContains(t, err, "SEQBUS_EARLY_MESSAGES: store holds early messages in the state store, which needs SEQBUS_STATE_STORE=postgres")
	t.Setenv("SEQBUS_STATE_STORE", "postgres")
	t.Setenv("SEQBUS_DATABASE_URL", "postgres://u:p@localhost/seqbus")
	t.Setenv("SEQBUS_HELD_MAX_SESSION_BYTES", "1MiB")
	c, err = load()
	require.NoError(t, err)
	require.Equal(t, EarlyMessagesStore, c.EarlyMessages)
	e := c.EngineConfig()
	require.Equal(t, sequencer.EarlyStore, e.EarlyMessages)
	require.Equal(t, sequencer.HeldLimits{SessionMessages: 10_000, SessionBytes: 1 << 20, TotalBytes: 1 << 30}, e.Held)
	t.Setenv("SEQBUS_STATE_STORE", "servicebus")
	t.Setenv("SEQBUS_DATABASE_URL", "")
	t.Setenv("SEQBUS_EARLY_MESSAGES", "defer")
	t.Setenv("SEQBUS_DEFER_ON_PARTITIONED", "true")
	c, err = load()
	require.NoError(t, err)
	require.True(t, c.DeferOnPartitioned)
	t.Setenv("SEQBUS_DEFER_ON_PARTITIONED", "false")

	t.Setenv("SEQBUS_SAVE_EACH_MESSAGE", "true")
	c, err = load()
	require.NoError(t, err)
	require.True(t, c.SaveEachMessage)
	t.Setenv("SEQBUS_SAVE_EACH_MESSAGE", "sometimes")
	_, err = load()
	require.ErrorContains(t, err, "SEQBUS_SAVE_EACH_MESSAGE")
	t.Setenv("SEQBUS_SAVE_EACH_MESSAGE", "false")
	require.True(t, c.PipelineRuns, "default")
	t.Setenv("SEQBUS_PIPELINE_RUNS", "false")
	c, err = load()
	require.NoError(t, err)
	require.False(t, c.PipelineRuns)
	t.Setenv("SEQBUS_PIPELINE_RUNS", "maybe")
	_, err = load()
	require.ErrorContains(t, err, "SEQBUS_PIPELINE_RUNS")
	t.Setenv("SEQBUS_PIPELINE_RUNS", "true")

	t.Setenv("SEQBUS_MAX_CONCURRENT_SESSIONS", "many")
	_, err = load()
	require.ErrorContains(t, err, "SEQBUS_MAX_CONCURRENT_SESSIONS")

	t.Setenv("SEQBUS_MAX_CONCURRENT_SESSIONS", "4")
	t.Setenv("SEQBUS_SHUTDOWN_TIMEOUT", "soon")
	_, err = load()
	require.ErrorContains(t, err, "SEQBUS_SHUTDOWN_TIMEOUT")
	t.Setenv("SEQBUS_SHUTDOWN_TIMEOUT", "10s")

	require.Equal(t, ByteSize(8<<20), c.ReorderWindowBytes, "default")
	require.Equal(t, ByteSize(256<<10), c.StateMaxBytes, "default")
	require.Equal(t, ":9464", c.HTTPAddr, "default")
	t.Setenv("SEQBUS_STATE_MAX_BYTES", "1MiB")
	t.Setenv("SEQBUS_REORDER_WINDOW_BYTES", "500000")
	c, err = load()
	require.NoError(t, err)
	require.Equal(t, ByteSize(1<<20), c.StateMaxBytes)
	require.Equal(t, ByteSize(500000), c.ReorderWindowBytes)
	t.Setenv("SEQBUS_STATE_MAX_BYTES", "lots")
	_, err = load()
	require.ErrorContains(t, err, "SEQBUS_STATE_MAX_BYTES")
}

func TestByteSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"0": 0, "512": 512, "64KiB": 64 << 10, "8MiB": 8 << 20, "1GiB": 1 << 30,
		"8 mib": 8 << 20, "64KB": 64000, "2MB": 2000000, "100B": 100} {
		var b ByteSize
		require.NoError(t, b.Decode(in), in)
		require.Equal(t, ByteSize(want), b, in)
	}
	for _, in := range []string{"", "MiB", "-1", "1.5MiB", "8 MiBs", "99999999999GiB"} {
		var b ByteSize
		require.Error(t, b.Decode(in), in)
	}
}

func TestDatabaseValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		db      Database
		wantErr string
	}{
		{"ok", Database{DatabaseURL: "postgres://u:p@h/db"}, ""},
		{"missing url", Database{}, "SEQBUS_DATABASE_URL: required"},
		{"bad url", Database{DatabaseURL: "h"}, "SEQBUS_DATABASE_URL: expected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.db.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// load is what cmd/worker does: the defaults, then the environment, then the checks.
func load() (*Config, error) {
	c := DefaultConfig()
	if err := FromEnv(&c); err != nil {
		return nil, err
	}
	c.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// TestEngineConfigFollowsTheSettings checks that the engine's policy settings reach the engine
// from the environment, defaults included.
func TestEngineConfigFollowsTheSettings(t *testing.T) {
	t.Setenv("SEQBUS_CONNECTION_STRING", "Endpoint=sb://localhost;SharedAccessKeyName=k;SharedAccessKey=v")
	t.Setenv("SEQBUS_QUEUE", "orders")
	cfg, err := load()
	require.NoError(t, err)
	e := cfg.engine()
	require.Equal(t, sequencer.GapWait, e.GapPolicy)
	require.Zero(t, e.GapTimeout)
	require.Equal(t, sequencer.UnsequencedDeadLetter, e.Unsequenced)
	require.Equal(t, sequencer.PoisonPark, e.Poison)
	require.NoError(t, e.WithDefaults().Validate())

	t.Setenv("SEQBUS_GAP_TIMEOUT", "90s")
	t.Setenv("SEQBUS_GAP_POLICY", "park")
	t.Setenv("SEQBUS_UNSEQUENCED", "passthrough")
	t.Setenv("SEQBUS_POISON_POLICY", "block")
	cfg, err = load()
	require.NoError(t, err)
	e = cfg.engine()
	require.Equal(t, 90*time.Second, e.GapTimeout)
	require.Equal(t, sequencer.GapPark, e.GapPolicy)
	require.Equal(t, sequencer.UnsequencedPassThrough, e.Unsequenced)
	require.Equal(t, sequencer.PoisonBlock, e.Poison)
	require.NoError(t, e.WithDefaults().Validate())
	require.Zero(t, e.RetryReleaseAfter, "retries wait in place unless told otherwise")

	t.Setenv("SEQBUS_POISON_POLICY", "park")
	t.Setenv("SEQBUS_RETRY_RELEASE_AFTER", "2")
	t.Setenv("SEQBUS_MAX_HANDLER_ATTEMPTS", "30")
	cfg, err = load()
	require.NoError(t, err)
	e = cfg.engine()
	require.Equal(t, 2, e.RetryReleaseAfter)
	require.Equal(t, 30, e.Retry.Attempts)
	require.NoError(t, e.WithDefaults().Validate())
}

// Zero means one thing in the environment and in Go: a setting's off where it has one.
func TestZeroIsOffInTheEnvironmentAndInGo(t *testing.T) {
	t.Setenv("SEQBUS_CONNECTION_STRING", testConn)
	t.Setenv("SEQBUS_QUEUE", "orders")
	t.Setenv("SEQBUS_REORDER_WINDOW", "0")
	t.Setenv("SEQBUS_TOMBSTONE_TTL", "0s")
	fromEnv, err := load()
	require.NoError(t, err)
	inGo := valid()
	inGo.ReorderWindow, inGo.TombstoneTTL = 0, 0
	for _, e := range []sequencer.EngineConfig{fromEnv.engine(), inGo.engine()} {
		require.Equal(t, sequencer.NoWindow, e.WindowMessages)
		require.Equal(t, sequencer.NoTombstone, e.TombstoneTTL)
	}
	unset := DefaultConfig().engine()
	require.Equal(t, 256, unset.WindowMessages, "unset takes the default")
	require.Equal(t, 24*time.Hour, unset.TombstoneTTL)
	require.Equal(t, 5*time.Second, unset.IdleTimeout, "the worker's idle timeout, as documented for SEQBUS_SESSION_IDLE_TIMEOUT")
}

// The start-up log shows durations as durations, not nanoseconds.
func TestConfigLogsDurationsAsStrings(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("worker: starting", slog.Any("config", valid()))
	require.Contains(t, buf.String(), `"shutdown_timeout":"30s"`)
	require.Contains(t, buf.String(), `"session_idle_timeout":"5s"`)
}

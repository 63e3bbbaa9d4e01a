package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// secretKey is the SharedAccessKey of the connection strings below: it must never be printed.
const secretKey = "c2VxYnVzLWUyZS1zZWNyZXQta2V5LTdmM2E5Yw=="

// TestInvalidConfigurationRejected runs the worker binary with each required variable missing or
// malformed: it exits non-zero at once, names the variable on stderr and never prints the key.
func TestInvalidConfigurationRejected(t *testing.T) {
	t.Parallel()
	// Valid apart from the case's change; nothing listens on the endpoint, so a case that passed
	// validation would fail later with a different message (or hang until the wait gives up).
	valid := map[string]string{
		"SEQBUS_CONNECTION_STRING": "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=" + secretKey + ";UseDevelopmentEmulator=true",
		"SEQBUS_QUEUE":             "orders",
	}
	tests := []struct {
		name    string
		set     map[string]string
		unset   []string
		wantVar string
	}{
		{name: "no connection string or namespace", unset: []string{"SEQBUS_CONNECTION_STRING"}, wantVar: "SEQBUS_CONNECTION_STRING"},
		{name: "connection string and namespace", set: map[string]string{"SEQBUS_NAMESPACE": "x.servicebus.windows.net"}, wantVar: "SEQBUS_NAMESPACE"},
		{name: "connection string without endpoint", set: map[string]string{"SEQBUS_CONNECTION_STRING": "SharedAccessKey=" + secretKey}, wantVar: "SEQBUS_CONNECTION_STRING"},
		{name: "no queue or topic", unset: []string{"SEQBUS_QUEUE"}, wantVar: "SEQBUS_QUEUE"},
		{name: "queue and topic", set: map[string]string{"SEQBUS_TOPIC": "t", "SEQBUS_SUBSCRIPTION": "s"}, wantVar: "SEQBUS_QUEUE"},
		{name: "topic without subscription", set: map[string]string{"SEQBUS_TOPIC": "t"}, unset: []string{"SEQBUS_QUEUE"}, wantVar: "SEQBUS_SUBSCRIPTION"},
		{name: "bad state store", set: map[string]string{"SEQBUS_STATE_STORE": "redis"}, wantVar: "SEQBUS_STATE_STORE"},
		{name: "postgres without database url", set: map[string]string{"SEQBUS_STATE_STORE": "postgres"}, wantVar: "SEQBUS_DATABASE_URL"},
		{name: "malformed database url", set: map[string]string{"SEQBUS_STATE_STORE": "postgres", "SEQBUS_DATABASE_URL": "localhost"}, wantVar: "SEQBUS_DATABASE_URL"},
		{name: "non-numeric max concurrent sessions", set: map[string]string{"SEQBUS_MAX_CONCURRENT_SESSIONS": "eight"}, wantVar: "SEQBUS_MAX_CONCURRENT_SESSIONS"},
		{name: "zero max concurrent sessions", set: map[string]string{"SEQBUS_MAX_CONCURRENT_SESSIONS": "0"}, wantVar: "SEQBUS_MAX_CONCURRENT_SESSIONS"},
		{name: "bad duration", set: map[string]string{"SEQBUS_SESSION_IDLE_TIMEOUT": "5 parsecs"}, wantVar: "SEQBUS_SESSION_IDLE_TIMEOUT"},
		{name: "bad shutdown timeout", set: map[string]string{"SEQBUS_SHUTDOWN_TIMEOUT": "soon"}, wantVar: "SEQBUS_SHUTDOWN_TIMEOUT"},
		{name: "bad poison policy", set: map[string]string{"SEQBUS_POISON_POLICY": "ignore"}, wantVar: "SEQBUS_POISON_POLICY"},
		{name: "bad handler", set: map[string]string{"SEQBUS_HANDLER": "kafka"}, wantVar: "SEQBUS_HANDLER"},
		{name: "http handler without url", set: map[string]string{"SEQBUS_HANDLER": "http"}, wantVar: "SEQBUS_HANDLER_URL"},
		{name: "journal handler without postgres", set: map[string]string{"SEQBUS_HANDLER": "journal"}, wantVar: "SEQBUS_HANDLER"},
		{name: "bad log level", set: map[string]string{"SEQBUS_LOG_LEVEL": "verbose"}, wantVar: "SEQBUS_LOG_LEVEL"},
		{name: "bad migrate flag", set: map[string]string{"SEQBUS_MIGRATE_ON_START": "perhaps"}, wantVar: "SEQBUS_MIGRATE_ON_START"},
		{name: "non-numeric test hook", set: map[string]string{"SEQBUS_TEST_CRASH_BEFORE_COMMIT": "x"}, wantVar: "SEQBUS_TEST_CRASH_BEFORE_COMMIT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vars := map[string]string{}
			for k, v := range valid {
				vars[k] = v
			}
			for k, v := range tt.set {
				vars[k] = v
			}
			for _, k := range tt.unset {
				delete(vars, k)
			}
			env := cleanEnv()
			for k, v := range vars {
				env = append(env, k+"="+v)
			}
			p := startWorker(t, "worker", env, "run")
			code := p.wait(t, 10*time.Second)
			stderr, stdout := p.stderr.String(), p.stdout.String()
			require.Equal(t, 1, code, "exit code; stderr: %s", stderr)
			require.Contains(t, stderr, tt.wantVar, "stderr names the variable")
			require.True(t, strings.HasPrefix(stderr, "worker: "), "a plain message, not a log dump: %q", stderr)
			require.NotContains(t, stderr, secretKey, "the key never appears on stderr")
			require.NotContains(t, stdout, secretKey, "the key never appears on stdout")
		})
	}
}

// TestKeyNeverPrintedWhileRunning starts a worker that gets past validation (and logs its
// configuration) and checks that its output never holds the SharedAccessKey.
func TestKeyNeverPrintedWhileRunning(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	key := strings.SplitN(strings.SplitN(f.srv.ConnectionString(), "SharedAccessKey=", 2)[1], ";", 2)[0]
	require.NotEmpty(t, key)
	p := startWorker(t, "worker", f.baseEnv("SEQBUS_LOG_LEVEL=debug"))
	waitFor(t, 15*time.Second, func() bool { return p.exited() || strings.Contains(p.stderr.String(), "worker: running") },
		func() string { return p.stderr.String() })
	p.stop(t)
	require.Contains(t, p.stderr.String(), "SharedAccessKey=REDACTED", "the logged configuration shows the key redacted")
	require.NotContains(t, p.stderr.String(), key)
	require.NotContains(t, p.stdout.String(), key)
}

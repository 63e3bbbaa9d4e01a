package main

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/worker"
)

// The binary's own settings: the handler, its URL, the log level, the crash hook.
func TestSettingsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(s *settings)
		wantErr string
	}{
		{"defaults", func(*settings) {}, ""},
		{"http handler", func(s *settings) { s.Handler, s.HandlerURL = "http", "https://example.com/hook" }, ""},
		{"journal", func(s *settings) { s.Handler = "journal" }, ""},
		{"log level upper case", func(s *settings) { s.LogLevel = "DEBUG" }, ""},
		{"unknown handler", func(s *settings) { s.Handler = "kafka" }, `SEQBUS_HANDLER: "kafka" is not one of http, journal, log, noop`},
		{"http without url", func(s *settings) { s.Handler = "http" }, "SEQBUS_HANDLER_URL: required"},
		{"http with bad url", func(s *settings) { s.Handler, s.HandlerURL = "http", "ftp://x" }, "SEQBUS_HANDLER_URL: \"ftp://x\" is not"},
		{"unknown log level", func(s *settings) { s.LogLevel = "verbose" }, "SEQBUS_LOG_LEVEL"},
		{"negative crash hook", func(s *settings) { s.TestCrashBeforeCommit = -1 }, "SEQBUS_TEST_CRASH_BEFORE_COMMIT"},
		{"handler url with credentials", func(s *settings) { s.Handler, s.HandlerURL = "http", "ftp://app:hunter2@example.com/hook" }, "REDACTED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := defaultSettings()
			tt.mutate(&s)
			err := s.validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}

func TestSettingsLevel(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]slog.Level{"debug": slog.LevelDebug, "INFO": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError} {
		require.Equal(t, want, settings{LogLevel: in}.level(), in)
	}
}

// TestLoadOperator uses t.Setenv, so it cannot run in parallel.
func TestLoadOperator(t *testing.T) {
	clearEnv(t)
	t.Setenv("SEQBUS_CONNECTION_STRING", "Endpoint=sb://localhost;SharedAccessKeyName=k;SharedAccessKey=v")
	t.Setenv("SEQBUS_QUEUE", "orders")
	t.Setenv("SEQBUS_STATE_STORE", "postgres")
	t.Setenv("SEQBUS_DATABASE_URL", "postgres://seqbus:pw@localhost/db")
	t.Setenv("SEQBUS_SEQUENCE_PROPERTY", "Seq")
	c, _, _ := newTestCLI()
	cfg, _, err := c.loadWorker()
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())
	require.Equal(t, "orders", cfg.Queue, "the worker's variables")
	require.Equal(t, "Seq", cfg.SequenceProperty)
	require.NotContains(t, cfg.String(), "pw@", "the password is redacted")
	var hook operatorSettings
	require.NoError(t, worker.FromEnv(&hook))
	require.Zero(t, hook.TestReplayCrashAfter, "the hook is off unless set")

	t.Setenv("SEQBUS_TEST_REPLAY_CRASH_AFTER", "-1")
	require.NoError(t, worker.FromEnv(&hook))
	require.ErrorContains(t, hook.validate(cfg), "SEQBUS_TEST_REPLAY_CRASH_AFTER")
	hook.TestReplayCrashAfter = 0
	cfg.Ordering = worker.OrderingNone
	require.ErrorContains(t, hook.validate(cfg), "SEQBUS_ORDERING: the operator commands work on sessions")
}

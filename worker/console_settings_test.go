package worker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/worker"
)

func TestConsoleSettingsValidate(t *testing.T) {
	t.Parallel()
	const act, read = "act-token-0123456789", "read-token-0123456789"
	tests := []struct {
		name    string
		change  func(s *worker.ConsoleSettings)
		wantErr []string
	}{
		{"act token", func(s *worker.ConsoleSettings) { s.ConsoleToken = act }, nil},
		{"read token", func(s *worker.ConsoleSettings) { s.ConsoleReadToken = read }, nil},
		{"proxy header", func(s *worker.ConsoleSettings) { s.ConsoleProxyUserHeader = "X-Forwarded-User" }, nil},
		{"no way to authenticate", func(*worker.ConsoleSettings) {}, []string{"SEQBUS_CONSOLE_TOKEN, SEQBUS_CONSOLE_READ_TOKEN, SEQBUS_CONSOLE_PROXY_USER_HEADER: none is set"}},
		{"short tokens", func(s *worker.ConsoleSettings) { s.ConsoleToken, s.ConsoleReadToken = "short", "short2" }, []string{
			"SEQBUS_CONSOLE_TOKEN: must be at least 16", "SEQBUS_CONSOLE_READ_TOKEN: must be at least 16",
		}},
		{"same tokens", func(s *worker.ConsoleSettings) { s.ConsoleToken, s.ConsoleReadToken = act, act }, []string{"SEQBUS_CONSOLE_READ_TOKEN: must differ"}},
		{"spaces", func(s *worker.ConsoleSettings) { s.ConsoleToken = act + " " }, []string{"SEQBUS_CONSOLE_TOKEN: must not start or end with white space"}},
		{"bad header", func(s *worker.ConsoleSettings) { s.ConsoleProxyUserHeader = "X User:" }, []string{"SEQBUS_CONSOLE_PROXY_USER_HEADER"}},
		{"bad addr", func(s *worker.ConsoleSettings) { s.ConsoleToken, s.ConsoleAddr = act, "8080" }, []string{"SEQBUS_CONSOLE_ADDR"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := worker.DefaultConsoleSettings()
			tt.change(&s)
			err := s.Validate()
			if tt.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tt.wantErr {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestConsoleSettingsLogHidesTokens(t *testing.T) {
	t.Parallel()
	s := worker.DefaultConsoleSettings()
	s.ConsoleToken, s.ConsoleReadToken = "act-token-0123456789", "read-token-0123456789"
	out := s.LogValue().String()
	require.NotContains(t, out, "0123456789")
	require.Contains(t, out, "console_token=REDACTED")
	require.Contains(t, out, "console_addr=:8080")
}

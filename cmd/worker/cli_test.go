package main

import (
	"bytes"
	"context"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/worker"
)

func newTestCLI() (*cli, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	c := newCLI(&out, &errOut)
	c.signals = func() (<-chan os.Signal, func()) { return make(chan os.Signal), func() {} }
	return c, &out, &errOut
}

// Tests that set environment variables cannot run in parallel.
func clearEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if len(kv) > 7 && kv[:7] == "SEQBUS_" {
			k := kv[:bytes.IndexByte([]byte(kv), '=')]
			t.Setenv(k, "")
			require.NoError(t, os.Unsetenv(k))
		}
	}
	// No HTTP server on the default port 9464, which parallel test processes would share; a
	// test that wants one sets a free port.
	t.Setenv("SEQBUS_HTTP_ADDR", "off")
}

func TestCLIUsage(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{"help", []string{"help"}, 0, "usage: worker", ""},
		{"unknown command", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{"migrate without action", []string{"migrate"}, 2, "", "migrate needs one of up, down, status"},
		{"migrate bad action", []string{"migrate", "sideways"}, 2, "", `unknown migrate action "sideways"`},
		{"demo moved to its own command", []string{"demo"}, 2, "", `unknown command "demo"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, out, errOut := newTestCLI()
			code := c.run(context.Background(), tt.args)
			require.Equal(t, tt.wantCode, code, errOut.String())
			require.Contains(t, out.String(), tt.wantOut)
			require.Contains(t, errOut.String(), tt.wantErr)
		})
	}
}

func TestRunRejectsInvalidConfiguration(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr []string
	}{
		{"nothing set", nil, []string{"SEQBUS_CONNECTION_STRING", "SEQBUS_QUEUE"}},
		{"postgres without url", map[string]string{
			"SEQBUS_CONNECTION_STRING": "Endpoint=sb://localhost:1;SharedAccessKeyName=k;SharedAccessKey=topsecret;UseDevelopmentEmulator=true",
			"SEQBUS_QUEUE":             "q",
			"SEQBUS_STATE_STORE":       "postgres",
		}, []string{"SEQBUS_DATABASE_URL"}},
		{"bad number", map[string]string{"SEQBUS_MAX_CONCURRENT_SESSIONS": "lots"}, []string{"SEQBUS_MAX_CONCURRENT_SESSIONS"}},
		{"bad enum", map[string]string{
			"SEQBUS_CONNECTION_STRING": "Endpoint=sb://localhost:1;SharedAccessKeyName=k;SharedAccessKey=topsecret;UseDevelopmentEmulator=true",
			"SEQBUS_QUEUE":             "q",
			"SEQBUS_HANDLER":           "kafka",
		}, []string{"SEQBUS_HANDLER"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, _, errOut := newTestCLI()
			code := c.run(context.Background(), nil)
			require.Equal(t, 1, code)
			for _, w := range tt.wantErr {
				require.Contains(t, errOut.String(), w)
			}
			require.NotContains(t, errOut.String(), "topsecret")
		})
	}
}

func TestMigrateNeedsDatabaseURL(t *testing.T) {
	clearEnv(t)
	c, _, errOut := newTestCLI()
	require.Equal(t, 1, c.run(context.Background(), []string{"migrate", "status"}))
	require.Contains(t, errOut.String(), "SEQBUS_DATABASE_URL: required")
}

// fakeRunnable stops with stopErr.
type fakeRunnable struct {
	stopErr  error
	canceled chan struct{}
}

func (f *fakeRunnable) Start(context.Context) error { return nil }
func (f *fakeRunnable) Stop(context.Context) error {
	if f.canceled != nil {
		<-f.canceled
	}
	return f.stopErr
}

func (f *fakeRunnable) StopAndCancel(context.Context) error {
	if f.canceled != nil {
		close(f.canceled)
	}
	return nil
}

// serve returns the stop's error, so a graceful stop that failed (the soft stop timeout passed
// and the work in hand was canceled) makes the process exit non-zero.
func TestServeReturnsTheStopsFailure(t *testing.T) {
	t.Parallel()
	c, _, errOut := newTestCLI()
	logger := c.logger(nil)
	for _, tt := range []struct {
		name    string
		stopErr error
	}{
		{"graceful stop done", nil},
		{"graceful stop timed out", worker.ErrSoftStopTimeout},
	} {
		sigs := make(chan os.Signal, 1)
		sigs <- syscall.SIGTERM
		err := c.serve(context.Background(), &fakeRunnable{stopErr: tt.stopErr}, sigs, logger, "10s")
		require.ErrorIs(t, err, tt.stopErr, tt.name)
	}
	require.Contains(t, errOut.String(), `"shutdown_timeout":"10s"`, "the timeout logs as a duration")

	// A second signal cancels the work in hand; the stop that follows is no failure.
	sigs := make(chan os.Signal, 2)
	sigs <- syscall.SIGTERM
	sigs <- syscall.SIGINT
	require.NoError(t, c.serve(context.Background(), &fakeRunnable{canceled: make(chan struct{})}, sigs, logger, "10s"))
}

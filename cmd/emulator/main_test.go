package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of run.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func noEnv(string) string { return "" }

func TestRunServesUntilCancelled(t *testing.T) {
	t.Parallel()
	cfgFile := filepath.Join(t.TempDir(), "Config.json")
	require.NoError(t, os.WriteFile(cfgFile, []byte(`{"UserConfig":{"Namespaces":[{"Name":"sbemulatorns","Queues":[{"Name":"q1","Properties":{}}],"Topics":[]}],"Logging":{"Type":"File"}}}`), 0o600))
	amqpAddr, httpAddr := freeAddr(t), freeAddr(t)
	env := map[string]string{"SEQBUS_EMULATOR_KEY": "from-env"}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	start := time.Now()
	go func() {
		done <- run(ctx, []string{"-config", cfgFile, "-amqp-addr", amqpAddr, "-http-addr", httpAddr}, func(k string) string { return env[k] }, &stdout, &stderr)
	}()

	var healthy bool
	for !healthy && time.Since(start) < 5*time.Second {
		resp, err := http.Get("http://" + httpAddr + "/health")
		if err == nil {
			healthy = resp.StatusCode == http.StatusOK
			_ = resp.Body.Close()
		}
		if !healthy {
			time.Sleep(10 * time.Millisecond)
		}
	}
	require.True(t, healthy, "stderr: %s", stderr.String())
	require.Less(t, time.Since(start), time.Second, "start to healthy")
	for stdout.String() == "" && time.Since(start) < 5*time.Second {
		time.Sleep(5 * time.Millisecond) // printed right after Start returns
	}
	require.Equal(t,
		"Endpoint=sb://"+amqpAddr+";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=from-env;UseDevelopmentEmulator=true\n",
		stdout.String())

	cancel() // what SIGTERM does through signal.NotifyContext
	select {
	case code := <-done:
		require.Equal(t, 0, code, "stderr: %s", stderr.String())
	case <-time.After(5 * time.Second):
		t.Fatal("run did not stop")
	}
}

func TestRunRejectsBadInput(t *testing.T) {
	t.Parallel()
	badJSON := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(badJSON, []byte(`{"UserConfig": [`), 0o600))
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{name: "unknown flag", args: []string{"-nope"}, wantCode: 2, wantErr: "flag provided but not defined: -nope"},
		{name: "stray argument", args: []string{"extra"}, wantCode: 2, wantErr: "unexpected arguments"},
		{name: "missing config file", args: []string{"-config", "/does/not/exist.json", "-amqp-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, wantCode: 1, wantErr: "/does/not/exist.json"},
		{name: "invalid config", args: []string{"-config", badJSON, "-amqp-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, wantCode: 1, wantErr: "bad.json"},
		{name: "bad address", args: []string{"-amqp-addr", "not-an-address", "-http-addr", "127.0.0.1:0"}, wantCode: 1, wantErr: "not-an-address"},
		{name: "empty key", args: []string{"-key", ""}, wantCode: 2, wantErr: "-key must not be empty"},
		{name: "bad log level", args: []string{"-log-level", "loud"}, wantCode: 2, wantErr: "-log-level"},
		{name: "message size too big", args: []string{"-max-message-size", "200000000", "-amqp-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, wantCode: 1, wantErr: "MaxMessageSize"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr syncBuffer
			code := run(context.Background(), tt.args, noEnv, &stdout, &stderr)
			require.Equal(t, tt.wantCode, code)
			require.Contains(t, stderr.String(), tt.wantErr)
			require.Empty(t, strings.TrimSpace(stdout.String()))
		})
	}
}

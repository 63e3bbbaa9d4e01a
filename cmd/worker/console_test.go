package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/internal/testio"
)

func TestConsoleRefusesBadConfiguration(t *testing.T) {
	srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"orders": {RequiresSession: true}}})
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		wantErr  []string
	}{
		{"an argument", []string{"console", "extra"}, nil, 2, []string{"console takes no arguments"}},
		{"no way to authenticate", []string{"console"}, nil, 1, []string{"SEQBUS_CONSOLE_TOKEN, SEQBUS_CONSOLE_READ_TOKEN, SEQBUS_CONSOLE_PROXY_USER_HEADER: none is set"}},
		{"short token", []string{"console"}, map[string]string{"SEQBUS_CONSOLE_TOKEN": "short"}, 1, []string{"SEQBUS_CONSOLE_TOKEN: must be at least 16"}},
		{"bad address", []string{"console"}, map[string]string{"SEQBUS_CONSOLE_TOKEN": "act-token-0123456789", "SEQBUS_CONSOLE_ADDR": "nowhere"}, 1, []string{"SEQBUS_CONSOLE_ADDR"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			t.Setenv("SEQBUS_CONNECTION_STRING", srv.ConnectionString())
			t.Setenv("SEQBUS_QUEUE", "orders")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, _, errOut := newTestCLI()
			code := c.run(context.Background(), tt.args)
			require.Equal(t, tt.wantCode, code, errOut.String())
			for _, w := range tt.wantErr {
				require.Contains(t, errOut.String(), w)
			}
			require.NotContains(t, errOut.String(), "console: listening", "nothing served")
		})
	}
}

var listening = regexp.MustCompile(`"msg":"console: listening","addr":"([^"]+)"`)

// TestConsoleServes: `worker console` serves the console with the worker's settings until a
// signal, and never logs its tokens.
func TestConsoleServes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"orders": {RequiresSession: true}}})
	const token = "act-token-0123456789abcdef"
	clearEnv(t)
	t.Setenv("SEQBUS_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("SEQBUS_QUEUE", "orders")
	t.Setenv("SEQBUS_CONSOLE_ADDR", "127.0.0.1:0")
	t.Setenv("SEQBUS_CONSOLE_TOKEN", token)
	t.Setenv("SEQBUS_SHUTDOWN_TIMEOUT", "5s")

	var stdout, stderr testio.SyncBuffer
	c := newCLI(&stdout, &stderr)
	sigs := make(chan os.Signal, 2)
	c.signals = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	exit := make(chan int, 1)
	go func() { exit <- c.run(ctx, []string{"console"}) }()

	var addr string
	require.Eventually(t, func() bool {
		m := listening.FindStringSubmatch(stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 20*time.Second, 20*time.Millisecond, "stderr: %s", stderr.String())

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/overview", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var ov struct {
		Counts    map[string]int `json:"counts"`
		Reachable []struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"reachable"`
	}
	require.NoError(t, json.Unmarshal(body, &ov))
	require.Equal(t, 0, ov.Counts["parked"])
	require.Len(t, ov.Reachable, 1)
	require.True(t, ov.Reachable[0].OK, string(body))

	resp, err = http.Get("http://" + addr + "/api/overview")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	sigs <- syscall.SIGTERM
	select {
	case code := <-exit:
		require.Equal(t, 0, code, stderr.String())
	case <-time.After(15 * time.Second):
		t.Fatal("console did not stop")
	}
	require.NotContains(t, stderr.String(), token, "the token is never logged")
	require.True(t, strings.Contains(stderr.String(), `"console_token":"REDACTED"`), stderr.String())
}

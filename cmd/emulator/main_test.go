package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/internal/testio"
)

func noEnv(string) string { return "" }

func TestRunServesUntilCancelled(t *testing.T) {
	t.Parallel()
	cfgFile := filepath.Join(t.TempDir(), "Config.json")
	require.NoError(t, os.WriteFile(cfgFile, []byte(`{"UserConfig":{"Namespaces":[{"Name":"sbemulatorns","Queues":[{"Name":"q1","Properties":{}}],"Topics":[]}],"Logging":{"Type":"File"}}}`), 0o600))
	env := map[string]string{"SEQBUS_EMULATOR_KEY": "from-env"}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr testio.SyncBuffer
	done := make(chan int, 1)
	start := time.Now()
	// Port 0 for both: the emulator prints what it bound (a port picked here and closed could
	// be taken by a parallel test before the emulator binds it).
	go func() {
		done <- run(ctx, []string{"-config", cfgFile, "-amqp-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, func(k string) string { return env[k] }, &stdout, &stderr)
	}()

	ready := regexp.MustCompile(`emulator: ready" amqp_addr=(\S+) http_addr=(\S+)`)
	var m []string
	for m == nil && time.Since(start) < 5*time.Second {
		if m = ready.FindStringSubmatch(stderr.String()); m == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
	require.NotNil(t, m, "no ready line; stderr: %s", stderr.String())
	amqpAddr, httpAddr := m[1], m[2]
	resp, err := http.Get("http://" + httpAddr + "/health")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_ = resp.Body.Close()
	require.Less(t, time.Since(start), time.Second, "start to healthy")
	require.Equal(t,
		"Endpoint=sb://"+amqpAddr+";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=from-env;UseDevelopmentEmulator=true\n",
		stdout.String(), "the connection string names the bound address")

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
		{name: "negative latency", args: []string{"-latency", "-5ms"}, wantCode: 2, wantErr: "-latency and -latency-jitter must not be negative"},
		{name: "negative credits", args: []string{"-credits-per-second", "-1"}, wantCode: 2, wantErr: "-credits-per-second must not be negative"},
		{name: "error rate above 1", args: []string{"-transient-error-rate", "1.5"}, wantCode: 2, wantErr: "-transient-error-rate must be between 0 and 1"},
		{name: "tls files without -tls", args: []string{"-tls-cert", "c.pem", "-tls-key", "k.pem"}, wantCode: 2, wantErr: "need -tls"},
		{name: "tls certificate without key", args: []string{"-tls", "-tls-cert", "c.pem", "-amqp-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, wantCode: 1, wantErr: "KeyFile"},
		{name: "tls certificate missing", args: []string{"-tls", "-tls-cert", "/does/not/cert.pem", "-tls-key", "/does/not/key.pem", "-amqp-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, wantCode: 1, wantErr: "/does/not/cert.pem"},
		{name: "sqs region without sqs address", args: []string{"-sqs-region", "eu-west-1"}, wantCode: 2, wantErr: "-sqs-region needs -sqs-addr"},
		{name: "empty sqs region", args: []string{"-sqs-addr", "127.0.0.1:0", "-sqs-region", ""}, wantCode: 2, wantErr: "-sqs-region must not be empty"},
		{name: "bad sqs address", args: []string{"-sqs-addr", "not-an-sqs-address", "-amqp-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, wantCode: 1, wantErr: "not-an-sqs-address"},
		{name: "message size too big", args: []string{"-max-message-size", "200000000", "-amqp-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, wantCode: 1, wantErr: "MaxMessageSize"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr testio.SyncBuffer
			code := run(context.Background(), tt.args, noEnv, &stdout, &stderr)
			require.Equal(t, tt.wantCode, code)
			require.Contains(t, stderr.String(), tt.wantErr)
			require.Empty(t, strings.TrimSpace(stdout.String()))
		})
	}
}

func TestParseFlagsPressure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    emulator.Pressure
		wantErr string
	}{
		{name: "none by default", want: emulator.Pressure{}},
		{
			name: "flags",
			args: []string{"-latency", "5ms", "-latency-jitter", "2ms", "-credits-per-second", "1000", "-transient-error-rate", "0.01"},
			want: emulator.Pressure{Latency: 5 * time.Millisecond, LatencyJitter: 2 * time.Millisecond, CreditsPerSecond: 1000, TransientErrorRate: 0.01},
		},
		{
			name: "environment",
			env: map[string]string{"SEQBUS_EMULATOR_LATENCY": "5ms", "SEQBUS_EMULATOR_LATENCY_JITTER": "1ms",
				"SEQBUS_EMULATOR_CREDITS_PER_SECOND": "1000", "SEQBUS_EMULATOR_TRANSIENT_ERROR_RATE": "0.1"},
			want: emulator.Pressure{Latency: 5 * time.Millisecond, LatencyJitter: time.Millisecond, CreditsPerSecond: 1000, TransientErrorRate: 0.1},
		},
		{
			name: "a flag wins over the environment",
			args: []string{"-credits-per-second", "50"},
			env:  map[string]string{"SEQBUS_EMULATOR_CREDITS_PER_SECOND": "1000"},
			want: emulator.Pressure{CreditsPerSecond: 50},
		},
		{
			name:    "a variable that does not parse is named",
			env:     map[string]string{"SEQBUS_EMULATOR_CREDITS_PER_SECOND": "lots", "SEQBUS_EMULATOR_LATENCY": "5"},
			wantErr: "SEQBUS_EMULATOR_CREDITS_PER_SECOND=\"lots\"",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stderr testio.SyncBuffer
			opts, err := parseFlags(tt.args, func(k string) string { return tt.env[k] }, &stderr)
			cfg := opts.emulator
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.ErrorContains(t, err, "SEQBUS_EMULATOR_LATENCY=\"5\"", "every bad variable is named")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, cfg.Pressure)
		})
	}
}

func TestRunRejectsBadPressureEnvironment(t *testing.T) {
	t.Parallel()
	var stdout, stderr testio.SyncBuffer
	env := map[string]string{"SEQBUS_EMULATOR_TRANSIENT_ERROR_RATE": "often"}
	code := run(context.Background(), nil, func(k string) string { return env[k] }, &stdout, &stderr)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), "SEQBUS_EMULATOR_TRANSIENT_ERROR_RATE")
}

func TestParseFlagsTLSDefaultsToPort5671(t *testing.T) {
	t.Parallel()
	opts, err := parseFlags([]string{"-tls"}, noEnv, io.Discard)
	cfg := opts.emulator
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:5671", cfg.AMQPAddr)
	require.NotNil(t, cfg.TLS)
	opts, err = parseFlags([]string{"-tls", "-amqp-addr", "0.0.0.0:6000"}, noEnv, io.Discard)
	cfg = opts.emulator
	require.NoError(t, err)
	require.Equal(t, "0.0.0.0:6000", cfg.AMQPAddr, "an address given wins")
	opts, err = parseFlags(nil, noEnv, io.Discard)
	cfg = opts.emulator
	require.NoError(t, err)
	require.Nil(t, cfg.TLS, "no TLS unless asked")
}

func TestRunServesTLS(t *testing.T) {
	t.Parallel()
	certFile := filepath.Join(t.TempDir(), "cert.pem")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr testio.SyncBuffer
	done := make(chan int, 1)
	go func() {
		// Ports the emulator picks itself: a port found free beforehand can be taken by another
		// test's process before the emulator binds it.
		done <- run(ctx, []string{"-tls", "-tls-cert-out", certFile, "-amqp-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, noEnv, &stdout, &stderr)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for stdout.String() == "" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // printed once the emulator serves
	}
	endpoint := regexp.MustCompile(`^Endpoint=sb://(127\.0\.0\.1:[0-9]+);SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE\n$`).
		FindStringSubmatch(stdout.String())
	require.NotNil(t, endpoint, "no UseDevelopmentEmulator: the SDKs speak TLS; stdout: %q; stderr: %s", stdout.String(), stderr.String())
	amqpAddr := endpoint[1]
	require.Contains(t, stderr.String(), certFile, "the certificate's file is logged")

	pemBytes, err := os.ReadFile(certFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pemBytes))
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := hc.Get("https://" + amqpAddr + "/health")
	require.NoError(t, err, "the AMQP port answers HTTPS, trusting the written certificate")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_ = resp.Body.Close()
	hc.CloseIdleConnections()

	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code, "stderr: %s", stderr.String())
	case <-time.After(5 * time.Second):
		t.Fatal("run did not stop")
	}
}

func TestParseFlagsSessionIDRequired(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    broker.SessionIDRule
		wantErr string
	}{
		{name: "partitioned by default", want: broker.SessionIDOnPartitioned},
		{name: "flag", args: []string{"-session-id-required", "always"}, want: broker.SessionIDAlways},
		{name: "environment", env: map[string]string{"SEQBUS_EMULATOR_SESSION_ID_REQUIRED": "always"}, want: broker.SessionIDAlways},
		{name: "a flag wins over the environment", args: []string{"-session-id-required", "partitioned"},
			env: map[string]string{"SEQBUS_EMULATOR_SESSION_ID_REQUIRED": "always"}, want: broker.SessionIDOnPartitioned},
		{name: "bad flag", args: []string{"-session-id-required", "sometimes"}, wantErr: `invalid value "sometimes" for flag -session-id-required`},
		{name: "bad variable", env: map[string]string{"SEQBUS_EMULATOR_SESSION_ID_REQUIRED": "sometimes"}, wantErr: `SEQBUS_EMULATOR_SESSION_ID_REQUIRED="sometimes"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr testio.SyncBuffer
			if tt.wantErr != "" {
				code := run(context.Background(), tt.args, func(k string) string { return tt.env[k] }, &stdout, &stderr)
				require.Equal(t, 2, code)
				require.Contains(t, stderr.String(), tt.wantErr)
				require.Empty(t, stdout.String())
				return
			}
			opts, err := parseFlags(tt.args, func(k string) string { return tt.env[k] }, &stderr)
			require.NoError(t, err)
			require.Equal(t, tt.want, opts.emulator.SessionIDRule)
		})
	}
}

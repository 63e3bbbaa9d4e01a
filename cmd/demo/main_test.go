package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/pgtest"
)

func TestDemoCompletesWithoutViolations(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"-sessions", "4", "-messages", "25", "-timeout", "1m"}, &out, &errOut)
	require.Equal(t, 0, code, "stderr: %s\nstdout: %s", errOut.String(), out.String())
	require.Contains(t, out.String(), "handled             100 of 100")
	require.Contains(t, out.String(), "duplicates dropped  12 of 12 copies", "every published copy is accounted for")
	require.Contains(t, out.String(), "left at the broker  0")
	require.Contains(t, out.String(), "order violations    0")
	require.Contains(t, out.String(), "OK:")
}

func TestDemoWithoutDuplicates(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"-sessions", "2", "-messages", "5", "-replicas", "1", "-duplicates", "0", "-timeout", "1m"}, &out, &errOut)
	require.Equal(t, 0, code, "stderr: %s\nstdout: %s", errOut.String(), out.String())
	require.Contains(t, out.String(), "published           10 (10 messages + 0 duplicate copies, shuffled)")
	require.Contains(t, out.String(), "duplicates dropped  0 of 0 copies")
}

// README: `go run ./cmd/demo -provider sqs` runs the demo on the in-process SQS FIFO, with the
// state in the local Postgres.
func TestDemoOnSQS(t *testing.T) {
	t.Parallel()
	pgtest.RequireServer(t)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"plain", nil, []string{"handled             100 of 100", "duplicates dropped  12 of 12 copies", "OK: every session was handled exactly once, in order"}},
		{"crash", []string{"-crash"}, []string{"crashes             1", "OK: every session was handled in order, despite the crash"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			args := append([]string{"-provider", "sqs", "-database-url", pgtest.DSN(), "-sessions", "4", "-messages", "25", "-timeout", "1m"}, tt.args...)
			code := run(context.Background(), args, &out, &errOut)
			require.Equal(t, 0, code, "stderr: %s\nstdout: %s", errOut.String(), out.String())
			require.Contains(t, out.String(), "on the in-process SQS FIFO and Postgres")
			require.Contains(t, out.String(), "left at the broker  0")
			require.Contains(t, out.String(), "order violations    0")
			for _, w := range tt.want {
				require.Contains(t, out.String(), w)
			}
		})
	}
}

func TestDemoCommandLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"bad flag", []string{"-bogus"}, 2, "flag provided but not defined"},
		// README: `go run ./cmd/demo -h` lists the flags; asking for help is not a usage error.
		{"help", []string{"-h"}, 0, "-sessions"},
		{"extra args", []string{"x"}, 2, "demo takes no arguments"},
		{"bad log level", []string{"-log-level", "loud"}, 2, "-log-level"},
		{"unknown provider", []string{"-provider", "kafka"}, 2, `-provider "kafka" is not one of servicebus, sqs`},
		{"sqs without postgres", []string{"-provider", "sqs", "-database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, 1, "the SQS demo keeps its state in Postgres (-database-url)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			require.Equal(t, tt.wantCode, run(context.Background(), tt.args, &out, &errOut))
			require.Contains(t, errOut.String(), tt.wantErr)
		})
	}
}

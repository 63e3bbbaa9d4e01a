package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
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

package main

import (
	"context"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOperatorCommandLines: a command line an operator command cannot run fails with exit code
// 2 and a message naming the problem and the command's synopsis, before anything connects
// (no SEQBUS_* variable is set); -h describes the flags.
func TestOperatorCommandLines(t *testing.T) {
	clearEnv(t)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  []string
	}{
		{"help", []string{"sessions", "skip", "-h"}, 0, "usage: worker sessions skip ID [--to N]", nil},
		{"no subcommand", []string{"dlq"}, 2, "", []string{"dlq needs a subcommand"}},
		{"unknown subcommand", []string{"sessions", "frob"}, 2, "", []string{`unknown command "sessions frob"`}},
		{"no id", []string{"sessions", "resume"}, 2, "", []string{"a session id is required", "usage: worker sessions resume ID | --all-parked"}},
		{"two ids", []string{"sessions", "show", "a", "b"}, 2, "", []string{"one session id expected, got 2 arguments"}},
		{"id and all", []string{"sessions", "resume", "--all-parked", "a"}, 2, "", []string{`unexpected argument "a"`}},
		{"malformed id", []string{"sessions", "skip", "a\x01b"}, 2, "", []string{"control character U+0001"}},
		{"bad flag value", []string{"sessions", "skip", "a", "--to", "two"}, 2, "", []string{`invalid value "two" for flag -to`}},
		{"unknown flag", []string{"dlq", "list", "--since", "1h"}, 2, "", []string{"flag provided but not defined: -since"}},
		{"negative limit", []string{"sessions", "list", "--limit", "-1"}, 2, "", []string{"--limit must not be negative"}},
		{"blocked, but no configuration", []string{"sessions", "list", "--blocked"}, 1, "", []string{"SEQBUS_CONNECTION_STRING"}},
		{"retrying, but no configuration", []string{"sessions", "list", "--retrying"}, 1, "", []string{"SEQBUS_CONNECTION_STRING"}},
		{"retry-now help", []string{"sessions", "retry-now", "-h"}, 0, "usage: worker sessions retry-now ID [--wait D]", nil},
		{"retry-now without id", []string{"sessions", "retry-now"}, 2, "", []string{"a session id is required", "usage: worker sessions retry-now ID"}},
		{"retry-now negative wait", []string{"sessions", "retry-now", "a", "--wait", "-1s"}, 2, "", []string{"--wait must not be negative"}},
		{"retry-now malformed id", []string{"sessions", "retry-now", "a\x01b"}, 2, "", []string{"control character U+0001"}},
		{"replay what", []string{"dlq", "replay", "--reason", "HandlerFailed"}, 2, "", []string{"give --session ID or --all"}},
		{"replay both", []string{"dlq", "replay", "--all", "--session", "a"}, 2, "", []string{"give --session ID or --all"}},
		{"valid, but no configuration", []string{"sessions", "list", "--parked"}, 1, "", []string{"SEQBUS_CONNECTION_STRING", "SEQBUS_QUEUE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, out, errOut := newTestCLI()
			code := c.run(context.Background(), tt.args)
			require.Equal(t, tt.wantCode, code, errOut.String())
			require.Contains(t, out.String(), tt.wantOut)
			for _, w := range tt.wantErr {
				require.Contains(t, errOut.String(), w)
			}
		})
	}
}

func TestParseArgsTakesFlagsAnywhere(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args     []string
		wantPos  []string
		wantTo   int64
		wantJSON bool
	}{
		{[]string{"a", "--to", "5"}, []string{"a"}, 5, false},
		{[]string{"--json", "a", "--to=7"}, []string{"a"}, 7, true},
		{[]string{"--to", "3", "--", "-dash-id", "--json"}, []string{"-dash-id", "--json"}, 3, false},
		{nil, nil, 0, false},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		to := fs.Int64("to", 0, "")
		asJSON := fs.Bool("json", false, "")
		pos, err := parseArgs(fs, tt.args)
		require.NoError(t, err, tt.args)
		require.Equal(t, tt.wantPos, pos, tt.args)
		require.Equal(t, tt.wantTo, *to, tt.args)
		require.Equal(t, tt.wantJSON, *asJSON, tt.args)
	}
}

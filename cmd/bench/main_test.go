package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunWritesOutputs runs the command with -quick and a subset small enough for CI, and checks
// what a user gets: the files, a summary and exit code 0.
func TestRunWritesOutputs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-quick", "-replicas", "1", "-exception-rate", "0,10%", "-pressure", "none,latency",
		"-sessions", "3", "-messages", "5", "-out", out, "-format", "png"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	for _, f := range []string{"results.csv", "throughput_vs_replicas.png", "throughput_vs_exception_rate.png",
		"latency_p99_vs_replicas.png", "broker_calls_per_msg_by_arrival.png"} {
		require.FileExists(t, filepath.Join(out, f))
		require.Contains(t, stdout.String(), "wrote "+filepath.Join(out, f))
	}
	require.Contains(t, stdout.String(), "8 cells in ")
	require.Contains(t, stdout.String(), "plain msg/s", "the table compares each cell with the plain consumer")
	csv, err := os.ReadFile(filepath.Join(out, "results.csv"))
	require.NoError(t, err)
	require.Len(t, strings.Split(strings.TrimSpace(string(csv)), "\n"), 9, "a header and 8 cells")
}

// TestRunWithThePostgresStore runs one small cell with -database-url: the replicas keep their
// state in Postgres, migrated at start (a schema of the test's own).
func TestRunWithThePostgresStore(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.NewPoolWithSchema(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-replicas", "2", "-exception-rate", "0", "-pressure", "none", "-arrival", "shuffled",
		"-sessions", "4", "-messages", "10", "-database-url", pgtest.SchemaDSN(schema),
		"-out", t.TempDir(), "-progress=false"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	require.Contains(t, stdout.String(), "1 cells in ")
}

// TestRunOnSQS runs the SQS cells of one input, in order and shuffled, with and without the
// latency pressure (the default pressures of SQS), and prints the budgets.
func TestRunOnSQS(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.NewPoolWithSchema(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-provider", "sqs", "-replicas", "1", "-exception-rate", "0", "-arrival", "in-order,shuffled",
		"-sessions", "4", "-messages", "10", "-database-url", pgtest.SchemaDSN(schema),
		"-out", t.TempDir(), "-progress=false"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	require.Contains(t, stdout.String(), "4 cells in ")
	require.Contains(t, stdout.String(), "pressure latency, 0% exceptions, in-order, early store: worker rate / plain rate: ")
	require.Contains(t, stdout.String(), "in-order, early store: worker rate / plain rate: ")
	require.Contains(t, stdout.String(), "shuffled, early store: worker SQS calls per message (in order + 0.3): ")
}

// TestRunWritesACPUProfile: -cpuprofile writes a profile whose samples carry the cell and the
// side (worker, plain, publisher) as labels; a path that cannot be written fails the run before
// any cell.
func TestRunWritesACPUProfile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	file := filepath.Join(t.TempDir(), "cpu.pprof")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-replicas", "2", "-exception-rate", "0", "-pressure", "none", "-arrival", "in-order",
		"-sessions", "40", "-messages", "50", "-out", t.TempDir(), "-progress=false", "-cpuprofile", file}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	p, err := profile.Parse(f)
	require.NoError(t, err)
	// The other tests of the package run meanwhile, in the same process: look for this cell's.
	sides := map[string]bool{}
	for _, s := range p.Sample {
		if slices.Contains(s.Label["cell"], "2 replicas, pressure none, 0% exceptions, in-order") {
			for _, side := range s.Label["side"] {
				sides[side] = true
			}
		}
	}
	require.True(t, sides["worker"] && sides["plain"], "samples of both sides, got %v", sides)

	stderr.Reset()
	code = run(ctx, []string{"-quick", "-out", t.TempDir(), "-cpuprofile", filepath.Join(t.TempDir(), "missing", "cpu.pprof")}, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "bench: -cpuprofile:")
}

func TestRunRejectsBadFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"unknown flag", []string{"-nope"}, "flag provided but not defined: -nope"},
		{"stray argument", []string{"extra"}, "unexpected arguments"},
		{"bad replicas", []string{"-replicas", "1,two"}, `invalid value "1,two" for flag -replicas`},
		{"zero replicas", []string{"-replicas", "0"}, "replicas: 0 is not a positive count"},
		{"unknown pressure", []string{"-pressure", "none,heavy"}, `pressure: "heavy"`},
		{"bad exception rate", []string{"-exception-rate", "lots"}, `exception rate "lots"`},
		{"exception rate of 100%", []string{"-exception-rate", "100%"}, "exception rate: 1 is outside [0, 1)"},
		{"unknown arrival", []string{"-arrival", "backwards"}, `arrival: "backwards"`},
		{"throttle on a namespace", []string{"-connection-string", "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v", "-queue", "q", "-pressure", "throttle"}, "needs the in-process emulator"},
		{"entity without a namespace", []string{"-queue", "q"}, "-queue, -topic and -subscription need -connection-string"},
		{"namespace without an entity", []string{"-connection-string", "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v"}, "entity:"},
		{"bad chart format", []string{"-format", "gif"}, `-format "gif"`},
		{"unknown provider", []string{"-provider", "kafka"}, `provider: "kafka" is neither servicebus nor sqs`},
		{"sqs without a database", []string{"-provider", "sqs"}, "provider sqs: the replicas keep their state and early messages in Postgres"},
		{"bad offered share", []string{"-offered", "most"}, `offered "most"`},
		{"offered share above 100%", []string{"-offered", "120%"}, "offered share: 1.2 is outside (0, 1]"},
		{"offered without throttle", []string{"-offered", "80%", "-pressure", "none"}, "applies to the throttle pressure"},
		{"negative retry base", []string{"-retry-base", "-1ms"}, "-retry-base must not be negative"},
		{"bad database url", []string{"-database-url", "postgres://%zz"}, "database url:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			require.Equal(t, 2, code)
			require.Contains(t, stderr.String(), tt.wantErr)
			require.Empty(t, stdout.String())
		})
	}
}

func TestParseFlagsQuickAndSubsets(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	cfg, err := parseFlags([]string{"-quick", "-replicas", "2", "-exception-rate", "1%", "-retry-base", "5ms"}, &stderr)
	require.NoError(t, err)
	o := cfg.opts
	require.Equal(t, []int{2}, o.Replicas, "a subset flag wins over the preset")
	require.Equal(t, []float64{0.01}, o.ExceptionRates)
	require.Len(t, o.Pressures, 3, "the preset keeps every pressure")
	require.Equal(t, 8, o.Sessions)
	require.Equal(t, 5*time.Millisecond, o.HandlerRetry.Base)
	require.Equal(t, 50*time.Millisecond, o.HandlerRetry.Cap)
	require.Equal(t, "bench-out", cfg.out)
}

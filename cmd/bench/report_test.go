package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/bench"
	"github.com/seqbus/seqbus/internal/benchreport"
)

// fakeResults are two cells as bench.Run returns them, the second with an order violation.
func fakeResults() []bench.Result {
	cell := func(replicas int, arrival bench.Arrival) bench.Cell {
		return bench.Cell{Replicas: replicas, Pressure: bench.PressureNone, Arrival: arrival}
	}
	return []bench.Result{
		{Cell: cell(1, bench.ArrivalInOrder), Sessions: 60, Messages: 3000, Elapsed: 430 * time.Millisecond, Rate: 7042.8,
			HandlerCalls: 3000, LatencyP50: 33 * time.Millisecond, LatencyP99: 63 * time.Millisecond, BrokerCalls: 3240,
			PlainRate: 7500, PlainElapsed: 400 * time.Millisecond, PlainBrokerCalls: 3100},
		{Cell: cell(2, bench.ArrivalShuffled), Sessions: 60, Messages: 3000, Elapsed: 290 * time.Millisecond, Rate: 10225.6,
			HandlerCalls: 3000, LatencyP50: 50 * time.Millisecond, LatencyP99: 90 * time.Millisecond, BrokerCalls: 3300,
			Violations: 1, ViolationSamples: []string{"session s-7: 4 after 5"}},
	}
}

func reportEnv() benchreport.Environment {
	return benchreport.Environment{
		Commit: "0123456789abcdef0123456789abcdef01234567", Date: time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC),
		CPU: "Example CPU", Cores: 2, Memory: 8 << 30, OS: "linux", Arch: "amd64", GoVersion: "go1.26.8",
		Command: "go run ./cmd/bench -report docs/reports",
	}
}

// finish writes the report folder from a fake result set: the CSV, the charts, and a report.md
// naming the run's environment, its table, its failures and its files; the exit code says a
// cell failed.
func TestFinishWritesTheReport(t *testing.T) {
	t.Parallel()
	env := reportEnv()
	dir, err := benchreport.NewDir(t.TempDir(), "bench", env)
	require.NoError(t, err)
	var stdout, stderr bytes.Buffer
	code := finish(outcome{cfg: config{format: "svg", report: filepath.Dir(dir)}, out: dir, env: env,
		elapsed: 3 * time.Second, cells: 3, results: fakeResults(), err: errors.New("context canceled")}, &stdout, &stderr)
	require.Equal(t, 1, code, "a cell saw an order violation")
	require.Equal(t, "2026-11-29-bench-0123456", filepath.Base(dir))

	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	report := string(md)
	for _, want := range []string{
		"| Commit | `0123456789abcdef0123456789abcdef01234567` |",
		"| Machine | Example CPU, 2 cores, 8.0 GiB memory, linux/amd64 |",
		"| Go | go1.26.8 |",
		"| Command | `go run ./cmd/bench -report docs/reports` |",
		"| Outcome | 2 of 3 cells run; failures below |",
		"bench: stopped after 2 of 3 cells: context canceled",
		"bench: cell 2 replicas, pressure none, 0% exceptions, shuffled: session s-7: 4 after 5",
		"worker msg/s", // the summary table
		"- [results.csv](results.csv)",
		"![throughput_vs_replicas](throughput_vs_replicas.svg)",
	} {
		require.Contains(t, report, want)
	}
	for _, f := range []string{"results.csv", "throughput_vs_replicas.svg", "report.md"} {
		require.FileExists(t, filepath.Join(dir, f))
		require.Contains(t, stdout.String(), "wrote "+filepath.Join(dir, f))
	}
	csv, err := os.ReadFile(filepath.Join(dir, "results.csv"))
	require.NoError(t, err)
	require.Len(t, strings.Split(strings.TrimSpace(string(csv)), "\n"), 3, "a header and the 2 cells")
	require.Contains(t, stderr.String(), "session s-7: 4 after 5")
}

// Without -report the outputs go to -out and no report.md is written.
func TestFinishWithoutReport(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := finish(outcome{cfg: config{format: "svg"}, out: out, cells: 1, results: fakeResults()[:1]}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	require.FileExists(t, filepath.Join(out, "results.csv"))
	require.NoFileExists(t, filepath.Join(out, "report.md"))
}

func TestReportFlag(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	cfg, err := parseFlags([]string{"-quick", "-report", "docs/reports"}, &stderr)
	require.NoError(t, err)
	require.Equal(t, "docs/reports", cfg.report)
	_, err = parseFlags([]string{"-quick", "-report", "docs/reports", "-out", "x"}, &stderr)
	require.ErrorContains(t, err, "-out and -report")
}

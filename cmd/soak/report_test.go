package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/benchreport"
	"github.com/seqbus/seqbus/internal/soak"
)

// fakeReports are the soaks of both stores as soak.Run returns them.
func fakeReports() []soak.Report {
	rates := [soak.Slices]float64{900, 950, 980, 1000, 990, 1010, 1005, 995, 1000, 1002}
	return []soak.Report{
		{Store: "servicebus", Sessions: 1000, Messages: 3, Replicas: 4, Elapsed: 3 * time.Second, SliceRates: rates,
			EngineCalls: 3300, StateCalls: 2000, Credits: 9000, PeakRSS: []int64{50 << 20, 52 << 20}},
		{Store: "postgres", Sessions: 1000, Messages: 3, Replicas: 4, Elapsed: 2 * time.Second, SliceRates: rates,
			EngineCalls: 3300, DatabaseCalls: 4000, Credits: 4000, PeakRSS: []int64{40 << 20}},
	}
}

// finish writes the report folder from a fake result set: soak.csv, the chart, and a
// report.md naming the run's environment, its table and its files.
func TestFinishWritesTheReport(t *testing.T) {
	t.Parallel()
	env := benchreport.Environment{
		Commit: "0123456789abcdef0123456789abcdef01234567", Date: time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC),
		CPU: "Example CPU", Cores: 2, Memory: 8 << 30, OS: "linux", Arch: "amd64", GoVersion: "go1.26.8",
		Command: "go run ./cmd/soak -sessions 1000 -report docs/reports",
	}
	root := t.TempDir()
	dir, err := benchreport.NewDir(root, "soak", env)
	require.NoError(t, err)
	tests := []struct {
		name     string
		problems []string
		code     int
		outcome  string
	}{
		{"passed", nil, 0, "| Outcome | 2 of 2 stores, every message handled once in order |"},
		{"a store failed", []string{"soak: postgres store: 1 order violations, 0 messages missing"}, 1,
			"| Outcome | 2 of 2 stores finished; problems below |"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := finish(outcome{flags: flags{report: root, env: env}, out: dir, elapsed: 5 * time.Second, stores: 2,
			reports: fakeReports(), problems: tt.problems}, &stdout, &stderr)
		require.Equal(t, tt.code, code, "%s: stderr: %s", tt.name, stderr.String())
		md, err := os.ReadFile(filepath.Join(dir, "report.md"))
		require.NoError(t, err)
		report := string(md)
		for _, want := range append([]string{
			"# Benchmark report: soak",
			"| Commit | `0123456789abcdef0123456789abcdef01234567` |",
			"| Command | `go run ./cmd/soak -sessions 1000 -report docs/reports` |",
			tt.outcome,
			"msg/s first 10%", // the table
			"- [soak.csv](soak.csv)",
			"![soak_throughput_by_tenth](soak_throughput_by_tenth.svg)",
		}, tt.problems...) {
			require.Contains(t, report, want, tt.name)
		}
		csv, err := os.ReadFile(filepath.Join(dir, "soak.csv"))
		require.NoError(t, err)
		require.Len(t, strings.Split(strings.TrimSpace(string(csv)), "\n"), 3, "a header and both stores")
		require.Contains(t, stdout.String(), "wrote "+filepath.Join(dir, "report.md"))
	}
}

// Without -report the outputs go to -out and no report.md is written.
func TestFinishWithoutReport(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, finish(outcome{out: out, stores: 1, reports: fakeReports()[:1]}, &stdout, &stderr), stderr.String())
	require.FileExists(t, filepath.Join(out, "soak.csv"))
	require.NoFileExists(t, filepath.Join(out, "report.md"))
}

func TestReportFlag(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	f, err := parseFlags([]string{"-report", "docs/reports"}, &stderr)
	require.NoError(t, err)
	require.Equal(t, "docs/reports", f.report)
	_, err = parseFlags([]string{"-report", "docs/reports", "-out", "x"}, &stderr)
	require.ErrorContains(t, err, "-out and -report")
}

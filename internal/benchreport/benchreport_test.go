package benchreport

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCommandLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no args", nil, "go run ./cmd/bench"},
		{"plain", []string{"-quick", "-report", "docs/reports", "-exception-rate", "0,10%"},
			"go run ./cmd/bench -quick -report docs/reports -exception-rate 0,10%"},
		{"quoted", []string{"-worker-env", "A=1 B=2", "-x", "it's"},
			`go run ./cmd/bench -worker-env 'A=1 B=2' -x 'it'\''s'`},
		{"secret after =", []string{"--database-url=postgres://u:hunter2@db/x"},
			"go run ./cmd/bench --database-url=postgres://u:REDACTED@db/x"},
		{"secret as next arg", []string{"-connection-string", "Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey=hunter2"},
			"go run ./cmd/bench -connection-string 'Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey=REDACTED'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := CommandLine("bench", tt.args)
			require.Equal(t, tt.want, got)
			require.NotContains(t, got, "hunter2")
		})
	}
}

func TestMachine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cpuinfo := filepath.Join(dir, "cpuinfo")
	meminfo := filepath.Join(dir, "meminfo")
	require.NoError(t, os.WriteFile(cpuinfo, []byte("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Example CPU @ 2.0GHz\n\nprocessor\t: 1\nmodel name\t: Example CPU @ 2.0GHz\n"), 0o644))
	require.NoError(t, os.WriteFile(meminfo, []byte("MemFree:         1000 kB\nMemTotal:       24684084 kB\n"), 0o644))
	require.Equal(t, "Example CPU @ 2.0GHz", cpuModel(cpuinfo))
	require.Equal(t, int64(24684084)<<10, memTotal(meminfo))
	require.Equal(t, Unknown, cpuModel(filepath.Join(dir, "none")))
	require.Zero(t, memTotal(filepath.Join(dir, "none")))
	require.Equal(t, Unknown, cpuModel(meminfo))
}

func TestCollect(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 29, 3, 4, 5, 0, time.FixedZone("CET", 3600))
	ctx := context.Background()

	// This package's own work tree: a commit of 40 hex digits.
	e := Collect(ctx, ".", start, "soak", []string{"-sessions", "100"})
	if e.Commit != Unknown { // a source tree without git (an archive) has none
		require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{40}$`), e.Commit)
		require.Equal(t, e.Commit[:7], e.Short())
	}
	require.Equal(t, start.UTC(), e.Date)
	require.Positive(t, e.Cores)
	require.NotEmpty(t, e.GoVersion)
	require.Equal(t, "go run ./cmd/soak -sessions 100", e.Command)

	// A folder outside any work tree.
	outside := Collect(ctx, filepath.Join(t.TempDir(), "nowhere"), start, "soak", nil)
	require.Equal(t, Unknown, outside.Commit)
	require.Equal(t, Unknown, outside.Short())
	require.False(t, outside.Dirty)
}

func testEnv() Environment {
	return Environment{
		Commit: "0123456789abcdef0123456789abcdef01234567", Dirty: true,
		Date: time.Date(2026, 11, 29, 3, 4, 5, 0, time.UTC),
		CPU:  "Example CPU", Cores: 2, Memory: 8 << 30, OS: "linux", Arch: "amd64", GoVersion: "go1.26.8",
		Command: "go run ./cmd/bench -quick -report 'docs/reports|x'",
	}
}

func TestNewDir(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "reports")
	e := testEnv()
	first, err := NewDir(root, "bench", e)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "2026-11-29-bench-0123456"), first)
	second, err := NewDir(root, "bench", e)
	require.NoError(t, err)
	require.Equal(t, first+"-2", second, "a second run of the day and commit gets a folder of its own")
	e.Commit = Unknown
	third, err := NewDir(root, "soak", e)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "2026-11-29-soak-unknown"), third)
	require.DirExists(t, third)

	blocker := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	_, err = NewDir(blocker, "bench", e)
	require.Error(t, err, "a root that is a file")
}

func TestWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, f := range []string{"results.csv", "throughput.svg"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644))
	}
	r := Report{
		Title: "bench", Env: testEnv(), Elapsed: 61500 * time.Millisecond, Outcome: "1 of 2 cells failed",
		Summary:  "replicas  msg/s\n       1   7042\n",
		Problems: []string{"bench: cell 1/none: 2 order violations"},
		Files:    []string{"results.csv", "throughput.svg"},
	}
	path, err := Write(dir, r)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "report.md"), path)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "# Benchmark report: bench\n\n"+
		"| | |\n|---|---|\n"+
		"| Commit | `0123456789abcdef0123456789abcdef01234567` with uncommitted changes |\n"+
		"| Date | 2026-11-29 03:04:05 UTC |\n"+
		"| Machine | Example CPU, 2 cores, 8.0 GiB memory, linux/amd64 |\n"+
		"| Go | go1.26.8 |\n"+
		"| Command | `go run ./cmd/bench -quick -report 'docs/reports\\|x'` |\n"+
		"| Elapsed | 1m2s |\n"+
		"| Outcome | 1 of 2 cells failed |\n"+
		"\n## Summary\n\n```text\nreplicas  msg/s\n       1   7042\n```\n"+
		"\n## Problems\n\n```text\nbench: cell 1/none: 2 order violations\n```\n"+
		"\n## Files\n\n- [results.csv](results.csv)\n\n![throughput](throughput.svg)\n", string(got))

	r.Files = append(r.Files, "missing.csv")
	_, err = Write(dir, r)
	require.ErrorContains(t, err, "missing.csv", "a report names only files that are there")

	unknown := Report{Title: "soak", Env: Environment{Commit: Unknown, CPU: Unknown, Cores: 1}}
	require.Contains(t, string(unknown.Markdown()), "| Commit | unknown |\n")
	require.Contains(t, string(unknown.Markdown()), "| Machine | unknown, 1 core, unknown memory, / |\n")
}

// Collect names the commit of the work tree and says when tracked files differ from it.
func TestCollectDirty(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	ctx := context.Background()
	dir := t.TempDir()
	git := func(args ...string) string {
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...).CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	file := filepath.Join(dir, "main.go")
	require.NoError(t, os.WriteFile(file, []byte("package main\n"), 0o644))
	git("add", "main.go")
	git("commit", "-q", "-m", "first")
	head := git("rev-parse", "HEAD")

	clean := Collect(ctx, dir, time.Now(), "bench", nil)
	require.Equal(t, head, clean.Commit)
	require.False(t, clean.Dirty)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "untracked.txt"), []byte("x"), 0o644))
	require.False(t, Collect(ctx, dir, time.Now(), "bench", nil).Dirty, "an untracked file is no change to the code")

	require.NoError(t, os.WriteFile(file, []byte("package main\n\nfunc main() {}\n"), 0o644))
	dirty := Collect(ctx, dir, time.Now(), "bench", nil)
	require.Equal(t, head, dirty.Commit)
	require.True(t, dirty.Dirty)
}

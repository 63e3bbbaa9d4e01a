package benchreport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/seqbus/seqbus/worker"
)

// Unknown stands for what could not be found out (no git, no /proc).
const Unknown = "unknown"

// Environment is what a run needs to be repeated or compared: the code, the date, the machine,
// the toolchain and the command line.
type Environment struct {
	// Commit is the full hash of HEAD, or Unknown; Dirty says the work tree had changes to
	// tracked files that the commit does not hold.
	Commit string
	Dirty  bool
	// Date is when the run started, in UTC.
	Date time.Time
	// CPU is the processor's model name; Cores the logical CPUs Go may use; Memory the total
	// memory in bytes (0: unknown).
	CPU    string
	Cores  int
	Memory int64
	OS     string
	Arch   string
	// GoVersion is the toolchain that built the command.
	GoVersion string
	// Command is the command line that repeats the run, its secrets redacted.
	Command string
}

// Short returns the first seven characters of the commit, or Unknown.
func (e Environment) Short() string {
	if len(e.Commit) >= 7 && e.Commit != Unknown {
		return e.Commit[:7]
	}
	return Unknown
}

// Collect describes the environment of a run started at start: the commit of the git work
// tree at dir, this machine, this toolchain, and the command line of cmd (its path under
// cmd/, such as "bench") with args, its secret flags redacted.
func Collect(ctx context.Context, dir string, start time.Time, cmd string, args []string) Environment {
	e := Environment{
		Commit:    Unknown,
		Date:      start.UTC(),
		CPU:       cpuModel("/proc/cpuinfo"),
		Cores:     runtime.NumCPU(),
		Memory:    memTotal("/proc/meminfo"),
		OS:        runtime.GOOS,
		Arch:      runtime.GOARCH,
		GoVersion: runtime.Version(),
		Command:   CommandLine(cmd, args),
	}
	if out, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "HEAD").Output(); err == nil {
		e.Commit = strings.TrimSpace(string(out))
		// diff-index exits 1 when tracked files differ from HEAD.
		err := exec.CommandContext(ctx, "git", "-C", dir, "diff-index", "--quiet", "HEAD", "--").Run()
		var exit *exec.ExitError
		e.Dirty = errors.As(err, &exit) && exit.ExitCode() == 1
	}
	return e
}

// cpuModel reads the first "model name" of a /proc/cpuinfo file.
func cpuModel(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return Unknown
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return Unknown
}

// memTotal reads MemTotal (in kB) of a /proc/meminfo file, in bytes; 0 when it cannot.
func memTotal(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return 0
		}
		return n << 10
	}
	return 0
}

// secretFlags are the flags whose values are redacted in a command line, with how.
var secretFlags = map[string]func(string) string{
	"connection-string": worker.RedactConnectionString,
	"database-url":      worker.RedactDatabaseURL,
}

// CommandLine renders `go run ./cmd/<cmd> args...` quoted for a POSIX shell, with the values of
// -connection-string and -database-url redacted.
func CommandLine(cmd string, args []string) string {
	parts := []string{"go", "run", "./cmd/" + cmd}
	var redactNext func(string) string
	for _, a := range args {
		if redactNext != nil {
			parts = append(parts, quote(redactNext(a)))
			redactNext = nil
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if redact, ok := secretFlags[name]; ok && strings.HasPrefix(a, "-") {
			if hasValue {
				a = a[:len(a)-len(value)] + redact(value)
			} else {
				redactNext = redact
			}
		}
		parts = append(parts, quote(a))
	}
	return strings.Join(parts, " ")
}

// quote quotes s for a POSIX shell when it holds anything but plain characters.
func quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:,%@+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// NewDir creates the report folder of a run of kind ("bench", "soak") under root (created if
// need be): root/<date>-<kind>-<short commit>, with -2, -3, ... appended when a run of the same
// day and commit is there already. It returns the folder's path.
func NewDir(root, kind string, e Environment) (string, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("benchreport: %w", err)
	}
	base := filepath.Join(root, fmt.Sprintf("%s-%s-%s", e.Date.Format(time.DateOnly), kind, e.Short()))
	dir := base
	for n := 2; ; n++ {
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("benchreport: %w", err)
		}
		dir = fmt.Sprintf("%s-%d", base, n)
	}
}

// Report is the content of a report.md.
type Report struct {
	// Title heads the report, after "Benchmark report: ".
	Title string
	Env   Environment
	// Elapsed is how long the run took; Outcome says in a sentence whether it passed.
	Elapsed time.Duration
	Outcome string
	// Summary is the command's table as it printed it (shown as preformatted text).
	Summary string
	// Problems are the failures the run reported, one a line.
	Problems []string
	// Files are the files of the folder, relative to it: charts (.svg, .png) are shown, others
	// linked.
	Files []string
}

// Markdown renders r.
func (r Report) Markdown() []byte {
	var b bytes.Buffer
	e := r.Env
	fmt.Fprintf(&b, "# Benchmark report: %s\n\n", r.Title)
	b.WriteString("| | |\n|---|---|\n")
	commit := "`" + e.Commit + "`"
	if e.Commit == Unknown {
		commit = Unknown
	}
	if e.Dirty {
		commit += " with uncommitted changes"
	}
	fmt.Fprintf(&b, "| Commit | %s |\n", commit)
	fmt.Fprintf(&b, "| Date | %s |\n", e.Date.UTC().Format("2006-01-02 15:04:05 UTC"))
	fmt.Fprintf(&b, "| Machine | %s |\n", machine(e))
	fmt.Fprintf(&b, "| Go | %s |\n", e.GoVersion)
	fmt.Fprintf(&b, "| Command | `%s` |\n", strings.ReplaceAll(e.Command, "|", `\|`))
	if r.Elapsed > 0 {
		fmt.Fprintf(&b, "| Elapsed | %s |\n", r.Elapsed.Round(time.Second))
	}
	if r.Outcome != "" {
		fmt.Fprintf(&b, "| Outcome | %s |\n", r.Outcome)
	}
	if s := strings.TrimRight(r.Summary, "\n"); s != "" {
		fmt.Fprintf(&b, "\n## Summary\n\n```text\n%s\n```\n", s)
	}
	if len(r.Problems) > 0 {
		b.WriteString("\n## Problems\n\n```text\n")
		for _, p := range r.Problems {
			b.WriteString(strings.TrimRight(p, "\n"))
			b.WriteString("\n")
		}
		b.WriteString("```\n")
	}
	if len(r.Files) > 0 {
		b.WriteString("\n## Files\n\n")
		var charts []string
		for _, f := range r.Files {
			switch filepath.Ext(f) {
			case ".svg", ".png":
				charts = append(charts, f)
			default:
				fmt.Fprintf(&b, "- [%s](%s)\n", f, f)
			}
		}
		for _, f := range charts {
			fmt.Fprintf(&b, "\n![%s](%s)\n", strings.TrimSuffix(f, filepath.Ext(f)), f)
		}
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

// machine renders the machine of e in a line: CPU, cores, memory, OS/arch.
func machine(e Environment) string {
	mem := Unknown + " memory"
	if e.Memory > 0 {
		mem = fmt.Sprintf("%.1f GiB memory", float64(e.Memory)/(1<<30))
	}
	cores := "cores"
	if e.Cores == 1 {
		cores = "core"
	}
	return fmt.Sprintf("%s, %d %s, %s, %s/%s", e.CPU, e.Cores, cores, mem, e.OS, e.Arch)
}

// Write writes r as dir/report.md and returns its path. The files r names must be in dir.
func Write(dir string, r Report) (string, error) {
	for _, f := range r.Files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("benchreport: a file of the report: %w", err)
		}
	}
	path := filepath.Join(dir, "report.md")
	if err := os.WriteFile(path, append(r.Markdown(), '\n'), 0o644); err != nil {
		return "", fmt.Errorf("benchreport: %w", err)
	}
	return path, nil
}

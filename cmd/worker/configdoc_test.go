package main

import (
	"bytes"
	"context"
	"flag"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/configdoc"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

//go:generate go test -run ^TestConfigurationReference$ -update .

var update = flag.Bool("update", false, "rewrite docs/configuration.md from the code")

// configurationPage is where the reference lives, from this package's directory.
var configurationPage = filepath.Join("..", "..", "docs", "configuration.md")

const configurationHeader = `# Configuration reference

<!-- Generated from worker.Config, worker.RelayConfig and cmd/worker by go generate ./cmd/worker. Do not edit. -->

The worker, the scaler, the relay and the operator commands (all of them the ` + "`worker`" + ` command)
are configured by environment variables. Each one is a field of a Go struct, which a program
embedding package worker sets directly: the Go field column names it.

- A variable left unset takes the default shown; an empty default means none.
- A variable that is set means what it says: 0 is zero, which is the "off" of the settings
  that say so and is refused where it means nothing.
- Durations are Go durations (` + "`500ms`, `30s`, `1m30s`, `24h`" + `); sizes are bytes, with an
  optional unit (` + "`262144`, `256KiB`, `8MiB`, `64KB`" + `); booleans are ` + "`true` or `false`" + `.
- An invalid value stops the process at start, with a message naming the variable. The
  validation column is what that check says of a value that is negative, zero, empty or not
  one of the names a setting knows; some settings are also checked against others, as their
  meaning says.`

// configurationSections are the tables of the reference, from the code they describe.
func configurationSections() []configdoc.Section {
	sizes := map[reflect.Type]func(reflect.Value) string{
		reflect.TypeFor[worker.ByteSize](): func(v reflect.Value) string { return configdoc.FormatBytes(v.Int()) },
	}
	const cs = "Endpoint=sb://example.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v"

	wv := worker.DefaultConfig()
	wv.ConnectionString, wv.Queue = cs, "orders"
	wv.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	cv := worker.DefaultConsoleSettings()
	cv.ConsoleToken = "a-console-token-of-32-characters"
	rv := worker.DefaultRelayConfig()
	rv.ConnectionString, rv.DatabaseURL = cs, "postgres://seqbus@localhost/seqbus"
	return []configdoc.Section{
		{
			Title: "Worker",
			Intro: "`worker run` reads these, and so do `worker scaler` (which serves the scaling signal and " +
				"consumes nothing) and the operator commands (`worker sessions`, `worker dlq`), which use the " +
				"entity, the state store, the connection and the message contract.",
			Prefix: worker.EnvPrefix, Defaults: worker.DefaultConfig(), Valid: wv, Format: sizes, GoOnly: true,
			Validate: func(v any) error { c := v.(worker.Config); return c.Validate() },
		},
		{
			Title: "Worker binary",
			Intro: "The `worker` command adds these to the worker's settings; a program that embeds " +
				"package worker sets `Config.Handler` instead. `worker relay` and `worker scaler` read " +
				"`SEQBUS_LOG_LEVEL` too. Tracing follows the standard `OTEL_*` variables and is off unless " +
				"`OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_TRACES_EXPORTER`) is set.",
			Prefix: worker.EnvPrefix, Defaults: defaultSettings(),
			Validate: func(v any) error { return v.(settings).validate() },
		},
		{
			Title: "Relay",
			Intro: "`worker relay` sends what applications enqueued in the Postgres outbox to Service Bus " +
				"(or, with `SEQBUS_PROVIDER=sqs`, to SQS FIFO queues), in each session's order. It reads these; " +
				"the fields set from Go only are the worker's.",
			Prefix: worker.EnvPrefix, Defaults: worker.DefaultRelayConfig(), Valid: rv, Format: sizes,
			Validate: func(v any) error { c := v.(worker.RelayConfig); return c.Validate() },
		},
		{
			Title: "Console",
			Intro: "`worker console` reads these on top of the worker's settings; it refuses to start " +
				"without at least one way to authenticate. [The console](console.md) describes it.",
			Prefix: worker.EnvPrefix, Defaults: worker.DefaultConsoleSettings(), Valid: cv,
			Validate: func(v any) error { c := v.(worker.ConsoleSettings); return c.Validate() },
		},
		{
			Title:  "Operator commands",
			Intro:  "`worker dlq replay` reads this test hook on top of the worker's settings.",
			Prefix: worker.EnvPrefix, Defaults: operatorSettings{},
		},
	}
}

func renderConfiguration(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, configdoc.Render(&b, configurationHeader, configurationSections()...))
	return b.Bytes()
}

// The committed reference is what the code renders: a setting added, removed or changed (its
// default, its validation, its desc tag) without `go generate ./cmd/worker` fails here.
func TestConfigurationReference(t *testing.T) {
	t.Parallel()
	got := renderConfiguration(t)
	if *update {
		require.NoError(t, os.WriteFile(configurationPage, got, 0o644))
		return
	}
	want, err := os.ReadFile(configurationPage)
	require.NoError(t, err, "run go generate ./cmd/worker")
	require.Equal(t, string(want), string(got), "docs/configuration.md differs from the code: run go generate ./cmd/worker")
}

// Every variable the binary reads is in the reference, under the variable it reads.
func TestConfigurationReferenceVariables(t *testing.T) {
	t.Parallel()
	page := string(renderConfiguration(t))
	for _, v := range []any{worker.Config{}, worker.RelayConfig{}, settings{}, operatorSettings{}} {
		for _, f := range reflect.VisibleFields(reflect.TypeOf(v)) {
			tag := f.Tag.Get("envconfig")
			if tag == "" || f.Tag.Get("ignored") == "true" {
				continue
			}
			require.Contains(t, page, "| `"+worker.EnvPrefix+"_"+tag+"` |", "%T.%s", v, f.Name)
		}
	}
}

// seqbusVar matches a variable name: SEQBUS_ and upper-case words; goLiteralVar one that opens
// a Go string literal (what the code reads, not what its comments say).
var (
	seqbusVar    = regexp.MustCompile(`SEQBUS_[A-Z0-9_]*[A-Z0-9]`)
	goLiteralVar = regexp.MustCompile("[\"`](SEQBUS_[A-Z0-9_]*[A-Z0-9])")
)

// Every SEQBUS_ variable that the README, the pages of docs/ and the deploy manifests name is one
// the code has: a variable of the reference, or one a Go file of the repository reads (the
// emulator's, the tests', in a string literal). A prefix written as SEQBUS_EMULATOR_* counts when variables start
// with it. The dated reports under docs/reports are records of past runs and are left out.
func TestDocsNameVariablesTheCodeHas(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	known := map[string]bool{}
	for _, v := range seqbusVar.FindAllString(string(renderConfiguration(t)), -1) {
		known[v] = true
	}
	named := map[string][]string{} // variable → files naming it
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || rel == filepath.Join("docs", "reports") {
				return filepath.SkipDir
			}
			return nil
		}
		isDoc := rel == "README.md" || strings.HasPrefix(rel, "docs"+string(filepath.Separator)) && strings.HasSuffix(rel, ".md") ||
			strings.HasPrefix(rel, "deploy"+string(filepath.Separator)) && slices.Contains([]string{".yaml", ".yml", ".json", ".md"}, filepath.Ext(rel))
		if !isDoc && filepath.Ext(rel) != ".go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !isDoc {
			for _, m := range goLiteralVar.FindAllStringSubmatch(string(b), -1) {
				known[m[1]] = true
			}
			return nil
		}
		for _, v := range seqbusVar.FindAllString(string(b), -1) {
			named[v] = append(named[v], rel)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, named, "the walk found the README and docs")
	for v, files := range named {
		if known[v] {
			continue
		}
		prefix := slices.ContainsFunc(slices.Collect(maps.Keys(known)), func(k string) bool { return strings.HasPrefix(k, v+"_") })
		require.True(t, prefix, "%s names %s, which no code has", strings.Join(slices.Compact(slices.Sorted(slices.Values(files))), ", "), v)
	}
}

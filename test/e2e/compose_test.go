package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

// repoRoot is the module root, two levels above this package.
const repoRoot = "../.."

// TestDockerComposeConfig validates docker-compose.yml with `docker compose config` when a Docker
// engine with the compose plugin is available; otherwise it skips, saying what is missing.
func TestDockerComposeConfig(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("skipping: no docker CLI in PATH (install Docker with the compose plugin to run this test)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "compose", "version").CombinedOutput(); err != nil {
		t.Skipf("skipping: the docker compose plugin is not available (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("skipping: no Docker engine answers (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	cmd := exec.CommandContext(ctx, "docker", "compose", "-f", filepath.Join(repoRoot, "docker-compose.yml"), "config")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "docker compose config: %s", out)
	require.Contains(t, string(out), "SEQBUS_QUEUE")
}

// composeFile is the part of docker-compose.yml this test reads.
type composeFile struct {
	Services map[string]struct {
		Environment yaml.Node `yaml:"environment"`
	} `yaml:"services"`
}

// environment returns a service's environment whether written as a map or as a KEY=VALUE list.
func environment(t *testing.T, n yaml.Node) map[string]string {
	t.Helper()
	env := map[string]string{}
	switch n.Kind {
	case 0: // absent
	case yaml.MappingNode:
		require.NoError(t, n.Decode(&env))
	case yaml.SequenceNode:
		var list []string
		require.NoError(t, n.Decode(&list))
		for _, kv := range list {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	default:
		t.Fatalf("environment at line %d is neither a map nor a list", n.Line)
	}
	return env
}

// binarySettings are the variables cmd/worker reads besides those of worker.Config and
// worker.RelayConfig: its own settings (handler, log level) and test hooks.
var binarySettings = []string{"HANDLER", "HANDLER_URL", "LOG_LEVEL", "TEST_CRASH_BEFORE_COMMIT", "TEST_REPLAY_CRASH_AFTER"}

// knownVariables returns the SEQBUS_ variables the worker reads, from the envconfig tags of the
// worker's configuration structs.
func knownVariables() map[string]bool {
	known := map[string]bool{}
	for _, name := range binarySettings {
		known[worker.EnvPrefix+"_"+name] = true
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[worker.Config](), reflect.TypeFor[worker.RelayConfig]()} {
		for _, f := range reflect.VisibleFields(typ) {
			if name := f.Tag.Get("envconfig"); name != "" && f.Tag.Get("ignored") != "true" {
				known[worker.EnvPrefix+"_"+name] = true
			}
		}
	}
	return known
}

// configFrom builds a worker.Config from env as cmd/worker does: the defaults, each field with
// a variable in env set from it, the handler the env names.
func configFrom(t *testing.T, env map[string]string) worker.Config {
	t.Helper()
	c := worker.DefaultConfig()
	v := reflect.ValueOf(&c).Elem()
	for _, f := range reflect.VisibleFields(v.Type()) {
		tag := f.Tag.Get("envconfig")
		if tag == "" || f.Tag.Get("ignored") == "true" {
			continue
		}
		raw, ok := env[worker.EnvPrefix+"_"+tag]
		if !ok {
			continue
		}
		field := v.FieldByIndex(f.Index)
		if d, ok := field.Addr().Interface().(interface{ Decode(string) error }); ok { // envconfig.Decoder
			require.NoError(t, d.Decode(raw), f.Name)
			continue
		}
		switch {
		case f.Type == reflect.TypeFor[time.Duration]():
			d, err := time.ParseDuration(raw)
			require.NoError(t, err, f.Name)
			field.SetInt(int64(d))
		case f.Type.Kind() == reflect.String:
			field.SetString(raw)
		case f.Type.Kind() == reflect.Bool:
			b, err := strconv.ParseBool(raw)
			require.NoError(t, err, f.Name)
			field.SetBool(b)
		case f.Type.Kind() == reflect.Int || f.Type.Kind() == reflect.Int64:
			n, err := strconv.Atoi(raw)
			require.NoError(t, err, f.Name)
			field.SetInt(int64(n))
		default:
			t.Fatalf("field %s has type %s, unknown to this test", f.Name, f.Type)
		}
	}
	if env[worker.EnvPrefix+"_HANDLER"] == "journal" {
		c.Journal = true
	} else {
		c.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
	}
	return c
}

// TestDockerComposeVariablesKnown keeps docker-compose.yml true: every SEQBUS_ variable it sets is
// one the worker reads, the worker settings it gives are valid, and the queue it names is declared
// in the emulator configuration it mounts. No Docker needed.
func TestDockerComposeVariablesKnown(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	require.NoError(t, err)
	var cf composeFile
	require.NoError(t, yaml.Unmarshal(raw, &cf))
	require.Contains(t, cf.Services, "worker")

	known := knownVariables()
	require.True(t, known["SEQBUS_CONNECTION_STRING"] && known["SEQBUS_TEST_CRASH_BEFORE_COMMIT"], "reflection finds the tags: %v", known)
	var checked []string
	for name, svc := range cf.Services {
		for k := range environment(t, svc.Environment) {
			if !strings.HasPrefix(k, worker.EnvPrefix+"_") {
				continue
			}
			require.True(t, known[k], "service %s sets %s, which the worker does not read", name, k)
			checked = append(checked, k)
		}
	}
	sort.Strings(checked)
	require.NotEmpty(t, checked, "the compose file configures the worker")
	t.Logf("compose sets %d known SEQBUS_ variables: %s", len(checked), strings.Join(checked, ", "))

	env := environment(t, cf.Services["worker"].Environment)
	cfg := configFrom(t, env)
	require.NoError(t, cfg.Validate(), "the compose worker's settings are valid")
	queue := env["SEQBUS_QUEUE"]
	require.NotEmpty(t, queue, "the compose worker reads a queue")
	b := broker.New(broker.Config{})
	defer b.Close()
	require.NoError(t, b.LoadConfigFile(filepath.Join(repoRoot, "deploy", "emulator-config.json")))
	q, err := b.GetQueue(queue)
	require.NoError(t, err, "deploy/emulator-config.json declares the worker's queue %q", queue)
	require.True(t, q.Properties.RequiresSession, "queue %q is session-enabled", queue)

	// The "microsoft" profile's worker reads the same queue from Microsoft's emulator.
	msEnv := environment(t, cf.Services["worker-microsoft"].Environment)
	msCfg := configFrom(t, msEnv)
	require.NoError(t, msCfg.Validate(), "the microsoft profile's worker settings are valid")
	require.Equal(t, queue, msEnv["SEQBUS_QUEUE"])
}

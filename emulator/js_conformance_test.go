package emulator_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
)

// jsDir holds the JavaScript conformance test, its package.json and the
// package-lock.json that pins @azure/service-bus and everything under it.
const jsDir = "testdata/jsconformance"

// jsLockStamp, inside node_modules, records the hash of the package-lock.json
// node_modules was installed from; npm ci runs again when it differs.
const jsLockStamp = ".seqbus-package-lock.sha256"

// TestJavaScriptSDKConformance runs testdata/jsconformance/servicebus.test.mjs
// (node's test runner, the official @azure/service-bus SDK) against an
// emulator holding the entities it uses. It skips when node or npm is not
// installed and fails with the runner's output when a JavaScript test fails.
//
// It does not run in parallel with the package's other tests: node and npm
// would take the CPU from their timing-sensitive neighbours (accept-next
// timeouts of half a second).
func TestJavaScriptSDKConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the JavaScript SDK conformance test installs npm packages and takes seconds; not in -short mode")
	}
	node := requireTool(t, "node")
	npm := requireTool(t, "npm")
	if major := nodeMajor(t, node); major < 18 {
		t.Skipf("node %d is too old for @azure/service-bus (18 or later is needed); skipping the JavaScript SDK conformance test", major)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	npmCI(ctx, t, npm)

	red := broker.Rule{Name: "red", FilterType: broker.FilterSQL, SQLExpression: "color = 'red'", ActionSQLExpression: "SET tagged = 'yes'"}
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues: map[string]broker.EntityProperties{
			"js-basic": {}, "js-batch": {}, "js-settle": {}, "js-deadletter": {}, "js-defer": {},
			"js-schedule": {}, "js-peek": {},
			"js-sessions":    {RequiresSession: true},
			"js-accept-next": {RequiresSession: true},
		},
		Topics: map[string]emulatortest.Topic{
			"js-routing": {Subscriptions: map[string]emulatortest.Subscription{
				"all": {},
				"red": {Rules: []broker.Rule{red}},
			}},
			"js-rules-amqp": {Subscriptions: map[string]emulatortest.Subscription{"picky": {}}},
		},
	})

	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "servicebus.test.mjs")
	cmd.Dir = jsDir
	cmd.Env = append(os.Environ(), "SERVICEBUS_CONNECTION_STRING="+srv.ConnectionString(), "NO_COLOR=1", "FORCE_COLOR=0")
	// The runner's own processes go down with it when the context ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the JavaScript SDK conformance test failed (%v):\n%s", err, out)
	}
	t.Logf("JavaScript SDK conformance (node --test):\n%s", out)
	summary := string(out)
	require.Contains(t, summary, "ℹ fail 0", "the runner reports no failure")
	require.NotContains(t, summary, "ℹ tests 0", "the runner ran tests")
}

// requireTool returns the path of name on PATH, or skips the test.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not on PATH; skipping the JavaScript SDK conformance test (install node and npm, e.g. apt-get install -y nodejs npm)", name)
	}
	return path
}

// nodeMajor returns the major version of node.
func nodeMajor(t *testing.T, node string) int {
	t.Helper()
	out, err := exec.Command(node, "--version").Output()
	require.NoError(t, err, "node --version")
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	major, err := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	require.NoError(t, err, "node --version printed %q", out)
	return major
}

// npmCI installs the pinned packages with npm ci unless node_modules was
// installed from the current package-lock.json already.
func npmCI(ctx context.Context, t *testing.T, npm string) {
	t.Helper()
	lock, err := os.ReadFile(filepath.Join(jsDir, "package-lock.json"))
	require.NoError(t, err)
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	stamp := filepath.Join(jsDir, "node_modules", jsLockStamp)
	if got, err := os.ReadFile(stamp); err == nil && string(bytes.TrimSpace(got)) == want {
		return
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read %s: %v", stamp, err)
	}
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = jsDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm ci in %s failed (%v); it needs the npm registry:\n%s", jsDir, err, out)
	}
	require.NoError(t, os.WriteFile(stamp, fmt.Appendf(nil, "%s\n", want), 0o644))
}

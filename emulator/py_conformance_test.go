package emulator_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
)

// pyDir holds the Python conformance test.
const pyDir = "testdata/pyconformance"

// systemPython is the interpreter Debian's python3-azure and python3-uamqp
// install into (/usr/lib/python3/dist-packages); another python3 on PATH
// (pyenv, a virtualenv) does not see them.
const systemPython = "/usr/bin/python3"

// pyScenarios is how many scenarios servicebus_conformance.py runs.
const pyScenarios = 12

var pySummary = regexp.MustCompile(`(?m)^SUMMARY passed=(\d+) failed=(\d+)$`)

// TestPythonSDKConformance runs testdata/pyconformance/servicebus_conformance.py
// (the official azure-servicebus 7.8 on uamqp) against an emulator in TLS mode,
// over AMQPS and over WebSockets, and asserts that every scenario passed. It
// skips when the system Python lacks the SDK (apt-get install -y python3-azure
// python3-uamqp).
//
// Like the JavaScript test, it does not run in parallel with the package's
// other tests.
func TestPythonSDKConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the Python SDK conformance test takes seconds; not in -short mode")
	}
	if _, err := os.Stat(systemPython); err != nil {
		t.Skipf("%s is missing; skipping the Python SDK conformance test (apt-get install -y python3-azure python3-uamqp)", systemPython)
	}
	if out, err := exec.Command(systemPython, "-c", "import azure.servicebus, uamqp").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import azure.servicebus and uamqp; skipping the Python SDK conformance test "+
			"(apt-get install -y python3-azure python3-uamqp): %v\n%s", systemPython, err, out)
	}
	for _, transport := range []string{"amqps", "websocket"} {
		t.Run(transport, func(t *testing.T) {
			// The two runs wait on the network more than they compute: side by side.
			t.Parallel()
			srv := emulatortest.Start(t, &emulatortest.Options{
				TLS: true,
				Queues: map[string]broker.EntityProperties{
					"py-basic": {}, "py-batch": {}, "py-settle": {}, "py-deadletter": {}, "py-defer": {},
					"py-schedule": {}, "py-peek": {},
					"py-sessions":    {RequiresSession: true},
					"py-accept-next": {RequiresSession: true},
					// Partitioned: the SDK names the session in receive-deferred, settlement
					// through $management and peek, as the service requires there.
					"py-session-defer": {RequiresSession: true, EnablePartitioning: true},
				},
				Topics: map[string]emulatortest.Topic{
					"py-routing": {Subscriptions: map[string]emulatortest.Subscription{"all": {}}},
				},
			})
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, systemPython, "-u", "servicebus_conformance.py")
			cmd.Dir = pyDir
			cmd.Env = append(os.Environ(),
				"SERVICEBUS_CONNECTION_STRING="+srv.ConnectionString(),
				"SERVICEBUS_CA_FILE="+srv.CertFile(),
				// The administration client of azure-servicebus 7.8 ignores connection_verify.
				"REQUESTS_CA_BUNDLE="+srv.CertFile(),
				"SERVICEBUS_TRANSPORT="+transport,
				"PYTHONDONTWRITEBYTECODE=1",
			)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			out, err := cmd.CombinedOutput()
			t.Logf("Python SDK conformance over %s:\n%s", transport, out)
			m := pySummary.FindSubmatch(out)
			if m == nil {
				// No summary: the interpreter died (uamqp crashing, for one) or hung.
				t.Fatalf("the Python SDK conformance run ended without its summary (%v)", err)
			}
			passed, _ := strconv.Atoi(string(m[1]))
			failed, _ := strconv.Atoi(string(m[2]))
			require.Zero(t, failed, "failed scenarios (see the log)")
			require.Equal(t, pyScenarios, passed, "every scenario ran and passed")
			require.NoError(t, err, "the run's exit status")
		})
	}
}

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/handler"
	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/internal/testio"
	"github.com/seqbus/seqbus/migrations"
)

const (
	queueName = "orders"
	// lockDuration is short so that a killed worker's session locks expire soon, should the
	// emulator not release them when the connection drops.
	lockDuration = 5 * time.Second
	// waitLong bounds every wait for worker progress.
	waitLong = 45 * time.Second
)

// waitFor polls cond every 20ms until it holds or timeout passes, then fails with msg.
func waitFor(t testing.TB, timeout time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: %s", timeout, msg())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fixture is one test's emulator with a session-enabled queue.
type fixture struct {
	srv *emulatortest.Server
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureWith(t, broker.EntityProperties{})
}

// newFixtureWith is newFixture with more of the queue's properties given (duplicate detection).
func newFixtureWith(t *testing.T, props broker.EntityProperties) *fixture {
	t.Helper()
	return newFixtureRule(t, props, broker.SessionIDOnPartitioned)
}

// publish sends plan to the queue in batches, each message with the Sequence and IsLast
// application properties the worker reads by default.
func (f *fixture) publish(t *testing.T, plan []demo.Publication) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sender, err := f.srv.Client.NewSender(queueName, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, sender.Close(ctx)) }()
	batch, err := sender.NewMessageBatch(ctx, nil)
	require.NoError(t, err)
	for i, p := range plan {
		sid, mid := p.SessionID, p.SessionID+"/"+strconv.FormatInt(p.Sequence, 10)
		require.NoError(t, batch.AddMessage(&azservicebus.Message{
			SessionID:             &sid,
			MessageID:             &mid,
			Body:                  fmt.Appendf(nil, `{"order":%q,"step":%d}`, p.SessionID, p.Sequence),
			ApplicationProperties: map[string]any{"Sequence": p.Sequence, "IsLast": p.Last},
		}, nil))
		if batch.NumMessages() == 50 || i == len(plan)-1 {
			require.NoError(t, sender.SendMessageBatch(ctx, batch, nil))
			batch, err = sender.NewMessageBatch(ctx, nil)
			require.NoError(t, err)
		}
	}
}

// counts returns the queue's message counts.
func (f *fixture) counts(t *testing.T) broker.Counts {
	t.Helper()
	info, err := f.srv.Broker().GetQueue(queueName)
	require.NoError(t, err)
	return info.Counts
}

// requireDrained waits until the queue holds no message (active, deferred or locked) and checks
// that nothing was dead-lettered.
func (f *fixture) requireDrained(t *testing.T) {
	t.Helper()
	waitFor(t, 15*time.Second, func() bool { return f.counts(t).Active == 0 }, func() string {
		return fmt.Sprintf("queue not drained: %+v, first messages left: %s", f.counts(t), f.peek(t))
	})
	c := f.counts(t)
	require.Zero(t, c.DeadLetter, "nothing is dead-lettered")
	require.Zero(t, c.Total, "nothing is left in the queue: %+v", c)
	require.Empty(t, f.peek(t), "peek finds nothing")
}

// peek describes up to 10 messages still in the queue.
func (f *fixture) peek(t *testing.T) string {
	t.Helper()
	q, err := f.srv.Broker().Lookup(queueName)
	require.NoError(t, err)
	var parts []string
	for _, m := range q.Peek(0, 10, "") {
		parts = append(parts, fmt.Sprintf("%v", m.ApplicationProperties))
	}
	return strings.Join(parts, " ")
}

// baseEnv is the environment of a worker process on f's queue: the parent's environment without
// any SEQBUS_ variable, plus fast idle and sweep settings and extra (KEY=VALUE).
func (f *fixture) baseEnv(extra ...string) []string {
	env := cleanEnv()
	env = append(env,
		"SEQBUS_CONNECTION_STRING="+f.srv.ConnectionString(),
		"SEQBUS_QUEUE="+queueName,
		"SEQBUS_SESSION_IDLE_TIMEOUT=1s",
		"SEQBUS_SWEEP_INTERVAL=1s",
		"SEQBUS_SHUTDOWN_TIMEOUT=10s",
		"SEQBUS_LOG_LEVEL=info",
		"SEQBUS_HTTP_ADDR=127.0.0.1:0", // a free port each: processes run side by side
	)
	return append(env, extra...)
}

// cleanEnv is the parent's environment without SEQBUS_ variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SEQBUS_") {
			env = append(env, kv)
		}
	}
	return env
}

// postgresEnv gives a worker a schema of its own (migrated) and returns the env entries and a
// pool on the same schema for the test's checks.
func postgresEnv(t *testing.T) (*pgxpool.Pool, []string) {
	t.Helper()
	pool, schema := pgtest.NewPoolWithSchema(t, &pgtest.Options{Setup: func(ctx context.Context, p *pgxpool.Pool) error {
		_, err := migrations.New(p, nil).Up(ctx, migrations.UpOptions{})
		return err
	}})
	return pool, []string{
		"SEQBUS_STATE_STORE=postgres",
		"SEQBUS_DATABASE_URL=" + pgtest.SchemaDSN(schema),
	}
}

// proc is a running worker process.
type proc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr testio.SyncBuffer
	done           chan struct{}
	waitErr        error
}

// startWorker runs the worker binary with env and arguments args; it is killed at cleanup if it
// is still running, and its stderr is logged when the test failed.
func startWorker(t testing.TB, name string, env []string, args ...string) *proc {
	t.Helper()
	return startBinary(t, workerBin, name, env, args...)
}

// startBinary is startWorker with another worker binary (a benchmark's older build).
func startBinary(t testing.TB, bin, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s stderr (last 4000 bytes):\n%s", p.name, tail(p.stderr.String(), 4000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to end and returns its exit code (-1 when killed by a signal).
func (p *proc) wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s; stderr: %s", p.name, timeout, tail(p.stderr.String(), 2000))
	}
	var exitErr *exec.ExitError
	if p.waitErr != nil && !errors.As(p.waitErr, &exitErr) {
		t.Fatalf("%s: wait: %v", p.name, p.waitErr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// stop sends SIGTERM and requires a clean exit.
//
// It first waits until the process reports that it runs: a SIGTERM that arrives while the Go
// runtime still initialises, before the process has taken its signals, kills it (exit -1).
func (p *proc) stop(t testing.TB) {
	t.Helper()
	waitFor(t, 30*time.Second, func() bool {
		out := p.stderr.String()
		return p.exited() || strings.Contains(out, `"msg":"worker: running"`) || strings.Contains(out, `"msg":"worker: relay running"`) ||
			strings.Contains(out, `"msg":"worker: scaler running"`)
	}, func() string {
		return p.name + " never reported running (SEQBUS_LOG_LEVEL must be info or debug): " + tail(p.stderr.String(), 2000)
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, 20*time.Second), "%s exit code after SIGTERM; stderr: %s", p.name, tail(p.stderr.String(), 2000))
}

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	require.Equal(t, -1, p.wait(t, 10*time.Second), "%s was killed", p.name)
}

// records parses the log handler's JSON lines on stdout. A final line without its newline (cut by
// a kill) is ignored.
func (p *proc) records(t *testing.T) []handler.LogRecord {
	t.Helper()
	out := p.stdout.String()
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		out = out[:i+1]
	} else {
		out = ""
	}
	var recs []handler.LogRecord
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		var r handler.LogRecord
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), "%s stdout line %q", p.name, sc.Text())
		recs = append(recs, r)
	}
	require.NoError(t, sc.Err())
	return recs
}

// lines counts the complete lines on stdout.
func (p *proc) lines() int { return strings.Count(p.stdout.String(), "\n") }

// bySession groups the sequences of recs by session, in the order they were handled.
func bySession(recs []handler.LogRecord) map[string][]int64 {
	out := map[string][]int64{}
	for _, r := range recs {
		out[r.SessionID] = append(out[r.SessionID], r.Sequence)
	}
	return out
}

// sessionIDs returns the ids of n demo sessions.
func sessionIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = demo.SessionID(i)
	}
	return ids
}

// oneToN returns 1..n.
func oneToN(from, to int64) []int64 {
	var s []int64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// handledAll reports whether every session in ids has a record for every sequence 1..n across
// procs.
func handledAll(t *testing.T, ids []string, n int, procs ...*proc) bool {
	t.Helper()
	seen := map[string]map[int64]bool{}
	for _, p := range procs {
		for _, r := range p.records(t) {
			if seen[r.SessionID] == nil {
				seen[r.SessionID] = map[int64]bool{}
			}
			seen[r.SessionID][r.Sequence] = true
		}
	}
	for _, id := range ids {
		for i := int64(1); i <= int64(n); i++ {
			if !seen[id][i] {
				return false
			}
		}
	}
	return true
}

// progress describes what procs handled so far, for timeout messages.
func progress(t *testing.T, procs ...*proc) string {
	t.Helper()
	var parts []string
	for _, p := range procs {
		m := bySession(p.records(t))
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			s := m[k]
			parts = append(parts, fmt.Sprintf("%s %s: %d handled, last %d", p.name, k, len(s), s[len(s)-1]))
		}
		if p.exited() {
			parts = append(parts, fmt.Sprintf("%s exited: %v", p.name, p.waitErr))
		}
	}
	return strings.Join(parts, "; ")
}

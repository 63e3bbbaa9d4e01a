package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/internal/testio"
	"github.com/seqbus/seqbus/sequencer"
)

func TestRunHandlesInOrderAndStopsOnSignal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"orders": {RequiresSession: true}}})

	client := srv.Client
	sender, err := client.NewSender("orders", nil)
	require.NoError(t, err)
	for _, n := range []int64{3, 1, 4, 2, 2} {
		sid := "order-1"
		require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{
			SessionID:             &sid,
			Body:                  fmt.Appendf(nil, "step %d", n),
			ApplicationProperties: map[string]any{"seq": n, "end": n == 4},
		}, nil))
	}

	clearEnv(t)
	t.Setenv("SEQBUS_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("SEQBUS_QUEUE", "orders")
	t.Setenv("SEQBUS_SEQUENCE_PROPERTY", "seq")
	t.Setenv("SEQBUS_LAST_PROPERTY", "end")
	t.Setenv("SEQBUS_SESSION_IDLE_TIMEOUT", "500ms")
	t.Setenv("SEQBUS_SHUTDOWN_TIMEOUT", "5s")

	var stdout, stderr testio.SyncBuffer
	c := newCLI(&stdout, &stderr)
	sigs := make(chan os.Signal, 2)
	c.signals = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	exit := make(chan int, 1)
	go func() { exit <- c.run(ctx, []string{"run"}) }()

	require.Eventually(t, func() bool { return strings.Count(stdout.String(), "\n") >= 4 }, 20*time.Second, 20*time.Millisecond,
		"stdout: %s\nstderr: %s", stdout.String(), stderr.String())
	sigs <- syscall.SIGTERM
	select {
	case code := <-exit:
		require.Equal(t, 0, code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not stop within the shutdown timeout")
	}

	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Len(t, lines, 4, "the duplicate is not handled")
	for i, l := range lines {
		var rec struct {
			SessionID string `json:"session_id"`
			Sequence  int64  `json:"sequence"`
			Body      string `json:"body"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &rec))
		require.Equal(t, "order-1", rec.SessionID)
		require.EqualValues(t, i+1, rec.Sequence)
		require.Equal(t, fmt.Sprintf("step %d", i+1), rec.Body)
	}
	logs := stderr.String()
	require.Contains(t, logs, `"msg":"worker: stopping gracefully"`)
	require.Contains(t, logs, `"msg":"worker: stopped"`)
	require.NotContains(t, logs, emulator.DefaultKey, "the shared access key is never logged")
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		require.True(t, json.Valid([]byte(l)), "stderr is JSON lines: %s", l)
	}
}

func TestRunSecondSignalCancelsInFlightWork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"orders": {RequiresSession: true}}})

	// The http handler's target hangs until the request is cancelled.
	entered := make(chan struct{}, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	}))
	defer hook.Close()

	client := srv.Client
	sender, err := client.NewSender("orders", nil)
	require.NoError(t, err)
	sid := "s"
	require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{SessionID: &sid, ApplicationProperties: map[string]any{"Sequence": int64(1)}}, nil))

	clearEnv(t)
	t.Setenv("SEQBUS_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("SEQBUS_QUEUE", "orders")
	t.Setenv("SEQBUS_HANDLER", "http")
	t.Setenv("SEQBUS_HANDLER_URL", hook.URL)
	t.Setenv("SEQBUS_SHUTDOWN_TIMEOUT", "30s")

	var stdout, stderr testio.SyncBuffer
	c := newCLI(&stdout, &stderr)
	sigs := make(chan os.Signal, 2)
	c.signals = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	exit := make(chan int, 1)
	go func() { exit <- c.run(ctx, nil) }()

	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatalf("handler never called; stderr: %s", stderr.String())
	}
	sigs <- syscall.SIGINT
	select {
	case <-exit:
		t.Fatal("the first signal must wait for the message in hand")
	case <-time.After(300 * time.Millisecond):
	}
	start := time.Now()
	sigs <- syscall.SIGINT
	select {
	case code := <-exit:
		require.Equal(t, 0, code, stderr.String())
		require.Less(t, time.Since(start), 10*time.Second)
	case <-time.After(15 * time.Second):
		t.Fatal("second signal did not cancel in-flight work")
	}
	require.Contains(t, stderr.String(), "second signal")
}

func TestRunFailsFastOnMissingQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := emulatortest.Start(t, nil)

	clearEnv(t)
	t.Setenv("SEQBUS_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("SEQBUS_QUEUE", "no-such-queue")
	c, _, errOut := newTestCLI()
	start := time.Now()
	require.Equal(t, 1, c.run(ctx, nil))
	require.Less(t, time.Since(start), 20*time.Second)
	require.Contains(t, errOut.String(), "SEQBUS_QUEUE: cannot use no-such-queue")
	require.Contains(t, errOut.String(), "not found")
}

func TestRunFailsFastOnUnreachableDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"orders": {RequiresSession: true}}})

	clearEnv(t)
	t.Setenv("SEQBUS_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("SEQBUS_QUEUE", "orders")
	t.Setenv("SEQBUS_STATE_STORE", "postgres")
	t.Setenv("SEQBUS_DATABASE_URL", "postgres://app:hunter2@127.0.0.1:1/seqbus?connect_timeout=2")
	c, _, errOut := newTestCLI()
	require.Equal(t, 1, c.run(ctx, nil))
	require.Contains(t, errOut.String(), "SEQBUS_DATABASE_URL: postgres://app:REDACTED@127.0.0.1:1/seqbus?connect_timeout=2: cannot reach the database")
	require.NotContains(t, errOut.String(), "hunter2")
}

func TestCrashAfterExitsOnTheNthHandledMessage(t *testing.T) {
	t.Parallel()
	var exits []int
	failNext := false
	inner := sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error {
		if failNext {
			failNext = false
			return errors.New("handler failed")
		}
		return nil
	})
	h := crashAfter(3, func(code int) { exits = append(exits, code) })(inner)
	ctx := context.Background()
	require.NoError(t, h.Handle(ctx, &sequencer.Message{}))
	failNext = true
	require.Error(t, h.Handle(ctx, &sequencer.Message{}), "a failed call does not count")
	require.NoError(t, h.Handle(ctx, &sequencer.Message{}))
	require.Empty(t, exits)
	require.NoError(t, h.Handle(ctx, &sequencer.Message{}))
	require.Equal(t, []int{137}, exits)
	require.NoError(t, h.Handle(ctx, &sequencer.Message{}))
	require.Equal(t, []int{137}, exits, "only the n-th call exits")
}

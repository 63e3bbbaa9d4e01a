package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/internal/testio"
)

// TestDoctorExitCodes runs `worker doctor` on the emulator with the worker's settings from the
// environment (so not in parallel).
func TestDoctorExitCodes(t *testing.T) {
	srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"orders": {RequiresSession: true}}})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	yes := true
	_, err := srv.NewAdminClient(t).CreateQueue(ctx, "partitioned", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
		RequiresSession: &yes, EnablePartitioning: &yes,
	}})
	require.NoError(t, err)
	wrongKey := strings.Replace(srv.ConnectionString(), emulator.DefaultKey, "bm90IHRoZSBrZXk=", 1)

	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		code       int
		stdout     []string
		stderr     []string
		jsonReport bool
	}{
		{name: "clean session queue", args: []string{"doctor"}, code: 0,
			stdout: []string{"round trip: receive deferred", "0 failed"}},
		{name: "json", args: []string{"doctor", "--json"}, code: 0, jsonReport: true},
		{name: "partitioned with defer", args: []string{"doctor"}, env: map[string]string{"SEQBUS_QUEUE": "partitioned"}, code: 1,
			stdout: []string{"entity partitioning", "SEQBUS_EARLY_MESSAGES"}, stderr: []string{"a check failed"}},
		{name: "missing entity", args: []string{"doctor"}, env: map[string]string{"SEQBUS_QUEUE": "nowhere"}, code: 1,
			stdout: []string{"entity exists"}},
		{name: "wrong key", args: []string{"doctor"}, env: map[string]string{"SEQBUS_CONNECTION_STRING": wrongKey}, code: 1,
			stdout: []string{"connection and credentials", "refused the credentials"}},
		{name: "store not in this build", args: []string{"doctor"}, env: map[string]string{"SEQBUS_EARLY_MESSAGES": "store"}, code: 1,
			stdout: []string{"SEQBUS_EARLY_MESSAGES"}},
		{name: "bad flag", args: []string{"doctor", "--fast"}, code: 2, stderr: []string{"doctor [--json]"}},
		{name: "extra argument", args: []string{"doctor", "orders"}, code: 2, stderr: []string{`unexpected argument "orders"`}},
		{name: "help", args: []string{"doctor", "-h"}, code: 0, stdout: []string{"usage: worker doctor [--json]", "-json"}},
		{name: "run refuses a partitioned entity", args: []string{"run"}, env: map[string]string{"SEQBUS_QUEUE": "partitioned"}, code: 1,
			stderr: []string{"SEQBUS_EARLY_MESSAGES", "`worker doctor`"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			t.Setenv("SEQBUS_CONNECTION_STRING", srv.ConnectionString())
			t.Setenv("SEQBUS_QUEUE", "orders")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var stdout, stderr testio.SyncBuffer
			code := newCLI(&stdout, &stderr).run(ctx, tt.args)
			require.Equal(t, tt.code, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			for _, s := range tt.stdout {
				require.Contains(t, stdout.String(), s)
			}
			for _, s := range tt.stderr {
				require.Contains(t, stderr.String(), s)
			}
			if tt.jsonReport {
				rep := decodeDoctorJSON(t, stdout.String())
				require.Equal(t, "orders", rep.Entity)
				require.NotEmpty(t, rep.Checks)
				for _, c := range rep.Checks {
					require.Contains(t, []string{"pass", "warn"}, c.Result, c.Check)
				}
			}
		})
	}
}

// doctorJSON is what a script reads of `worker doctor --json`.
type doctorJSON struct {
	Entity string `json:"entity"`
	Checks []struct {
		Check  string `json:"check"`
		Result string `json:"result"`
	} `json:"checks"`
}

func decodeDoctorJSON(t *testing.T, out string) doctorJSON {
	t.Helper()
	var rep doctorJSON
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	return rep
}

// A signal cuts the doctor short: it reports what ran, exits 1 and leaves no scratch queue.
func TestDoctorStopsOnSignal(t *testing.T) {
	srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{"orders": {RequiresSession: true}}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	clearEnv(t)
	t.Setenv("SEQBUS_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("SEQBUS_QUEUE", "orders")

	var stdout, stderr testio.SyncBuffer
	c := newCLI(&stdout, &stderr)
	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGINT
	c.signals = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	require.Equal(t, 1, c.run(ctx, []string{"doctor"}), "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), "fail")

	pager := srv.NewAdminClient(t).NewListQueuesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		require.NoError(t, err)
		for _, q := range page.Queues {
			require.Equal(t, "orders", q.QueueName)
		}
	}
}

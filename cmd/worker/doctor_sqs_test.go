package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/pgtest"
)

// TestDoctorSQSExitCodes runs `worker doctor` on a local SQS with the worker's settings from the
// environment and the AWS chain, as a user does (so not in parallel).
func TestDoctorSQSExitCodes(t *testing.T) {
	pgtest.RequireServer(t)
	endpoint, _, queueURL := sqsQueue(t, "doctor")
	_, schema := pgtest.NewPoolWithSchema(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		code       int
		stdout     []string
		jsonReport bool
	}{
		{name: "clean queue", args: []string{"doctor"}, code: 0,
			stdout: []string{"queue dead-letter queue", "doctor-dlq.fifo (FIFO)", "round trip: dead letter arrived", "0 failed"}},
		{name: "json", args: []string{"doctor", "--json"}, code: 0, jsonReport: true},
		{name: "missing queue", args: []string{"doctor"}, env: map[string]string{"SEQBUS_SQS_QUEUE_URL": strings.Replace(queueURL, "doctor.fifo", "nothing.fifo", 1)},
			code: 1, stdout: []string{"queue exists", "does not exist"}},
		{name: "lock renewed too late", args: []string{"doctor"}, env: map[string]string{"SEQBUS_LOCK_RENEW_INTERVAL": "45s"},
			code: 1, stdout: []string{"group lock", "SEQBUS_LOCK_RENEW_INTERVAL is 45s"}},
		{name: "no region", args: []string{"doctor"}, env: map[string]string{"AWS_REGION": ""},
			code: 1, stdout: []string{"connection and credentials", "AWS_REGION"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			setEnv(t, map[string]string{
				"SEQBUS_PROVIDER": "sqs", "SEQBUS_SQS_QUEUE_URL": queueURL, "SEQBUS_STATE_STORE": "postgres",
				"SEQBUS_DATABASE_URL": pgtest.SchemaDSN(schema), "SEQBUS_MIGRATE_ON_START": "true", "SEQBUS_EARLY_MESSAGES": "store",
			})
			for _, kv := range awsEnv(t, endpoint) {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			setEnv(t, tt.env)
			c, stdout, stderr := newTestCLI()
			code := c.run(ctx, tt.args)
			require.Equal(t, tt.code, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			for _, s := range tt.stdout {
				require.Contains(t, stdout.String(), s)
			}
			if tt.jsonReport {
				rep := decodeDoctorJSON(t, stdout.String())
				require.Equal(t, "sqs:000000000000/doctor.fifo", rep.Entity)
				require.Greater(t, len(rep.Checks), 15)
				for _, c := range rep.Checks {
					want := []string{"pass", "warn"}
					if c.Check == "rights" {
						want = []string{"skip"}
					}
					require.Contains(t, want, c.Result, c.Check)
				}
			}
		})
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
)

// `worker doctor`, the built binary on the emulator: 0 for a clean session queue, 1 for a
// partitioned one with defer (naming the setting), a missing entity or a wrong key, 2 for a bad
// flag; and `worker run` refuses the partitioned queue at start, naming the setting.
func TestDoctorBinary(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	yes := true
	_, err := f.srv.NewAdminClient(t).CreateQueue(ctx, "partitioned", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
		RequiresSession: &yes, EnablePartitioning: &yes,
	}})
	require.NoError(t, err)
	wrongKey := strings.Replace(f.srv.ConnectionString(), emulator.DefaultKey, "bm90IHRoZSBrZXk=", 1)

	tests := []struct {
		name   string
		env    []string
		args   []string
		code   int
		stdout []string // regular expressions
		stderr []string
	}{
		{name: "clean session queue", args: []string{"doctor"}, code: 0,
			stdout: []string{`(?m)^round trip: receive deferred\s+pass`, `(?m)^round trip: delete the scratch queue\s+pass`, "0 failed"}},
		{name: "partitioned with defer", env: []string{"SEQBUS_QUEUE=partitioned"}, args: []string{"doctor"}, code: 1,
			stdout: []string{`(?m)^entity partitioning\s+fail.*SEQBUS_EARLY_MESSAGES`}},
		{name: "missing entity", env: []string{"SEQBUS_QUEUE=nowhere"}, args: []string{"doctor"}, code: 1,
			stdout: []string{`(?m)^entity exists\s+fail`}},
		{name: "wrong key", env: []string{"SEQBUS_CONNECTION_STRING=" + wrongKey}, args: []string{"doctor"}, code: 1,
			stdout: []string{`(?m)^connection and credentials\s+fail`}},
		{name: "bad flag", args: []string{"doctor", "--verbose"}, code: 2, stderr: []string{"doctor [--json]"}},
		{name: "run refuses the partitioned queue", env: []string{"SEQBUS_QUEUE=partitioned"}, args: []string{"run"}, code: 1,
			stderr: []string{"SEQBUS_EARLY_MESSAGES", "`worker doctor`"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, f.baseEnv(tt.env...), tt.args...)
			require.Equal(t, tt.code, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			for _, re := range tt.stdout {
				require.Regexp(t, re, r.stdout)
			}
			for _, s := range tt.stderr {
				require.Contains(t, r.stderr, s)
			}
		})
	}

	r := runCLI(t, f.baseEnv(), "doctor", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep struct {
		Checks []struct{ Check, Result string } `json:"checks"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.NotEmpty(t, rep.Checks)
}

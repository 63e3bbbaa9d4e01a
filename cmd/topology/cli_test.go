package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/topology"
	"github.com/seqbus/seqbus/topology/sbadmin"
	"github.com/seqbus/seqbus/topology/topologytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const example = "../../topology/examples/two-sources.yaml"

// newTestCLI returns a CLI whose namespace is fake.
func newTestCLI(fake topology.Admin) (*cli, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	c := newCLI(&out, &errOut)
	c.connect = func(sbadmin.Config) (topology.Admin, error) { return fake, nil }
	return c, &out, &errOut
}

func TestCLI(t *testing.T) {
	t.Parallel()
	bad := t.TempDir() + "/bad.yaml"
	require.NoError(t, os.WriteFile(bad, []byte("queues:\n  - name: q\n    lockDuration: PT10M\n"), 0o600))
	warn := t.TempDir() + "/warn.yaml"
	require.NoError(t, os.WriteFile(warn, []byte("sequenced:\n  - name: s\n    sources: [in]\n    sessionId: {strategy: repository}\n"), 0o600))
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{"help", []string{"help"}, 0, "usage: topology", ""},
		{"no command", nil, 2, "", "usage: topology"},
		{"unknown command", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{"validate without file", []string{"validate"}, 2, "", "validate takes one FILE, found 0"},
		{"validate", []string{"validate", example}, 0, "valid (0 queues, 3 topics, 4 subscriptions)", ""},
		{"invalid file", []string{"validate", bad}, 1, "", bad + ":3:5: queues[0].lockDuration: PT10M is out of range PT5S..PT5M"},
		{"warnings go to stderr", []string{"validate", warn}, 0, "valid (0 queues, 2 topics, 2 subscriptions)",
			warn + ":4:16: warning: sequenced[0].sessionId: the session id length is unbounded (Owner, Repo)"},
		{"missing file", []string{"validate", "nope.yaml"}, 1, "", "topology: read open nope.yaml"},
		{"plan without namespace", []string{"plan", example}, 2, "", "set --connection-string"},
		{"plan", []string{"plan", "--namespace", "x", example}, 0, "+ create topic orders-api", ""},
		{"plan detailed", []string{"plan", example, "--namespace", "x", "--detailed-exitcode"}, 3, "Plan: 7 to create", ""},
		{"render", []string{"render", "--resource-group", "rg", example}, 0, "RG=rg\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, out, errOut := newTestCLI(topologytest.NewFake())
			code := c.run(context.Background(), tt.args)
			require.Equal(t, tt.wantCode, code, "stdout: %s\nstderr: %s", out, errOut)
			require.Contains(t, out.String(), tt.wantOut)
			require.Contains(t, errOut.String(), tt.wantErr)
		})
	}
}

func TestCLIApplyIsIdempotent(t *testing.T) {
	t.Parallel()
	fake := topologytest.NewFake()
	c, out, _ := newTestCLI(fake)
	require.Equal(t, 0, c.run(context.Background(), []string{"apply", "--namespace", "x", example}))
	require.Contains(t, out.String(), "Applied 7 changes.")

	writes := fake.Writes()
	c, out, _ = newTestCLI(fake)
	require.Equal(t, 0, c.run(context.Background(), []string{"apply", "--namespace", "x", example}))
	require.Equal(t, "No changes: the namespace matches the file.\nApplied 0 changes.\n", out.String())
	require.Equal(t, writes, fake.Writes())

	c, out, _ = newTestCLI(fake)
	require.Equal(t, 0, c.run(context.Background(), []string{"plan", "--namespace", "x", "--detailed-exitcode", example}))
	require.Contains(t, out.String(), "No changes")
}

// TestCLIAgainstTheEmulator runs plan and apply through the real admin client.
func TestCLIAgainstTheEmulator(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := emulatortest.Start(t, nil)
	defer http.DefaultClient.CloseIdleConnections()
	defer http.DefaultTransport.(*http.Transport).CloseIdleConnections()

	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := newCLI(&out, &errOut).run(ctx, args)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := run("apply", "--connection-string", srv.ConnectionString(), example)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "Applied 7 changes.")
	code, out, errOut = run("plan", "--detailed-exitcode", "--connection-string", srv.ConnectionString(), example)
	require.Equal(t, 0, code, errOut)
	require.True(t, strings.HasPrefix(out, "No changes"), out)
}

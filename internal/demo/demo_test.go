package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/pgtest"
)

func TestRunRestoresOrder(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	sum, err := Run(context.Background(), Options{Sessions: 4, Messages: 30, Duplicates: 2, Seed: 9, Timeout: time.Minute, Out: &out, Verbose: true})
	require.NoError(t, err)
	require.True(t, sum.OK(), "%+v", sum)
	require.Empty(t, sum.Violations)
	require.EqualValues(t, 120, sum.Handled)
	require.Equal(t, 128, sum.Published)
	require.EqualValues(t, 8, sum.Duplicates, "every duplicate is recognised, none handled")
	require.Len(t, sum.PerReplica, 2)
	require.EqualValues(t, 120, sum.PerReplica[0]+sum.PerReplica[1])

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 120, "verbose mode logs one JSON line per handled message")
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &rec))
	require.Contains(t, rec, "session_id")

	var printed bytes.Buffer
	sum.Print(&printed)
	require.Contains(t, printed.String(), "order violations    0")
	require.Contains(t, printed.String(), "OK:")
}

func TestSummaryReportsFailures(t *testing.T) {
	t.Parallel()
	sum := Summary{Sessions: 1, Messages: 2, Handled: 2, Violations: []string{`session "a": handled sequence 2, expected 1`}}
	require.False(t, sum.OK())
	var b bytes.Buffer
	sum.Print(&b)
	require.Contains(t, b.String(), "order violations    1")
	require.Contains(t, b.String(), "FAILED")

	sum = Summary{Sessions: 1, Messages: 2, Handled: 1, Incomplete: map[string]int64{"a": 2}}
	require.False(t, sum.OK())
}

func TestRunSurvivesReplicaCrash(t *testing.T) {
	t.Parallel()
	sum, err := Run(context.Background(), Options{Sessions: 6, Messages: 40, Seed: 3, Crash: true, Timeout: time.Minute})
	require.NoError(t, err)
	require.Equal(t, 1, sum.Crashes)
	require.True(t, sum.OK(), "%+v", sum)
	require.Len(t, sum.PerReplica, 3, "two replicas and the replacement")
	require.EqualValues(t, 240, sum.Handled-sum.Redelivered)
}

func TestSummaryOKRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    Summary
		ok   bool
	}{
		{"clean", Summary{Messages: 4, Handled: 4}, true},
		{"missing", Summary{Messages: 4, Handled: 3}, false},
		{"redelivered without crash", Summary{Messages: 4, Handled: 5, Redelivered: 1}, false},
		{"redelivered after crash", Summary{Messages: 4, Handled: 5, Redelivered: 1, Crashes: 1}, true},
		{"violation", Summary{Messages: 4, Handled: 4, Violations: []string{"x"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.ok, tt.s.OK())
		})
	}
}

func TestRunOnSQS(t *testing.T) {
	t.Parallel()
	pgtest.RequireServer(t)
	var out bytes.Buffer
	sum, err := Run(context.Background(), Options{Provider: ProviderSQS, DatabaseURL: pgtest.DSN(), Sessions: 4, Messages: 30, Duplicates: 2, Seed: 9, Timeout: time.Minute, Out: &out, Verbose: true})
	require.NoError(t, err)
	require.True(t, sum.OK(), "%+v", sum)
	require.EqualValues(t, 120, sum.Handled)
	require.EqualValues(t, 8, sum.Duplicates, "every duplicate copy reaches a worker and is dropped, none handled")
	require.NotZero(t, sum.HeldInStore, "early messages beyond the window are held in the store")
	require.Zero(t, sum.Deferred, "SQS cannot defer")
	require.Len(t, strings.Split(strings.TrimSpace(out.String()), "\n"), 120)
	var printed bytes.Buffer
	sum.Print(&printed)
	require.Contains(t, printed.String(), "on the in-process SQS FIFO and Postgres")
	require.Contains(t, printed.String(), "OK: every session was handled exactly once, in order")
}

func TestRunOnSQSSurvivesReplicaCrash(t *testing.T) {
	t.Parallel()
	pgtest.RequireServer(t)
	sum, err := Run(context.Background(), Options{Provider: ProviderSQS, DatabaseURL: pgtest.DSN(), Sessions: 6, Messages: 40, Seed: 3, Crash: true, Timeout: time.Minute})
	require.NoError(t, err)
	require.Equal(t, 1, sum.Crashes)
	require.True(t, sum.OK(), "%+v", sum)
	require.Len(t, sum.PerReplica, 3)
	require.EqualValues(t, 240, sum.Handled-sum.Redelivered)
}

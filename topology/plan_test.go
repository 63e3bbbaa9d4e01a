package topology_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/topology"
	"github.com/seqbus/seqbus/topology/topologytest"
)

func plan(t *testing.T, a topology.Admin, want *topology.Namespace) *topology.Plan {
	t.Helper()
	live, err := topology.Fetch(context.Background(), a, want)
	require.NoError(t, err)
	return topology.Diff(want, live)
}

func load(t *testing.T, file string) *topology.Namespace {
	t.Helper()
	ns, _, err := topology.Load("t.yaml", []byte(file))
	require.NoError(t, err)
	return ns
}

func TestApplyTwiceChangesNothingTheSecondTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := topologytest.NewFake()
	want := loadExample(t)

	p := plan(t, fake, want)
	res, err := topology.Apply(ctx, fake, p, nil)
	require.NoError(t, err)
	require.Empty(t, res.Skipped)
	require.Equal(t, []string{
		"CreateTopic orders-api", "CreateTopic payments-api", "CreateTopic checkout-seq",
		"CreateSubscription orders-api/audit", "CreateSubscription orders-api/checkout-fwd",
		"CreateSubscription payments-api/checkout-fwd", "CreateSubscription checkout-seq/workers",
	}, fake.Calls)

	writes := fake.Writes()
	p = plan(t, fake, want)
	require.True(t, p.Empty(), "second plan: %v", p.Changes)
	_, err = topology.Apply(ctx, fake, p, nil)
	require.NoError(t, err)
	require.Equal(t, writes, fake.Writes())

	var out bytes.Buffer
	require.NoError(t, p.Write(&out))
	require.Equal(t, "No changes: the namespace matches the file.\n", out.String())
}

func TestPlanShowsPendingChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := topologytest.NewFake()
	v1 := load(t, `
queues:
  - name: jobs
    lockDuration: PT30S
  - name: old
topics:
  - name: events
    subscriptions:
      - name: all
      - name: big
        rules:
          - {name: big, sql: "amount > 100"}
`)
	_, err := topology.Apply(ctx, fake, plan(t, fake, v1), nil)
	require.NoError(t, err)

	v2 := load(t, `
queues:
  - name: jobs
    lockDuration: PT1M
    maxDeliveryCount: 5
topics:
  - name: events
    subscriptions:
      - name: all
        requiresSession: true
      - name: big
        rules:
          - {name: big, sql: "amount > 1000", action: "SET user.big = TRUE"}
          - {name: vip, correlation: {subject: vip, properties: {tier: 1}}}
`)
	p := plan(t, fake, v2)
	var out bytes.Buffer
	require.NoError(t, p.Write(&out))
	require.Equal(t, `~ update queue jobs
    lockDuration: PT30S → PT1M
    maxDeliveryCount: 10 → 5
! replace subscription events/Subscriptions/all (needs --prune)
    requiresSession: false → true
~ update rule events/Subscriptions/big/Rules/big
    filter: sql "amount > 100" → sql "amount > 1000"
    action: (none) → "SET user.big = TRUE"
+ create rule events/Subscriptions/big/Rules/vip
- delete queue old (needs --prune)
Plan: 1 to create, 2 to update, 1 to replace, 1 to delete.
`, out.String())

	// Without prune, the replace and the delete are skipped; the rest is applied.
	res, err := topology.Apply(ctx, fake, p, nil)
	require.ErrorIs(t, err, topology.ErrSkipped)
	require.Len(t, res.Skipped, 2)
	require.Len(t, res.Applied, 3)

	p = plan(t, fake, v2)
	var out2 bytes.Buffer
	require.NoError(t, p.Write(&out2))
	require.Equal(t, "! replace subscription events/Subscriptions/all (needs --prune)\n    requiresSession: false → true\n- delete queue old (needs --prune)\nPlan: 0 to create, 0 to update, 1 to replace, 1 to delete.\n", out2.String())
}

func TestImmutablePropertyNeedsPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := topologytest.NewFake()
	_, err := topology.Apply(ctx, fake, plan(t, fake, load(t, "queues:\n  - {name: q, requiresSession: false}\n")), nil)
	require.NoError(t, err)

	want := load(t, "queues:\n  - {name: q, requiresSession: true}\n")
	p := plan(t, fake, want)
	require.Len(t, p.Changes, 1)
	require.Equal(t, topology.OpReplace, p.Changes[0].Op)

	_, err = topology.Apply(ctx, fake, p, nil)
	require.ErrorIs(t, err, topology.ErrSkipped)
	require.Contains(t, err.Error(), "queue q must be replaced")

	_, err = topology.Apply(ctx, fake, p, &topology.ApplyOptions{Prune: true})
	require.NoError(t, err)
	require.True(t, plan(t, fake, want).Empty())
}

func TestPruneDeletesUndeclaredEntities(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := topologytest.NewFake()
	_, err := topology.Apply(ctx, fake, plan(t, fake, load(t, "queues: [{name: a}, {name: b}]\ntopics: [{name: t, subscriptions: [{name: s1}, {name: s2}]}]\n")), nil)
	require.NoError(t, err)

	want := load(t, "queues: [{name: a}]\ntopics: [{name: t, subscriptions: [{name: s1}]}]\n")
	_, err = topology.Apply(ctx, fake, plan(t, fake, want), &topology.ApplyOptions{Prune: true})
	require.NoError(t, err)
	require.True(t, plan(t, fake, want).Empty())
	queues, err := fake.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, queues, 1)
}

func TestApplyCreatesForwardingTargetsFirst(t *testing.T) {
	t.Parallel()
	fake := topologytest.NewFake() // refuses a forwardTo whose target does not exist
	want := load(t, "queues:\n  - {name: a, forwardTo: b}\n  - {name: b, forwardTo: c}\n  - {name: c}\n")
	_, err := topology.Apply(context.Background(), fake, plan(t, fake, want), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"CreateQueue c", "CreateQueue b", "CreateQueue a"}, fake.Calls)
}

func TestApplyStopsAtTheFirstFailure(t *testing.T) {
	t.Parallel()
	fake := topologytest.NewFake()
	want := load(t, "queues: [{name: a}]\n")
	p := plan(t, fake, want)
	require.NoError(t, fake.CreateQueue(context.Background(), &topology.Queue{Name: "a"}))
	_, err := topology.Apply(context.Background(), fake, p, nil)
	require.ErrorIs(t, err, topologytest.ErrExists)
	require.Contains(t, err.Error(), "create queue a")
}

func TestRender(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, topology.Render(&out, loadExample(t), nil))
	script := out.String()
	for _, want := range []string{
		"az servicebus topic create --resource-group \"$RG\" --namespace-name \"$NS\" \\\n    --name orders-api \\\n    --default-message-time-to-live P14D\n",
		"az servicebus topic subscription create --resource-group \"$RG\" --namespace-name \"$NS\" \\\n    --topic-name checkout-seq \\\n    --name workers \\\n" +
			"    --lock-duration PT1M \\\n    --max-delivery-count 10 \\\n    --default-message-time-to-live P7D \\\n" +
			"    --enable-dead-lettering-on-message-expiration true \\\n    --enable-session true\n",
		"    --filter-sql-expression 'EXISTS(user.SessionName) AND EXISTS(user.TransactionId) AND EXISTS(user.InstanceId)' \\\n" +
			"    --action-sql-expression 'SET sys.SessionId = user.SessionName + '\\''_'\\'' + user.TransactionId + '\\''_'\\'' + user.InstanceId'\n",
		"az servicebus topic subscription rule delete --resource-group \"$RG\" --namespace-name \"$NS\" \\\n    --topic-name payments-api \\\n    --subscription-name checkout-fwd \\\n    --name '$Default'\n",
	} {
		require.Contains(t, script, want)
	}
	// The sequencing topic exists before the subscriptions that forward to it.
	require.Less(t, strings.Index(script, "--name checkout-seq"), strings.Index(script, "--forward-to checkout-seq"))

	bash, err := exec.LookPath("bash")
	if err != nil {
		return
	}
	// The script is valid bash, and running it against a stub az passes the SQL intact.
	dir := t.TempDir()
	stub := filepath.Join(dir, "az")
	log := filepath.Join(dir, "calls")
	require.NoError(t, os.WriteFile(stub, []byte("#!/usr/bin/env bash\nprintf '%s\\n' \"$*\" >> "+log+"\n"), 0o755))
	scriptPath := filepath.Join(dir, "render.sh")
	require.NoError(t, os.WriteFile(scriptPath, out.Bytes(), 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, scriptPath)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "RG=rg", "NS=ns")
	outb, err := cmd.CombinedOutput()
	require.NoError(t, err, string(outb))
	calls, err := os.ReadFile(log)
	require.NoError(t, err)
	require.Contains(t, string(calls), "--action-sql-expression SET sys.SessionId = user.SessionName + '_' + user.TransactionId + '_' + user.InstanceId\n")
	require.Equal(t, 3+4+2*1+2, strings.Count(string(calls), "\n"), "3 topics, 4 subscriptions, 2 rules, 2 $Default deletions")
}

func TestApplyHonoursCancellation(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fake := topologytest.NewFake()
	p := plan(t, fake, loadExample(t))
	_, err := topology.Apply(ctx, fake, p, nil)
	require.True(t, errors.Is(err, context.Canceled))
	require.Zero(t, fake.Writes())
}

// A replaced topic is recreated with its subscriptions in one step; that step comes
// after the queues are created, so a subscription may forward to a queue that is new in
// the same file.
func TestReplacedTopicsSubscriptionForwardsToANewQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := topologytest.NewFake()
	_, err := topology.Apply(ctx, fake, plan(t, fake, load(t, "topics: [{name: t, requiresDuplicateDetection: false}]\n")), nil)
	require.NoError(t, err)

	want := load(t, `
queues: [{name: audit}]
topics:
  - name: t
    requiresDuplicateDetection: true
    subscriptions: [{name: s, forwardTo: audit}]
`)
	p := plan(t, fake, want)
	var kinds []string
	for _, c := range p.Changes {
		kinds = append(kinds, string(c.Op)+" "+c.Path())
	}
	require.Equal(t, []string{"create audit", "replace t"}, kinds)
	_, err = topology.Apply(ctx, fake, p, &topology.ApplyOptions{Prune: true})
	require.NoError(t, err)
	require.True(t, plan(t, fake, want).Empty())
}

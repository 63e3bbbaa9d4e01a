package sbadmin_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/topology"
	"github.com/seqbus/seqbus/topology/sbadmin"
	"github.com/seqbus/seqbus/topology/topologytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type bundle struct {
	srv   *emulatortest.Server
	admin *sbadmin.Admin
}

func setup(t *testing.T) *bundle {
	t.Helper()
	srv := emulatortest.Start(t, nil)
	c, err := sbadmin.Connect(sbadmin.Config{ConnectionString: srv.ConnectionString(), ClientOptions: srv.AdminClientOptions(t)})
	require.NoError(t, err)
	return &bundle{srv: srv, admin: sbadmin.New(c)}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func loadExample(t *testing.T) *topology.Namespace {
	t.Helper()
	data, err := os.ReadFile("../examples/two-sources.yaml")
	require.NoError(t, err)
	ns, _, err := topology.Load("two-sources.yaml", data)
	require.NoError(t, err)
	return ns
}

func plan(t *testing.T, a topology.Admin, want *topology.Namespace) *topology.Plan {
	t.Helper()
	live, err := topology.Fetch(testCtx(t), a, want)
	require.NoError(t, err)
	return topology.Diff(want, live)
}

func TestApplyTwiceOnTheEmulator(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := testCtx(t)
	want := loadExample(t)

	p := plan(t, tb.admin, want)
	require.Len(t, p.Changes, 7)
	_, err := topology.Apply(ctx, tb.admin, p, nil)
	require.NoError(t, err)

	p = plan(t, tb.admin, want)
	var out bytes.Buffer
	require.NoError(t, p.Write(&out))
	require.True(t, p.Empty(), out.String())

	// What the broker holds is what the file says.
	rules, err := tb.admin.ListRules(ctx, "payments-api", "checkout-fwd")
	require.NoError(t, err)
	require.Len(t, rules, 1, "the forwarding subscription has no $Default rule")
	require.Equal(t, "sessionid", rules[0].Name)
	subs, err := tb.admin.ListSubscriptions(ctx, "checkout-seq")
	require.NoError(t, err)
	require.Len(t, subs, 1)
	require.True(t, *subs[0].Props.RequiresSession)
	require.Equal(t, "PT1M", contract.FormatDuration(*subs[0].Props.LockDuration))
	fwd, err := tb.admin.ListSubscriptions(ctx, "orders-api")
	require.NoError(t, err)
	for _, s := range fwd {
		if s.Name == "checkout-fwd" {
			require.Equal(t, "checkout-seq", *s.Props.ForwardTo)
		}
	}
}

func TestPlanShowsDriftOnTheEmulator(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := testCtx(t)
	_, err := topology.Apply(ctx, tb.admin, plan(t, tb.admin, loadExample(t)), nil)
	require.NoError(t, err)

	// Someone changes the worker subscription and a rule by hand.
	w := &topology.Subscription{Name: "workers", Props: topology.Properties{MaxDeliveryCount: ptr(int32(3))}}
	require.NoError(t, tb.admin.UpdateSubscription(ctx, "checkout-seq", w))
	require.NoError(t, tb.admin.UpdateRule(ctx, "orders-api", "checkout-fwd", &topology.Rule{
		Name: "sessionid", Filter: topology.Filter{SQL: "EXISTS(user.SessionName)"}, Action: "SET sys.SessionId = user.SessionName",
	}))
	require.NoError(t, tb.admin.CreateQueue(ctx, &topology.Queue{Name: "stray"}))

	p := plan(t, tb.admin, loadExample(t))
	var out bytes.Buffer
	require.NoError(t, p.Write(&out))
	require.Equal(t, `~ update subscription checkout-seq/Subscriptions/workers
    maxDeliveryCount: 3 → 10
~ update rule orders-api/Subscriptions/checkout-fwd/Rules/sessionid
    filter: sql "EXISTS(user.SessionName)" → sql "EXISTS(user.SessionName) AND EXISTS(user.TransactionId) AND EXISTS(user.InstanceId)"
    action: "SET sys.SessionId = user.SessionName" → "SET sys.SessionId = user.SessionName + '_' + user.TransactionId + '_' + user.InstanceId"
- delete queue stray (needs --prune)
Plan: 0 to create, 2 to update, 0 to replace, 1 to delete.
`, out.String())

	_, err = topology.Apply(ctx, tb.admin, p, &topology.ApplyOptions{Prune: true})
	require.NoError(t, err)
	require.True(t, plan(t, tb.admin, loadExample(t)).Empty())
}

func TestReplaceOnTheEmulator(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := testCtx(t)
	v1, _, err := topology.Load("a.yaml", []byte("queues: [{name: q, requiresSession: false, lockDuration: PT30S}]\n"))
	require.NoError(t, err)
	_, err = topology.Apply(ctx, tb.admin, plan(t, tb.admin, v1), nil)
	require.NoError(t, err)

	v2, _, err := topology.Load("a.yaml", []byte("queues: [{name: q, requiresSession: true, lockDuration: PT30S}]\n"))
	require.NoError(t, err)
	_, err = topology.Apply(ctx, tb.admin, plan(t, tb.admin, v2), nil)
	require.ErrorIs(t, err, topology.ErrSkipped)
	_, err = topology.Apply(ctx, tb.admin, plan(t, tb.admin, v2), &topology.ApplyOptions{Prune: true})
	require.NoError(t, err)
	require.True(t, plan(t, tb.admin, v2).Empty())
}

// TestMessagesAreForwardedUnderTheirSessionID publishes to both source topics of the
// example and receives from the worker subscription.
func TestMessagesAreForwardedUnderTheirSessionID(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := testCtx(t)
	_, err := topology.Apply(ctx, tb.admin, plan(t, tb.admin, loadExample(t)), nil)
	require.NoError(t, err)

	client := tb.srv.Client

	send := func(topic string, props map[string]any, body string) {
		s, err := client.NewSender(topic, nil)
		require.NoError(t, err)
		defer s.Close(ctx)
		require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte(body), ApplicationProperties: props}, nil))
	}
	send("orders-api", map[string]any{"SessionName": "checkout", "TransactionId": "t-1", "InstanceId": "i-9", "Sequence": int64(1)}, "order")
	send("payments-api", map[string]any{"SessionName": "checkout", "TransactionId": "t-1", "InstanceId": "i-9", "Sequence": int64(2)}, "payment")
	send("orders-api", map[string]any{"SessionName": "checkout", "TransactionId": "t-2"}, "no instance id")
	send("payments-api", map[string]any{"Other": "x"}, "unrelated")

	acceptCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	r, err := client.AcceptNextSessionForSubscription(acceptCtx, "checkout-seq", "workers", nil)
	require.NoError(t, err, "the messages were not forwarded to checkout-seq/workers")
	defer r.Close(ctx)
	require.Equal(t, "checkout_t-1_i-9", r.SessionID())

	var bodies []string
	for len(bodies) < 2 {
		msgs, err := r.ReceiveMessages(ctx, 2, nil)
		require.NoError(t, err)
		for _, m := range msgs {
			require.Equal(t, "checkout_t-1_i-9", *m.SessionID)
			bodies = append(bodies, string(m.Body))
			require.NoError(t, r.CompleteMessage(ctx, m, nil))
		}
	}
	require.ElementsMatch(t, []string{"order", "payment"}, bodies)

	// The messages lacking a property were not forwarded: no other session is waiting.
	acceptCtx2, cancel2 := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel2()
	_, err = client.AcceptNextSessionForSubscription(acceptCtx2, "checkout-seq", "workers", nil)
	require.Error(t, err)
	// And the audit subscription, which has the $Default rule, saw both orders.
	audit, err := client.NewReceiverForSubscription("orders-api", "audit", nil)
	require.NoError(t, err)
	defer audit.Close(ctx)
	peeked, err := audit.PeekMessages(ctx, 10, nil)
	require.NoError(t, err)
	require.Len(t, peeked, 2)
}

func ptr[T any](v T) *T { return &v }

func TestConformance(t *testing.T) {
	t.Parallel()
	topologytest.Exercise(t, func(t *testing.T) topology.Admin { return setup(t).admin })
}

// TestGitHubExampleRoutesByOrderingScope provisions examples/github-webhooks.yaml and
// checks that each bot's worker subscription gets the events under the session id of its
// ordering scope.
func TestGitHubExampleRoutesByOrderingScope(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := testCtx(t)
	data, err := os.ReadFile("../examples/github-webhooks.yaml")
	require.NoError(t, err)
	want, _, err := topology.Load("github-webhooks.yaml", data)
	require.NoError(t, err)
	_, err = topology.Apply(ctx, tb.admin, plan(t, tb.admin, want), nil)
	require.NoError(t, err)

	client := tb.srv.Client
	s, err := client.NewSender("webhooks", nil)
	require.NoError(t, err)
	defer s.Close(ctx)
	for _, props := range []map[string]any{
		{"Owner": "octocat", "Repo": "hello", "EventType": "pull_request_review", "EntityType": "pull_request", "EntityId": int64(12)},
		{"Owner": "octocat", "Repo": "hello", "EventType": "push"},
	} {
		require.NoError(t, s.SendMessage(ctx, &azservicebus.Message{Body: []byte(props["EventType"].(string)), ApplicationProperties: props}, nil))
	}

	// sessions drains the session-enabled worker subscription of topic: session id → bodies.
	sessions := func(topic string) map[string][]string {
		got := map[string][]string{}
		for {
			actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			r, err := client.AcceptNextSessionForSubscription(actx, topic, "workers", nil)
			cancel()
			if err != nil {
				return got
			}
			msgs, err := r.ReceiveMessages(ctx, 10, nil)
			require.NoError(t, err)
			for _, m := range msgs {
				got[r.SessionID()] = append(got[r.SessionID()], string(m.Body))
				require.NoError(t, r.CompleteMessage(ctx, m, nil))
			}
			require.NoError(t, r.Close(ctx))
		}
	}
	require.Equal(t, map[string][]string{
		"octocat/hello/pull_request/12": {"pull_request_review"},
		"octocat/hello/repository":      {"push"},
	}, sessions("task-tactician-seq"))
	require.Equal(t, map[string][]string{"octocat/hello/repository": {"push"}}, sessions("deploy-coordinator-seq"))

	r, err := client.NewReceiverForSubscription("notifications-seq", "workers", nil)
	require.NoError(t, err)
	defer r.Close(ctx)
	peeked, err := r.PeekMessages(ctx, 10, nil)
	require.NoError(t, err)
	require.Len(t, peeked, 2)
	for _, m := range peeked {
		require.Nil(t, m.SessionID)
	}
}

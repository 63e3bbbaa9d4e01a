package topologytest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/topology"
)

// Exercise is the conformance suite of topology.Admin: newAdmin returns an Admin over an
// empty namespace. It runs against Fake and against topology/sbadmin on the emulator, so
// that tests written on the fake hold on a real namespace.
func Exercise(t *testing.T, newAdmin func(t *testing.T) topology.Admin) {
	t.Helper()
	ctx := func(t *testing.T) context.Context {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		return c
	}
	dur := func(d time.Duration) *time.Duration { return &d }
	i32 := func(v int32) *int32 { return &v }
	str := func(s string) *string { return &s }
	yes := true

	t.Run("QueueCreateUpdateDelete", func(t *testing.T) {
		t.Parallel()
		a, c := newAdmin(t), ctx(t)
		require.NoError(t, a.CreateQueue(c, &topology.Queue{Name: "target"}))
		require.NoError(t, a.CreateQueue(c, &topology.Queue{Name: "jobs", Props: topology.Properties{
			LockDuration: dur(30 * time.Second), MaxDeliveryCount: i32(7), RequiresSession: &yes, ForwardTo: str("target"),
		}}))
		queues, err := a.ListQueues(c)
		require.NoError(t, err)
		require.Len(t, queues, 2)
		var jobs *topology.Queue
		for _, q := range queues {
			if q.Name == "jobs" {
				jobs = q
			}
		}
		require.NotNil(t, jobs)
		require.Equal(t, 30*time.Second, *jobs.Props.LockDuration)
		require.Equal(t, int32(7), *jobs.Props.MaxDeliveryCount)
		require.True(t, *jobs.Props.RequiresSession)
		require.Equal(t, "target", *jobs.Props.ForwardTo, "forwardTo reads back as the entity name")

		// Update changes what it sets and keeps the rest.
		require.NoError(t, a.UpdateQueue(c, &topology.Queue{Name: "jobs", Props: topology.Properties{MaxDeliveryCount: i32(3)}}))
		queues, err = a.ListQueues(c)
		require.NoError(t, err)
		for _, q := range queues {
			if q.Name == "jobs" {
				require.Equal(t, int32(3), *q.Props.MaxDeliveryCount)
				require.Equal(t, 30*time.Second, *q.Props.LockDuration)
			}
		}
		require.NoError(t, a.DeleteQueue(c, "jobs"))
		require.Error(t, a.DeleteQueue(c, "jobs"))
		require.Error(t, a.UpdateQueue(c, &topology.Queue{Name: "jobs"}))
		require.Error(t, a.CreateQueue(c, &topology.Queue{Name: "target"}), "a duplicate")
	})

	t.Run("DefaultsAreReported", func(t *testing.T) {
		t.Parallel()
		a, c := newAdmin(t), ctx(t)
		require.NoError(t, a.CreateQueue(c, &topology.Queue{Name: "q"}))
		queues, err := a.ListQueues(c)
		require.NoError(t, err)
		p := queues[0].Props
		require.Equal(t, time.Minute, *p.LockDuration)
		require.Equal(t, int32(10), *p.MaxDeliveryCount)
		require.False(t, *p.RequiresSession)
		require.False(t, *p.DeadLetteringOnMessageExpiration)
	})

	t.Run("TopicsSubscriptionsAndRules", func(t *testing.T) {
		t.Parallel()
		a, c := newAdmin(t), ctx(t)
		require.NoError(t, a.CreateTopic(c, &topology.Topic{Name: "events", Props: topology.Properties{DefaultMessageTimeToLive: dur(24 * time.Hour)}}))
		require.NoError(t, a.CreateTopic(c, &topology.Topic{Name: "seq"}))
		topics, err := a.ListTopics(c)
		require.NoError(t, err)
		require.Len(t, topics, 2)

		// Without rules: the $Default rule.
		require.NoError(t, a.CreateSubscription(c, "events", &topology.Subscription{Name: "all"}))
		rules, err := a.ListRules(c, "events", "all")
		require.NoError(t, err)
		require.Len(t, rules, 1)
		require.Equal(t, topology.DefaultRuleName, rules[0].Name)
		require.Equal(t, "true", topology.FilterString(rules[0].Filter))

		// With rules: exactly those.
		fwd := &topology.Subscription{Name: "fwd", Props: topology.Properties{ForwardTo: str("seq"), MaxDeliveryCount: i32(4)},
			Rules: []*topology.Rule{
				{Name: "sid", Filter: topology.Filter{SQL: "EXISTS(user.A)"}, Action: "SET sys.SessionId = user.A"},
				{Name: "corr", Filter: topology.Filter{Correlation: &topology.Correlation{Subject: str("s"), Properties: map[string]any{"n": int64(1)}}}},
			}}
		require.NoError(t, a.CreateSubscription(c, "events", fwd))
		rules, err = a.ListRules(c, "events", "fwd")
		require.NoError(t, err)
		require.Len(t, rules, 2)
		require.Equal(t, "sid", rules[0].Name)
		require.Equal(t, "EXISTS(user.A)", rules[0].Filter.SQL)
		require.Equal(t, "SET sys.SessionId = user.A", rules[0].Action)
		require.Equal(t, `correlation {subject="s", user.n=1}`, topology.FilterString(rules[1].Filter))

		subs, err := a.ListSubscriptions(c, "events")
		require.NoError(t, err)
		require.Len(t, subs, 2)
		for _, s := range subs {
			if s.Name == "fwd" {
				require.Equal(t, "seq", *s.Props.ForwardTo)
				require.Equal(t, int32(4), *s.Props.MaxDeliveryCount)
			}
		}

		require.NoError(t, a.UpdateSubscription(c, "events", &topology.Subscription{Name: "fwd", Props: topology.Properties{LockDuration: dur(2 * time.Minute)}}))
		require.NoError(t, a.UpdateRule(c, "events", "fwd", &topology.Rule{Name: "sid", Filter: topology.Filter{SQL: "EXISTS(user.B)"}}))
		require.NoError(t, a.CreateRule(c, "events", "fwd", &topology.Rule{Name: "extra"}))
		require.Error(t, a.CreateRule(c, "events", "fwd", &topology.Rule{Name: "extra"}), "a duplicate")
		require.NoError(t, a.DeleteRule(c, "events", "fwd", "corr"))
		rules, err = a.ListRules(c, "events", "fwd")
		require.NoError(t, err)
		require.Len(t, rules, 2)
		require.Equal(t, "EXISTS(user.B)", rules[0].Filter.SQL)
		require.Empty(t, rules[0].Action)
		subs, err = a.ListSubscriptions(c, "events")
		require.NoError(t, err)
		for _, s := range subs {
			if s.Name == "fwd" {
				require.Equal(t, 2*time.Minute, *s.Props.LockDuration)
				require.Equal(t, int32(4), *s.Props.MaxDeliveryCount, "kept by the update")
				require.Equal(t, "seq", *s.Props.ForwardTo, "kept by the update")
			}
		}

		require.NoError(t, a.DeleteSubscription(c, "events", "all"))
		require.Error(t, a.DeleteSubscription(c, "events", "all"))
		require.NoError(t, a.DeleteTopic(c, "events"))
		_, err = a.ListSubscriptions(c, "events")
		require.Error(t, err)
	})
}

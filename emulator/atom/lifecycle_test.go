package atom_test

import (
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

func TestRecreatedEntitiesStartFresh(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	_, err := tb.client.CreateQueue(c, "q", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{UserMetadata: ptr("old")}})
	require.NoError(t, err)
	_, err = tb.client.CreateTopic(c, "t", nil)
	require.NoError(t, err)
	_, err = tb.client.CreateSubscription(c, "t", "s", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
		UserMetadata: ptr("old sub"),
		DefaultRule:  &admin.RuleProperties{Name: "p", Filter: &admin.SQLFilter{Expression: "a = @v", Parameters: map[string]any{"v": int64(1)}}},
	}})
	require.NoError(t, err)

	// Deleted through the API and recreated through the API.
	_, err = tb.client.DeleteQueue(c, "q", nil)
	require.NoError(t, err)
	_, err = tb.client.CreateQueue(c, "q", nil)
	require.NoError(t, err)
	q, err := tb.client.GetQueue(c, "q", nil)
	require.NoError(t, err)
	require.Nil(t, q.UserMetadata)

	// Deleted and recreated behind the API's back (as a config file would).
	require.NoError(t, tb.b.DeleteTopic("t"))
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscriptionWithRules("t", "s", broker.EntityProperties{}, []broker.Rule{
		{Name: "p", FilterType: broker.FilterSQL, SQLExpression: "a = 1"},
	}))
	s, err := tb.client.GetSubscription(c, "t", "s", nil)
	require.NoError(t, err)
	require.Nil(t, s.UserMetadata)
	r, err := tb.client.GetRule(c, "t", "s", "p", nil)
	require.NoError(t, err)
	require.Equal(t, &admin.SQLFilter{Expression: "a = 1"}, r.Filter)
}

func TestConcurrentCreatesOfOneName(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	const n = 8
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[int]int{}
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := tb.client.CreateQueue(c, "contended", nil)
			status := http.StatusCreated
			if err != nil {
				var re *azcore.ResponseError
				if !errors.As(err, &re) {
					status = -1
				} else {
					status = re.StatusCode
				}
			}
			mu.Lock()
			statuses[status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Equal(t, map[int]int{http.StatusCreated: 1, http.StatusConflict: n - 1}, statuses)
}

package atom_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/atom"
	"github.com/seqbus/seqbus/emulator/broker"
)

// BenchmarkHandlerGetQueue measures the handler alone (token check, broker read, XML).
func BenchmarkHandlerGetQueue(b *testing.B) {
	br := broker.New(broker.Config{})
	defer br.Close()
	require.NoError(b, br.CreateQueue("q", broker.EntityProperties{}))
	h := atom.NewHandler(br, atom.Config{KeyName: keyName, Key: key})
	auth := sign(keyName, key, "https://localhost/q?api-version=2024-05", time.Now().Add(time.Hour))
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodGet, "http://localhost/q?api-version=2024-05", nil)
		req.Header.Set("Authorization", auth)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d", rec.Code)
		}
	}
}

// BenchmarkAdminGetQueue is one GetQueue of the real admin client over loopback HTTP.
func BenchmarkAdminGetQueue(b *testing.B) {
	tb := setup(b)
	_, err := tb.client.CreateQueue(b.Context(), "q", nil)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		q, err := tb.client.GetQueue(b.Context(), "q", nil)
		if err != nil || q == nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAdminListQueues lists 100 queues (one page) with the real admin client.
func BenchmarkAdminListQueues(b *testing.B) {
	tb := setup(b)
	for i := range 100 {
		require.NoError(b, tb.b.CreateQueue(fmt.Sprintf("q%03d", i), broker.EntityProperties{}))
	}
	b.ReportAllocs()
	for b.Loop() {
		pager := tb.client.NewListQueuesPager(&admin.ListQueuesOptions{MaxPageSize: 100})
		n := 0
		for pager.More() {
			page, err := pager.NextPage(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			n += len(page.Queues)
		}
		if n != 100 {
			b.Fatalf("listed %d queues", n)
		}
	}
}

// BenchmarkAdminCreateRuleWithParameters creates (and deletes) a parameterized SQL
// rule with an action through the real admin client: XML, parameter typing and the
// broker's SQL compilation.
func BenchmarkAdminCreateRuleWithParameters(b *testing.B) {
	tb := setup(b)
	_, err := tb.client.CreateTopic(b.Context(), "t", nil)
	require.NoError(b, err)
	_, err = tb.client.CreateSubscription(b.Context(), "t", "s", nil)
	require.NoError(b, err)
	opts := &admin.CreateRuleOptions{
		Name: ptr("r"),
		Filter: &admin.SQLFilter{
			Expression: "EXISTS(user.SessionName) AND user.amount > @min AND sys.Label IN (@a, @b)",
			Parameters: map[string]any{"@min": int64(100), "@a": "order", "@b": "refund"},
		},
		Action: &admin.SQLAction{Expression: "SET sys.SessionId = user.SessionName + '_' + @suffix", Parameters: map[string]any{"@suffix": "x"}},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tb.client.CreateRule(b.Context(), "t", "s", opts); err != nil {
			b.Fatal(err)
		}
		if _, err := tb.client.DeleteRule(b.Context(), "t", "s", "r", nil); err != nil {
			b.Fatal(err)
		}
	}
}

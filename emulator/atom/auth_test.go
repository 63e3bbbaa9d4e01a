package atom_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/admintransport"
	"github.com/seqbus/seqbus/emulator/broker"
)

func TestBadKeyIsUnauthorized(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	bad := tb.newClient(t, connString(tb.srv, "wrong-key"))

	_, err := bad.CreateQueue(c, "q", nil)
	requireStatus(t, err, http.StatusUnauthorized)
	_, err = bad.GetQueue(c, "q", nil)
	requireStatus(t, err, http.StatusUnauthorized)
	_, err = bad.GetNamespaceProperties(c, nil)
	requireStatus(t, err, http.StatusUnauthorized)
	_, err = bad.NewListQueuesPager(nil).NextPage(c)
	requireStatus(t, err, http.StatusUnauthorized)
	require.Empty(t, tb.b.ListQueues(), "an unauthorized create creates nothing")
}

func TestSASTokenChecks(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateQueue("q", broker.EntityProperties{}))
	host := "https://" + tb.srv.Listener.Addr().String()
	hour := time.Now().Add(time.Hour)
	tests := []struct {
		name   string
		path   string
		auth   string
		status int
	}{
		{"namespace token", "/q", sign(keyName, key, host+"/", hour), http.StatusOK},
		{"entity token as the SDK signs it", "/q?api-version=2024-05", sign(keyName, key, host+"/q?api-version=2024-05", hour), http.StatusOK},
		{"token for the host only", "/q", sign(keyName, key, tb.srv.Listener.Addr().String(), hour), http.StatusOK},
		{"no header", "/q", "", http.StatusUnauthorized},
		{"not a SAS token", "/q", "Bearer abc", http.StatusUnauthorized},
		{"missing fields", "/q", "SharedAccessSignature sr=x&se=1", http.StatusUnauthorized},
		{"wrong key", "/q", sign(keyName, "other", host+"/", hour), http.StatusUnauthorized},
		{"unknown key name", "/q", sign("Listener", key, host+"/", hour), http.StatusUnauthorized},
		{"expired", "/q", sign(keyName, key, host+"/", time.Now().Add(-time.Minute)), http.StatusUnauthorized},
		{"other entity", "/q", sign(keyName, key, host+"/other", hour), http.StatusUnauthorized},
		{"prefix of the name is not a parent", "/q", sign(keyName, key, host+"/q2", hour), http.StatusUnauthorized},
		{"tampered signature", "/q", strings.Replace(sign(keyName, key, host+"/", hour), "sig=", "sig=A", 1), http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			status, body := tb.raw(t, http.MethodGet, tt.path, tt.auth, "")
			require.Equal(t, tt.status, status, body)
			if status == http.StatusUnauthorized {
				require.Contains(t, body, "<Error><Code>401</Code><Detail>")
			}
		})
	}
}

func TestNamespaceProperties(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	props, err := tb.client.GetNamespaceProperties(ctx(t), nil)
	require.NoError(t, err)
	require.Equal(t, "testns", props.Name)
	require.Equal(t, "Standard", props.SKU)
	require.Nil(t, props.MessagingUnits)
	require.Equal(t, tb.clk.Now().UTC(), props.CreatedTime)
	require.Equal(t, tb.clk.Now().UTC(), props.ModifiedTime)
}

func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	tok := tb.token(key)
	const queueBody = `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
		`<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">%s</QueueDescription></content></entry>`
	tests := []struct {
		name, method, path, body string
		status                   int
	}{
		{"not XML", http.MethodPut, "/q", "{json}", http.StatusBadRequest},
		{"truncated XML", http.MethodPut, "/q", `<entry xmlns="http://www.w3.org/2005/Atom"><content>`, http.StatusBadRequest},
		{"entry without content", http.MethodPut, "/q", `<entry xmlns="http://www.w3.org/2005/Atom"></entry>`, http.StatusBadRequest},
		{"bad integer", http.MethodPut, "/q", strings.Replace(queueBody, "%s", "<MaxDeliveryCount>many</MaxDeliveryCount>", 1), http.StatusBadRequest},
		{"bad boolean", http.MethodPut, "/q", strings.Replace(queueBody, "%s", "<RequiresSession>perhaps</RequiresSession>", 1), http.StatusBadRequest},
		{"subscription body at a queue address", http.MethodPut, "/q", `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><SubscriptionDescription/></content></entry>`, http.StatusBadRequest},
		{"queue body at a subscription address", http.MethodPut, "/t/Subscriptions/s", strings.Replace(queueBody, "%s", "", 1), http.StatusBadRequest},
		{"invalid entity name", http.MethodPut, "/bad$name", strings.Replace(queueBody, "%s", "", 1), http.StatusBadRequest},
		{"bad $top", http.MethodGet, "/$Resources/Queues?$top=x", "", http.StatusBadRequest},
		{"bad $skip", http.MethodGet, "/$Resources/Queues?$skip=-1", "", http.StatusBadRequest},
		{"unknown resource", http.MethodGet, "/$Resources/Widgets", "", http.StatusNotFound},
		{"POST", http.MethodPost, "/q", "", http.StatusMethodNotAllowed},
		{"queue created from a minimal body", http.MethodPut, "/q", strings.Replace(queueBody, "%s", "<LockDuration>PT5S</LockDuration>", 1), http.StatusCreated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := tb.raw(t, tt.method, tt.path, tok, tt.body)
			require.Equal(t, tt.status, status, body)
			if status >= 400 {
				require.Contains(t, body, "<Error><Code>")
			}
		})
	}
	q, err := tb.client.GetQueue(ctx(t), "q", nil)
	require.NoError(t, err)
	require.Equal(t, "PT5S", *q.LockDuration)
	require.Equal(t, []string{"q"}, listQueueNames(t, tb, 0))
}

func TestAPIVersion2021(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	opts := &admin.ClientOptions{}
	opts.APIVersion = "2021-05"
	opts.Transport = tb.hc
	opts.Retry.MaxRetries = -1
	client, err := admintransport.NewAdminClient(tb.connStr, opts)
	require.NoError(t, err)
	_, err = client.CreateQueue(c, "q", nil)
	require.NoError(t, err)
	got, err := client.GetQueue(c, "q", nil)
	require.NoError(t, err)
	require.NotNil(t, got)
}

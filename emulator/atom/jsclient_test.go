package atom_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

// The JavaScript admin client parses responses with fast-xml-parser, which
// decodes only the named XML entities and reads the counts of CountDetails
// through the one namespace prefix declared on it. These tests pin the
// response details it depends on; the JavaScript conformance test in
// package emulator runs the client itself.

func TestRuleExpressionsUseNamedEntities(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscription("t", "s", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateRule("t", "s", broker.Rule{Name: "r", FilterType: broker.FilterSQL,
		SQLExpression: "color = 'red' AND size > 2", ActionSQLExpression: `SET note = "x"`}))
	status, body := tb.raw(t, http.MethodGet, "/t/Subscriptions/s/Rules/r?api-version=2021-05", tb.token(key), "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "color = &apos;red&apos; AND size &gt; 2")
	require.Contains(t, body, "SET note = &quot;x&quot;")
	require.NotContains(t, body, "&#", "no numeric character references")
}

func TestCountDetailsDeclareTheirPrefix(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateQueue("q", broker.EntityProperties{}))
	status, body := tb.raw(t, http.MethodGet, "/q?api-version=2021-05", tb.token(key), "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `<CountDetails xmlns:d2p1="http://schemas.microsoft.com/netservices/2011/06/servicebus"><d2p1:ActiveMessageCount>0</d2p1:ActiveMessageCount>`)
}

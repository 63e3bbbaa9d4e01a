package atom_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

// topicWithSub creates topic t with subscription s (and its $Default rule).
func topicWithSub(t *testing.T, tb *bundle) {
	t.Helper()
	c := ctx(t)
	_, err := tb.client.CreateTopic(c, "t", nil)
	require.NoError(t, err)
	_, err = tb.client.CreateSubscription(c, "t", "s", nil)
	require.NoError(t, err)
}

func TestRuleKindsRoundTrip(t *testing.T) {
	t.Parallel()
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		filter admin.RuleFilter
		action admin.RuleAction
		// want is what the admin client reads back (nil: the same as written).
		wantFilter admin.RuleFilter
		// stored is the broker's view of the rule.
		stored broker.Rule
	}{
		{
			name: "true filter", filter: &admin.TrueFilter{},
			stored: broker.Rule{FilterType: broker.FilterTrue},
		},
		{
			name: "nil filter is a true filter", filter: nil, wantFilter: &admin.TrueFilter{},
			stored: broker.Rule{FilterType: broker.FilterTrue},
		},
		{
			name: "false filter", filter: &admin.FalseFilter{},
			stored: broker.Rule{FilterType: broker.FilterFalse},
		},
		{
			name: "sql filter", filter: &admin.SQLFilter{Expression: "color = 'red' AND size > 3"},
			stored: broker.Rule{FilterType: broker.FilterSQL, SQLExpression: "color = 'red' AND size > 3"},
		},
		{
			name: "sql filter with parameters",
			filter: &admin.SQLFilter{Expression: "color = @color AND size > @size AND big = @big AND w < @w AND note <> '@color' AND at = @at", Parameters: map[string]any{
				"@color": "it's red", "size": int64(3), "big": true, "w": 1.5, "at": when,
			}},
			stored: broker.Rule{FilterType: broker.FilterSQL,
				SQLExpression: "color = @color AND size > @size AND big = @big AND w < @w AND note <> '@color' AND at = @at",
				SQLParameters: map[string]any{"@color": "it's red", "size": int64(3), "big": true, "w": 1.5, "at": when}},
		},
		{
			name: "correlation filter",
			filter: &admin.CorrelationFilter{
				ContentType: ptr("application/json"), CorrelationID: ptr("corr"), MessageID: ptr("mid"),
				ReplyTo: ptr("rt"), ReplyToSessionID: ptr("rts"), SessionID: ptr("sid"), Subject: ptr("subj"), To: ptr("to"),
				ApplicationProperties: map[string]any{"color": "red", "n": int64(7), "ok": true, "f": 2.5, "at": when},
			},
			stored: broker.Rule{FilterType: broker.FilterCorrelation, Correlation: &broker.CorrelationFilter{
				ContentType: "application/json", CorrelationID: "corr", MessageID: "mid", ReplyTo: "rt",
				ReplyToSessionID: "rts", SessionID: "sid", Label: "subj", To: "to",
				Properties: map[string]any{"color": "red", "n": int64(7), "ok": true, "f": 2.5, "at": when},
			}},
		},
		{
			name: "sql action", filter: &admin.TrueFilter{}, action: &admin.SQLAction{Expression: "SET sys.Label = 'x'"},
			stored: broker.Rule{FilterType: broker.FilterTrue, ActionSQLExpression: "SET sys.Label = 'x'"},
		},
		{
			name: "sql action with parameters", filter: &admin.FalseFilter{},
			action: &admin.SQLAction{Expression: "SET prio = @p", Parameters: map[string]any{"p": int64(5)}},
			stored: broker.Rule{FilterType: broker.FilterFalse, ActionSQLExpression: "SET prio = @p", ActionParameters: map[string]any{"p": int64(5)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			topicWithSub(t, tb)
			c := ctx(t)
			want := admin.RuleProperties{Name: "r", Filter: tt.filter, Action: tt.action}
			if tt.wantFilter != nil {
				want.Filter = tt.wantFilter
			}

			created, err := tb.client.CreateRule(c, "t", "s", &admin.CreateRuleOptions{Name: ptr("r"), Filter: tt.filter, Action: tt.action})
			require.NoError(t, err)
			require.Equal(t, want, created.RuleProperties)

			got, err := tb.client.GetRule(c, "t", "s", "r", nil)
			require.NoError(t, err)
			require.NotNil(t, got)
			require.Equal(t, want, got.RuleProperties)

			stored, err := tb.b.GetRule("t", "s", "r")
			require.NoError(t, err)
			tt.stored.Name = "r"
			require.Equal(t, tt.stored, stored)

			var listed []admin.RuleProperties
			pager := tb.client.NewListRulesPager("t", "s", nil)
			for pager.More() {
				page, err := pager.NextPage(c)
				require.NoError(t, err)
				listed = append(listed, page.Rules...)
			}
			require.Equal(t, []admin.RuleProperties{{Name: "$Default", Filter: &admin.TrueFilter{}}, want}, listed)

			// Update to something else and back is visible.
			upd := admin.RuleProperties{Name: "r", Filter: &admin.SQLFilter{Expression: "x = 1"}, Action: &admin.SQLAction{Expression: "SET y = 2"}}
			updated, err := tb.client.UpdateRule(c, "t", "s", upd)
			require.NoError(t, err)
			require.Equal(t, upd, updated.RuleProperties)
			got, err = tb.client.GetRule(c, "t", "s", "r", nil)
			require.NoError(t, err)
			require.Equal(t, upd, got.RuleProperties)

			_, err = tb.client.DeleteRule(c, "t", "s", "r", nil)
			require.NoError(t, err)
			gone, err := tb.client.GetRule(c, "t", "s", "r", nil)
			require.NoError(t, err)
			require.Nil(t, gone)
		})
	}
}

func TestRulesRouteMessages(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	_, err := tb.client.CreateTopic(c, "t", nil)
	require.NoError(t, err)
	subs := map[string]*admin.RuleProperties{
		"all":   nil,
		"none":  {Filter: &admin.FalseFilter{}},
		"red":   {Name: "red", Filter: &admin.CorrelationFilter{ApplicationProperties: map[string]any{"color": "red"}}},
		"label": {Name: "lbl", Filter: &admin.CorrelationFilter{Subject: ptr("invoice")}},
	}
	for name, rule := range subs {
		_, err := tb.client.CreateSubscription(c, "t", name, &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{DefaultRule: rule}})
		require.NoError(t, err)
	}
	red := amqp.NewMessage([]byte("red"))
	red.ApplicationProperties = map[string]any{"color": "red"}
	invoice := amqp.NewMessage([]byte("invoice"))
	invoice.Properties = &amqp.MessageProperties{Subject: ptr("invoice")}
	send(t, tb.lookup(t, "t"), red, invoice, amqp.NewMessage([]byte("plain")))

	want := map[string]int32{"all": 3, "none": 0, "red": 1, "label": 1}
	for name, n := range want {
		rt, err := tb.client.GetSubscriptionRuntimeProperties(c, "t", name, nil)
		require.NoError(t, err)
		require.Equal(t, n, rt.ActiveMessageCount, "subscription %s", name)
	}

	// A rule added later takes effect for later messages.
	_, err = tb.client.DeleteRule(c, "t", "none", "$Default", nil)
	require.NoError(t, err)
	_, err = tb.client.CreateRule(c, "t", "none", &admin.CreateRuleOptions{Filter: &admin.TrueFilter{}}) // no name: $Default
	require.NoError(t, err)
	send(t, tb.lookup(t, "t"), amqp.NewMessage([]byte("late")))
	rt, err := tb.client.GetSubscriptionRuntimeProperties(c, "t", "none", nil)
	require.NoError(t, err)
	require.Equal(t, int32(1), rt.ActiveMessageCount)
	rule, err := tb.client.GetRule(c, "t", "none", "$Default", nil)
	require.NoError(t, err)
	require.NotNil(t, rule)
}

func TestRuleErrors(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	topicWithSub(t, tb)
	c := ctx(t)
	_, err := tb.client.CreateRule(c, "t", "s", &admin.CreateRuleOptions{Name: ptr("r"), Filter: &admin.TrueFilter{}})
	require.NoError(t, err)

	tests := []struct {
		name   string
		call   func() error
		status int
	}{
		{"duplicate", func() error {
			_, err := tb.client.CreateRule(c, "t", "s", &admin.CreateRuleOptions{Name: ptr("r"), Filter: &admin.TrueFilter{}})
			return err
		}, http.StatusConflict},
		{"duplicate $Default without a name", func() error {
			_, err := tb.client.CreateRule(c, "t", "s", &admin.CreateRuleOptions{Filter: &admin.TrueFilter{}})
			return err
		}, http.StatusConflict},
		{"missing subscription", func() error {
			_, err := tb.client.CreateRule(c, "t", "nope", &admin.CreateRuleOptions{Name: ptr("r"), Filter: &admin.TrueFilter{}})
			return err
		}, http.StatusNotFound},
		{"update missing", func() error {
			_, err := tb.client.UpdateRule(c, "t", "s", admin.RuleProperties{Name: "nope", Filter: &admin.TrueFilter{}})
			return err
		}, http.StatusNotFound},
		{"delete missing", func() error { _, err := tb.client.DeleteRule(c, "t", "s", "nope", nil); return err }, http.StatusNotFound},
		{"unknown filter type", func() error {
			_, err := tb.client.CreateRule(c, "t", "s", &admin.CreateRuleOptions{Name: ptr("u"), Filter: &admin.UnknownRuleFilter{
				Type: "MagicFilter", RawXML: []byte(`<Filter xmlns:i="http://www.w3.org/2001/XMLSchema-instance" i:type="MagicFilter"></Filter>`),
			}})
			return err
		}, http.StatusBadRequest},
		{"undefined parameter", func() error {
			_, err := tb.client.CreateRule(c, "t", "s", &admin.CreateRuleOptions{Name: ptr("p"), Filter: &admin.SQLFilter{Expression: "a = @missing"}})
			return err
		}, http.StatusBadRequest},
		{"empty sql filter", func() error {
			_, err := tb.client.CreateRule(c, "t", "s", &admin.CreateRuleOptions{Name: ptr("e"), Filter: &admin.SQLFilter{Expression: "  "}})
			return err
		}, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireStatus(t, tt.call(), tt.status)
		})
	}
	got, err := tb.client.GetRule(c, "t", "s", "nope", nil)
	require.NoError(t, err)
	require.Nil(t, got)
	rules, err := tb.b.ListRules("t", "s")
	require.NoError(t, err)
	require.Len(t, rules, 2, "refused rules were not created")
}

func TestListRulesPages(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	topicWithSub(t, tb)
	c := ctx(t)
	want := []string{"$Default"}
	for _, n := range []string{"r1", "r2", "r3", "r4"} {
		_, err := tb.client.CreateRule(c, "t", "s", &admin.CreateRuleOptions{Name: ptr(n), Filter: &admin.SQLFilter{Expression: "n = '" + n + "'"}})
		require.NoError(t, err)
		want = append(want, n)
	}
	pager := tb.client.NewListRulesPager("t", "s", &admin.ListRulesOptions{MaxPageSize: 2})
	var names []string
	for pages := 0; pager.More(); pages++ {
		require.Less(t, pages, 10)
		page, err := pager.NextPage(c)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Rules), 2)
		for _, r := range page.Rules {
			names = append(names, r.Name)
			if r.Name != "$Default" {
				require.Equal(t, "n = '"+r.Name+"'", r.Filter.(*admin.SQLFilter).Expression)
			}
		}
	}
	require.Equal(t, want, names)
}

func TestRulesFromConfigAreVisible(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	c := ctx(t)
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscriptionWithRules("t", "s", broker.EntityProperties{}, []broker.Rule{
		{Name: "sql", FilterType: broker.FilterSQL, SQLExpression: "a > 1", ActionSQLExpression: "SET b = 2"},
		{Name: "corr", FilterType: broker.FilterCorrelation, Correlation: &broker.CorrelationFilter{
			Label: "l", Properties: map[string]any{"n": float64(3), "s": "x"}, // JSON numbers are float64
		}},
	}))
	sql, err := tb.client.GetRule(c, "t", "s", "sql", nil)
	require.NoError(t, err)
	require.Equal(t, admin.RuleProperties{Name: "sql", Filter: &admin.SQLFilter{Expression: "a > 1"}, Action: &admin.SQLAction{Expression: "SET b = 2"}}, sql.RuleProperties)
	corr, err := tb.client.GetRule(c, "t", "s", "corr", nil)
	require.NoError(t, err)
	require.Equal(t, &admin.CorrelationFilter{Subject: ptr("l"), ApplicationProperties: map[string]any{"n": int64(3), "s": "x"}}, corr.Filter)
	require.Nil(t, corr.Action)
}

func TestRuleXMLHasTypedFilterAndAction(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	topicWithSub(t, tb)
	status, body := tb.raw(t, http.MethodGet, "/t/Subscriptions/s/Rules/$Default?api-version=2024-05", tb.token(key), "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `<Filter i:type="TrueFilter">`)
	require.Contains(t, body, `<Action i:type="EmptyRuleAction">`)
	require.True(t, strings.Contains(body, `xmlns:i="http://www.w3.org/2001/XMLSchema-instance"`))
}

// TestInvalidSQLIsRefusedWithItsPosition: a SQL filter or action the broker cannot
// compile is a 400 whose detail names where the expression goes wrong, and nothing is
// created.
func TestInvalidSQLIsRefusedWithItsPosition(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	topicWithSub(t, tb)
	c := ctx(t)
	tests := []struct {
		name string
		call func() error
		// where is the position the detail must name.
		where string
	}{
		{"rule filter", func() error {
			_, err := tb.client.CreateRule(c, "t", "s", &admin.CreateRuleOptions{Name: ptr("bad"), Filter: &admin.SQLFilter{Expression: "a = = 1"}})
			return err
		}, "line 1, column 5"},
		{"rule action", func() error {
			_, err := tb.client.CreateRule(c, "t", "s", &admin.CreateRuleOptions{Name: ptr("bad"), Filter: &admin.TrueFilter{},
				Action: &admin.SQLAction{Expression: "SET x = 1 +"}})
			return err
		}, "line 1, column 12"},
		{"rule update", func() error {
			_, err := tb.client.UpdateRule(c, "t", "s", admin.RuleProperties{Name: "$Default", Filter: &admin.SQLFilter{Expression: "a >\n (1"}})
			return err
		}, "line 2, column 4"},
		{"subscription default rule", func() error {
			_, err := tb.client.CreateSubscription(c, "t", "bad", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
				DefaultRule: &admin.RuleProperties{Name: "r", Filter: &admin.SQLFilter{Expression: "EXISTS(user.x AND"}},
			}})
			return err
		}, "line 1, column 15"},
	}
	for _, tt := range tests {
		err := tt.call()
		requireStatus(t, err, http.StatusBadRequest)
		require.Contains(t, err.Error(), tt.where, tt.name)
	}
	rules, err := tb.b.ListRules("t", "s")
	require.NoError(t, err)
	require.Len(t, rules, 1)
	require.Equal(t, broker.FilterTrue, rules[0].FilterType, "the failed update left $Default alone")
	_, err = tb.b.GetSubscription("t", "bad")
	require.ErrorIs(t, err, broker.ErrNotFound)
}

// TestRuleParametersChangedOutsideTheAPI: when the broker's rule no longer has the
// parameters written through the API, reads show the broker's values.
func TestRuleParametersChangedOutsideTheAPI(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	topicWithSub(t, tb)
	c := ctx(t)
	filter := &admin.SQLFilter{Expression: "n > @min", Parameters: map[string]any{"@min": int64(5)}}
	_, err := tb.client.CreateRule(c, "t", "s", &admin.CreateRuleOptions{Name: ptr("r"), Filter: filter})
	require.NoError(t, err)
	got, err := tb.client.GetRule(c, "t", "s", "r", nil)
	require.NoError(t, err)
	require.Equal(t, filter, got.Filter)

	require.NoError(t, tb.b.UpdateRule("t", "s", broker.Rule{
		Name: "r", FilterType: broker.FilterSQL, SQLExpression: "n > @min", SQLParameters: map[string]any{"@min": int64(9)},
	}))
	got, err = tb.client.GetRule(c, "t", "s", "r", nil)
	require.NoError(t, err)
	require.Equal(t, &admin.SQLFilter{Expression: "n > @min", Parameters: map[string]any{"@min": int64(9)}}, got.Filter)
}

package atom_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

// ruleBody is a rule PUT as the Python admin client (azure-servicebus 7.8) writes it:
// the xsi prefix is declared on the outer entry, and used on the Filter and Action
// inside the content.
func ruleBody(filterAndAction string) string {
	return `<?xml version='1.0' encoding='utf-8'?>
<entry xmlns="http://www.w3.org/2005/Atom" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><content type="application/xml">` +
		`<RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">` +
		filterAndAction + `<Name>r</Name></RuleDescription></content></entry>`
}

// putRule PUTs rule r of subscription t/s, with filterAndAction, to a fresh handler.
func putRule(t *testing.T, filterAndAction string) (*bundle, int, string) {
	t.Helper()
	tb := setup(t)
	topicWithSub(t, tb)
	status, body := tb.raw(t, http.MethodPut, "/t/Subscriptions/s/Rules/r?api-version=2021-05", tb.token(key), ruleBody(filterAndAction))
	return tb, status, body
}

// TestFilterTypedWithAPrefixDeclaredOnTheEntry: a filter whose xsi prefix is declared
// on the entry keeps its type; it once became a TrueFilter and the subscription got
// every message.
func TestFilterTypedWithAPrefixDeclaredOnTheEntry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want broker.Rule
	}{
		{
			name: "sql filter and action",
			body: `<Filter xsi:type="SqlFilter"><SqlExpression>color = 'red'</SqlExpression><CompatibilityLevel>20</CompatibilityLevel></Filter>` +
				`<Action xsi:type="SqlRuleAction"><SqlExpression>SET tagged = 'yes'</SqlExpression><CompatibilityLevel>20</CompatibilityLevel></Action>`,
			want: broker.Rule{Name: "r", FilterType: broker.FilterSQL, SQLExpression: "color = 'red'", ActionSQLExpression: "SET tagged = 'yes'"},
		},
		{
			name: "correlation filter",
			body: `<Filter xsi:type="CorrelationFilter"><CorrelationId>c1</CorrelationId><Properties><KeyValueOfstringanyType>` +
				`<Key>color</Key><Value xmlns:d6p1="http://www.w3.org/2001/XMLSchema" xsi:type="d6p1:string">red</Value>` +
				`</KeyValueOfstringanyType></Properties></Filter><Action xsi:type="EmptyRuleAction"/>`,
			want: broker.Rule{Name: "r", FilterType: broker.FilterCorrelation, Correlation: &broker.CorrelationFilter{
				CorrelationID: "c1", Properties: map[string]any{"color": "red"},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb, status, body := putRule(t, tt.body)
			require.Equal(t, http.StatusCreated, status, body)
			got, err := tb.b.GetRule("t", "s", "r")
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestUninterpretableFiltersAreRefused: a Filter or Action the handler cannot read
// entirely is refused with 400 naming what it could not read, and no rule is created.
func TestUninterpretableFiltersAreRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, detail string
	}{
		{"undeclared namespace of the type", `<Filter xmlns:q="urn:other" q:type="SqlFilter"><SqlExpression>a = 1</SqlExpression></Filter>`, "xsi:type"},
		{"filter without type", `<Filter><SqlExpression>a = 1</SqlExpression></Filter>`, "xsi:type"},
		{"action without type", `<Filter xsi:type="TrueFilter"/><Action><SqlExpression>SET a = 1</SqlExpression></Action>`, "xsi:type"},
		{"unknown filter type", `<Filter xsi:type="LikeFilter"><SqlExpression>a = 1</SqlExpression></Filter>`, "LikeFilter"},
		{"unknown action type", `<Filter xsi:type="TrueFilter"/><Action xsi:type="ScriptAction"/>`, "ScriptAction"},
		{"unknown element", `<Filter xsi:type="SqlFilter"><SqlExpression>a = 1</SqlExpression><Collation>x</Collation></Filter>`, "Collation"},
		{"correlation field on a sql filter", `<Filter xsi:type="SqlFilter"><SqlExpression>a = 1</SqlExpression><Label>x</Label></Filter>`, "correlation"},
		{"expression on a correlation filter", `<Filter xsi:type="CorrelationFilter"><SqlExpression>a = 1</SqlExpression></Filter>`, "SqlExpression"},
		{"expression on an empty action", `<Filter xsi:type="TrueFilter"/><Action xsi:type="EmptyRuleAction"><SqlExpression>SET a = 1</SqlExpression></Action>`, "EmptyRuleAction"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb, status, body := putRule(t, tt.body)
			require.Equal(t, http.StatusBadRequest, status, body)
			require.True(t, strings.Contains(body, tt.detail), "the error names %s: %s", tt.detail, body)
			_, err := tb.b.GetRule("t", "s", "r")
			require.ErrorIs(t, err, broker.ErrNotFound, "no rule was created")
		})
	}
}

package broker_test

import (
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

// withProps returns a message whose application properties are props.
func withProps(body string, props map[string]any) *amqp.Message {
	m := msg(body)
	m.ApplicationProperties = props
	return m
}

func TestRuleFilters(t *testing.T) {
	t.Parallel()
	red5 := func() *amqp.Message { return withProps("red5", map[string]any{"color": "red", "size": int64(5)}) }
	red2 := func() *amqp.Message { return withProps("red2", map[string]any{"color": "red", "size": int64(2)}) }
	blue := func() *amqp.Message { return withProps("blue", map[string]any{"color": "blue", "size": int64(9)}) }
	n := func(body string, v any) *amqp.Message { return withProps(body, map[string]any{"n": v}) }
	labelled := func() *amqp.Message {
		m := msg("labelled")
		subject, corr := "paint", "c-1"
		m.Properties = &amqp.MessageProperties{Subject: &subject, CorrelationID: corr}
		return m
	}
	tests := []struct {
		name string
		rule broker.Rule
		send []*amqp.Message
		want []string
	}{
		{"true filter", broker.Rule{FilterType: broker.FilterTrue}, []*amqp.Message{red5(), blue()}, []string{"red5", "blue"}},
		{"false filter", broker.Rule{FilterType: broker.FilterFalse}, []*amqp.Message{red5(), blue()}, []string{}},
		{"sql filter", broker.Rule{FilterType: broker.FilterSQL, SQLExpression: "color = 'red' AND size > 3"},
			[]*amqp.Message{red5(), red2(), blue()}, []string{"red5"}},
		{"sql filter with parameters", broker.Rule{FilterType: broker.FilterSQL, SQLExpression: "color = @c AND size > @min",
			SQLParameters: map[string]any{"c": "red", "@min": int64(3)}},
			[]*amqp.Message{red5(), red2(), blue()}, []string{"red5"}},
		{"sql system property", broker.Rule{FilterType: broker.FilterSQL, SQLExpression: "sys.Label = 'paint'"},
			[]*amqp.Message{labelled(), red5()}, []string{"labelled"}},
		{"sql evaluation error is no match", broker.Rule{FilterType: broker.FilterSQL, SQLExpression: "color * 2 = 4"},
			[]*amqp.Message{red5()}, []string{}},
		{"correlation typed: int 5 matches 5 and 5.0, not \"5\"", broker.Rule{FilterType: broker.FilterCorrelation,
			Correlation: &broker.CorrelationFilter{Properties: map[string]any{"n": int64(5)}}},
			[]*amqp.Message{n("int", int64(5)), n("float", 5.0), n("string", "5"), n("six", int64(6)), msg("none")},
			[]string{"int", "float"}},
		{"correlation system properties", broker.Rule{FilterType: broker.FilterCorrelation,
			Correlation: &broker.CorrelationFilter{Label: "paint", CorrelationID: "c-1"}},
			[]*amqp.Message{labelled(), red5()}, []string{"labelled"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
			r := tt.rule
			r.Name = "r"
			require.NoError(t, tb.b.CreateSubscriptionWithRules("t", "s", broker.EntityProperties{}, []broker.Rule{r}))
			send(t, tb.lookup(t, "t"), tt.send...)
			require.Equal(t, tt.want, peekBodies(tb.lookup(t, "t/Subscriptions/s").Peek(1, 10, "")))
		})
	}
}

func TestRuleActionsChangeTheSubscriptionsCopy(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscription("t", "plain", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscriptionWithRules("t", "acted", broker.EntityProperties{}, []broker.Rule{{
		Name: "tag", FilterType: broker.FilterSQL, SQLExpression: "EXISTS(color)",
		ActionSQLExpression: "SET priority = @p; SET sys.To = color + '-desk'; REMOVE secret",
		ActionParameters:    map[string]any{"p": "high"},
	}}))
	sent := withProps("x", map[string]any{"color": "red", "secret": "s3"})
	send(t, tb.lookup(t, "t"), sent)

	got := tb.lookup(t, "t/Subscriptions/acted").Peek(1, 10, "")
	require.Len(t, got, 1)
	require.Equal(t, map[string]any{"color": "red", "priority": "high", broker.PropertyRuleName: "tag"}, got[0].ApplicationProperties)
	require.Equal(t, "red-desk", *got[0].Properties.To)

	plain := tb.lookup(t, "t/Subscriptions/plain").Peek(1, 10, "")
	require.Len(t, plain, 1)
	require.Equal(t, map[string]any{"color": "red", "secret": "s3"}, plain[0].ApplicationProperties,
		"another subscription's copy is untouched")
	require.Equal(t, map[string]any{"color": "red", "secret": "s3"}, sent.ApplicationProperties, "the sent message is untouched")
}

// Service Bus: "All rules without actions are combined using an OR condition and result
// in a single message on the subscription even if you have multiple matching rules.
// Each rule with an action produces a copy of the message" (topic-filters docs: five
// matching rules, two with actions, give three messages).
func TestMultipleMatchingRules(t *testing.T) {
	t.Parallel()
	rules := []broker.Rule{
		{Name: "plain-1", FilterType: broker.FilterSQL, SQLExpression: "kind = 'a'"},
		{Name: "plain-2", FilterType: broker.FilterTrue},
		{Name: "plain-3", FilterType: broker.FilterSQL, SQLExpression: "EXISTS(kind)"},
		{Name: "act-1", FilterType: broker.FilterSQL, SQLExpression: "kind = 'a'", ActionSQLExpression: "SET via = 'act-1'"},
		{Name: "act-2", FilterType: broker.FilterSQL, SQLExpression: "kind IN ('a', 'b')", ActionSQLExpression: "SET via = 'act-2'"},
	}
	tests := []struct {
		name  string
		rules []broker.Rule
		kind  string
		// want lists the copies by their "via" property ("" for the plain copy).
		want []string
	}{
		{"all five match: one plain copy plus one per action", rules, "a", []string{"", "act-1", "act-2"}},
		{"plain rules and one action match", rules, "b", []string{"", "act-2"}},
		{"only action rules match", rules[3:], "a", []string{"act-1", "act-2"}},
		{"several plain rules give one copy", rules[:3], "a", []string{""}},
		{"nothing matches", rules[3:], "c", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
			require.NoError(t, tb.b.CreateSubscriptionWithRules("t", "s", broker.EntityProperties{}, tt.rules))
			send(t, tb.lookup(t, "t"), withProps("m", map[string]any{"kind": tt.kind}))
			got := []string{}
			for _, m := range tb.lookup(t, "t/Subscriptions/s").Peek(1, 10, "") {
				via, _ := m.ApplicationProperties["via"].(string)
				got = append(got, via)
				if via != "" {
					require.Equal(t, via, m.ApplicationProperties[broker.PropertyRuleName])
				} else {
					require.NotContains(t, m.ApplicationProperties, broker.PropertyRuleName)
				}
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestRuleCompileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rule broker.Rule
		want string
	}{
		{"filter syntax", broker.Rule{FilterType: broker.FilterSQL, SQLExpression: "a = "},
			`filter "a = ": sqlrule: 1:5: expected expression after '=', found EOF`},
		{"action syntax", broker.Rule{ActionSQLExpression: "SET = 1"}, `action "SET = 1": sqlrule: 1:5:`},
		{"missing filter parameter", broker.Rule{FilterType: broker.FilterSQL, SQLExpression: "a = @p"}, "sqlrule: 1:5:"},
		{"missing action parameter", broker.Rule{ActionSQLExpression: "SET a = @p"}, "sqlrule: 1:9:"},
		{"read-only system property", broker.Rule{ActionSQLExpression: "SET sys.SequenceNumber = 1"}, "sqlrule: 1:5:"},
		{"empty correlation filter", broker.Rule{FilterType: broker.FilterCorrelation, Correlation: &broker.CorrelationFilter{}},
			"correlation filter has no properties set"},
		{"unknown filter type", broker.Rule{FilterType: "Regex"}, `unknown filter type "Regex"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
			require.NoError(t, tb.b.CreateSubscription("t", "s", broker.EntityProperties{}))
			r := tt.rule
			r.Name = "r"
			for _, err := range []error{
				tb.b.CreateRule("t", "s", r),
				tb.b.UpdateRule("t", "s", broker.Rule{Name: broker.DefaultRuleName, FilterType: r.FilterType,
					SQLExpression: r.SQLExpression, Correlation: r.Correlation, ActionSQLExpression: r.ActionSQLExpression}),
				tb.b.CreateSubscriptionWithRules("t", "other", broker.EntityProperties{}, []broker.Rule{r}),
			} {
				require.ErrorIs(t, err, broker.ErrInvalidConfig)
				require.ErrorContains(t, err, tt.want)
			}
			require.ErrorContains(t, tb.b.CreateRule("t", "s", r), `rule "r"`, "the error names the rule")
			_, err := tb.b.GetSubscription("t", "other")
			require.ErrorIs(t, err, broker.ErrNotFound, "a refused subscription is not created")
			rules, err := tb.b.ListRules("t", "s")
			require.NoError(t, err)
			require.Len(t, rules, 1, "a refused rule is not added")
		})
	}
}

func TestSessionSubscriptionCheckedAfterTheAction(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
	require.NoError(t, tb.b.CreateSubscriptionWithRules("t", "s", broker.EntityProperties{RequiresSession: true},
		[]broker.Rule{{Name: "sessionize", FilterType: broker.FilterSQL, SQLExpression: "EXISTS(customer)",
			ActionSQLExpression: "SET sys.SessionId = customer"}}))
	topic := tb.lookup(t, "t")
	send(t, topic, withProps("m", map[string]any{"customer": "c1"}))
	lock, err := tb.lookup(t, "t/Subscriptions/s").AcceptNamedSession("c1", "test")
	require.NoError(t, err)
	require.Equal(t, []string{"m"}, bodies(receiveNow(t, tb.lookup(t, "t/Subscriptions/s"), 10,
		broker.ReceiveOptions{Mode: broker.ReceiveAndDelete, Session: lock})))
	lock.Release()

	// A copy that still has no session id refuses the whole send.
	require.NoError(t, tb.b.CreateSubscription("t", "plain-session", broker.EntityProperties{RequiresSession: true}))
	require.ErrorIs(t, topic.Send(t.Context(), []*amqp.Message{withProps("n", map[string]any{"customer": "c1"})}),
		broker.ErrNotAllowed)
	require.Empty(t, tb.lookup(t, "t/Subscriptions/s").Peek(1, 10, ""), "a refused send delivers nothing")
}

// Service Bus moves a message whose subscription rule fails to evaluate to that
// subscription's dead-letter queue (DeadLetteringOnFilterEvaluationExceptions, true by
// default) or, when that is off, discards it; other subscriptions are unaffected.
func TestRuleEvaluationFailures(t *testing.T) {
	t.Parallel()
	badFilter := broker.Rule{Name: "bad", FilterType: broker.FilterSQL, SQLExpression: "color * 2 = 4"}
	badAction := broker.Rule{Name: "bad", FilterType: broker.FilterTrue, ActionSQLExpression: "SET n = color * 2"}
	plain := broker.Rule{Name: "plain", FilterType: broker.FilterTrue}
	tests := []struct {
		name    string
		rules   []broker.Rule
		drop    bool
		wantDLQ []string
	}{
		{"failing filter dead-letters", []broker.Rule{badFilter}, false, []string{"x"}},
		{"failing action dead-letters", []broker.Rule{badAction}, false, []string{"x"}},
		{"a matching rule beside a failing one still dead-letters once", []broker.Rule{plain, badFilter}, false, []string{"x"}},
		{"dropped when dead-lettering is off", []broker.Rule{badFilter}, true, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			require.NoError(t, tb.b.CreateTopic("t", broker.EntityProperties{}))
			require.NoError(t, tb.b.CreateSubscription("t", "other", broker.EntityProperties{}))
			require.NoError(t, tb.b.CreateSubscriptionWithRules("t", "s",
				broker.EntityProperties{DropOnFilterEvaluationExceptions: tt.drop}, tt.rules))
			send(t, tb.lookup(t, "t"), withProps("x", map[string]any{"color": "red"}))

			require.Empty(t, tb.lookup(t, "t/Subscriptions/s").Peek(1, 10, ""))
			dlq := tb.lookup(t, "t/Subscriptions/s/$DeadLetterQueue").Peek(1, 10, "")
			require.Equal(t, tt.wantDLQ, peekBodies(dlq))
			for _, m := range dlq {
				require.Equal(t, broker.ReasonFilterEvaluationException, m.ApplicationProperties[broker.PropertyDeadLetterReason])
				require.Contains(t, m.ApplicationProperties[broker.PropertyDeadLetterErrorDescription], `rule "bad"`)
			}
			require.Equal(t, []string{"x"}, peekBodies(tb.lookup(t, "t/Subscriptions/other").Peek(1, 10, "")))
		})
	}
}

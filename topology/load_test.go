package topology_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/sqlrule"
	"github.com/seqbus/seqbus/topology"
)

func loadExample(t *testing.T) *topology.Namespace {
	t.Helper()
	data, err := os.ReadFile("examples/two-sources.yaml")
	require.NoError(t, err)
	ns, warns, err := topology.Load("two-sources.yaml", data)
	require.NoError(t, err)
	require.Empty(t, warns)
	return ns
}

func TestExampleExpandsToTheGjuraLayout(t *testing.T) {
	t.Parallel()
	ns := loadExample(t)

	names := func() []string {
		var out []string
		for _, tp := range ns.Topics {
			out = append(out, tp.Name)
		}
		return out
	}
	require.Equal(t, []string{"orders-api", "payments-api", "checkout-seq"}, names())
	for _, source := range []string{"orders-api", "payments-api"} {
		fwd := ns.Topic(source).Subscription("checkout-fwd")
		require.NotNil(t, fwd, source)
		require.Equal(t, "checkout-seq", *fwd.Props.ForwardTo)
		require.Len(t, fwd.Rules, 1)
		require.Equal(t, "EXISTS(user.SessionName) AND EXISTS(user.TransactionId) AND EXISTS(user.InstanceId)", fwd.Rules[0].Filter.SQL)
		require.Equal(t, "SET sys.SessionId = user.SessionName + '_' + user.TransactionId + '_' + user.InstanceId", fwd.Rules[0].Action)
	}
	require.NotNil(t, ns.Topic("orders-api").Subscription("audit"), "declared subscriptions are kept")
	w := ns.Topic("checkout-seq").Subscription("workers")
	require.NotNil(t, w)
	require.True(t, *w.Props.RequiresSession)
	require.Equal(t, int32(10), *w.Props.MaxDeliveryCount)
	require.Equal(t, "PT1M", contract.FormatDuration(*w.Props.LockDuration))
	require.Equal(t, "P7D", contract.FormatDuration(*w.Props.DefaultMessageTimeToLive))
	require.True(t, *w.Props.DeadLetteringOnMessageExpiration)
}

// forward runs the forwarding subscription's rules over a message with props as the
// broker would: every matching rule forwards a copy, its action applied. It returns the
// session ids of the copies ("" for a copy without one).
func forward(t *testing.T, rules []*topology.Rule, props map[string]any) []string {
	t.Helper()
	var out []string
	for _, r := range rules {
		sql := r.Filter.SQL
		if sql == "" {
			sql = "1=1" // the filter that matches every message
		}
		f, err := sqlrule.CompileFilter(sql, nil)
		require.NoError(t, err, r.Filter.SQL)
		m := &amqp.Message{Properties: &amqp.MessageProperties{}, ApplicationProperties: map[string]any{}}
		for k, v := range props {
			m.ApplicationProperties[k] = v
		}
		ok, err := f.Match(m)
		require.NoError(t, err)
		if !ok {
			continue
		}
		if r.Action != "" {
			a, err := sqlrule.CompileAction(r.Action, nil)
			require.NoError(t, err, r.Action)
			require.NoError(t, a.Apply(m))
		}
		sid := ""
		if m.Properties.GroupID != nil {
			sid = *m.Properties.GroupID
		}
		out = append(out, sid)
	}
	return out
}

func TestSessionStrategies(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		key   string
		props map[string]any
		want  []string // session ids of the forwarded copies; empty: not forwarded
	}{
		{"composite", `{strategy: composite, properties: [SessionName, TransactionId, InstanceId]}`,
			map[string]any{"SessionName": "checkout", "TransactionId": "t1", "InstanceId": int64(7)}, []string{"checkout_t1_7"}},
		{"composite missing a property", `{strategy: composite, properties: [SessionName, TransactionId, InstanceId]}`,
			map[string]any{"SessionName": "checkout", "TransactionId": "t1"}, nil},
		{"composite custom separator", `{strategy: composite, separator: "|", properties: [A, B]}`,
			map[string]any{"A": "x", "B": "y"}, []string{"x|y"}},
		{"entity", `{strategy: entity}`,
			map[string]any{"Owner": "microsoft", "Repo": "vscode", "EntityType": "pull_request", "EntityId": int64(1234)},
			[]string{"microsoft/vscode/pull_request/1234"}},
		{"entity with own property names", `{strategy: entity, properties: [owner, repo, entity_type, entity_id]}`,
			map[string]any{"owner": "octocat", "repo": "hello-world", "entity_type": "issue", "entity_id": "567"},
			[]string{"octocat/hello-world/issue/567"}},
		{"repository", `{strategy: repository}`,
			map[string]any{"Owner": "github", "Repo": "docs", "EntityType": "push"}, []string{"github/docs/repository"}},
		{"fallback takes the first alternative that applies", `{strategy: fallback, alternatives: [{strategy: entity}, {strategy: repository}]}`,
			map[string]any{"Owner": "o", "Repo": "r", "EntityType": "issue", "EntityId": "1"}, []string{"o/r/issue/1"}},
		{"fallback falls back", `{strategy: fallback, alternatives: [{strategy: entity}, {strategy: repository}]}`,
			map[string]any{"Owner": "o", "Repo": "r"}, []string{"o/r/repository"}},
		{"fallback with nothing is not forwarded", `{strategy: fallback, alternatives: [{strategy: entity}, {strategy: repository}]}`,
			map[string]any{"Owner": "o"}, nil},
		{"none forwards without session", `{strategy: none}`, map[string]any{"x": "y"}, []string{""}},
		{"none with properties requires them", `{strategy: none, properties: [Owner]}`, map[string]any{"x": "y"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := "sequenced:\n  - name: s\n    sources: [in]\n    sessionId: " + tt.key + "\n"
			ns, _, err := topology.Load("t.yaml", []byte(file))
			require.NoError(t, err)
			rules := ns.Topic("in").Subscription("s-fwd").Rules
			require.Equal(t, tt.want, forward(t, rules, tt.props))
			require.Equal(t, tt.key != `{strategy: none}` && !strings.Contains(tt.key, "none,"),
				*ns.Topic("s-seq").Subscription("workers").Props.RequiresSession)
		})
	}
}

func TestExtraFilterIsANDed(t *testing.T) {
	t.Parallel()
	file := `
sequenced:
  - name: s
    sources: [in]
    filter: "sys.Label = 'order'"
    sessionId: {strategy: composite, properties: [{name: K, maxLength: 10}]}
`
	ns, _, err := topology.Load("t.yaml", []byte(file))
	require.NoError(t, err)
	rules := ns.Topic("in").Subscription("s-fwd").Rules
	require.Empty(t, forward(t, rules, map[string]any{"K": "a"}))
	require.Equal(t, "EXISTS(user.K) AND (sys.Label = 'order')", rules[0].Filter.SQL)
}

func TestInvalidFiles(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 1100)
	tests := []struct {
		name string
		file string
		want string // one of the error lines
	}{
		{"not yaml", "queues:\n  - name: a\n    b: c: d\n", "bad.yaml:3: not valid YAML: mapping values are not allowed in this context"},
		{"unknown field", "topics:\n  - name: a\n    lockduration: PT1M\n",
			`bad.yaml:3:5: topics[0].lockduration: unknown field (did you mean "lockDuration"?)`},
		{"bad duration", "queues:\n  - name: q\n    lockDuration: 1 minute\n",
			`bad.yaml:3:5: queues[0].lockDuration: duration "1 minute" is neither ISO 8601`},
		{"property of another kind", "topics:\n  - name: t\n    lockDuration: PT1M\n",
			"bad.yaml:3:5: topics[0].lockDuration: lockDuration does not apply to a topic"},
		{"lock duration out of range", "queues:\n  - name: q\n    lockDuration: PT10M\n",
			"bad.yaml:3:5: queues[0].lockDuration: PT10M is out of range PT5S..PT5M"},
		{"bad name", "queues:\n  - name: -q\n",
			`bad.yaml:2:5: queues[0].name: "-q" is not a valid queue name`},
		{"duplicate name", "queues:\n  - name: a\ntopics:\n  - name: A\n",
			`bad.yaml:4:5: topics[0].name: "A" is declared twice (first at line 2)`},
		{"subscription name with slash", "topics:\n  - name: t\n    subscriptions:\n      - name: a/b\n",
			`bad.yaml:4:9: topics[0].subscriptions[0].name: "a/b" is not a valid subscription name`},
		{"unknown forward target", "queues:\n  - name: a\n    forwardTo: nowhere\n",
			`bad.yaml:3:5: queues[0].forwardTo: "nowhere" is not a queue or topic of the file`},
		{"forwarding loop", "queues:\n  - name: a\n    forwardTo: b\n  - name: b\n    forwardTo: a\n",
			"bad.yaml:5:5: queues[1].forwardTo: forwarding loop: a → b → a"},
		{"subscription forwards to its own topic", "topics:\n  - name: t\n    subscriptions:\n      - name: s\n        forwardTo: t\n",
			"bad.yaml:5:9: topics[0].subscriptions[0].forwardTo: forwarding loop: t → t"},
		{"chain too long", "queues:\n" +
			"  - {name: q1, forwardTo: q2}\n  - {name: q2, forwardTo: q3}\n  - {name: q3, forwardTo: q4}\n" +
			"  - {name: q4, forwardTo: q5}\n  - {name: q5, forwardTo: q6}\n  - {name: q6}\n",
			"bad.yaml:2:16: queues[0].forwardTo: forwarding chain q1 → q2 → q3 → q4 → q5 → q6 has 5 hops, Service Bus allows at most 4"},
		{"filter too long", "topics:\n  - name: t\n    subscriptions:\n      - name: s\n        rules:\n          - name: r\n            sql: " + long + "\n",
			"bad.yaml:7:13: topics[0].subscriptions[0].rules[0].sql: the filter is 1100 characters long, Service Bus allows 1024"},
		{"filter does not compile", "topics:\n  - name: t\n    subscriptions:\n      - name: s\n        rules:\n          - name: r\n            sql: \"a = 1 AND\"\n",
			"bad.yaml:7:13: topics[0].subscriptions[0].rules[0].sql: filter does not compile: 1:10: expected expression after AND"},
		{"action does not compile", "topics:\n  - name: t\n    subscriptions:\n      - name: s\n        rules:\n          - {name: r, sql: \"1=1\", action: \"SET sys.SequenceNumber = 1\"}\n",
			"topics[0].subscriptions[0].rules[0].action: action does not compile"},
		{"empty correlation filter", "topics:\n  - name: t\n    subscriptions:\n      - name: s\n        rules:\n          - {name: r, correlation: {}}\n",
			"topics[0].subscriptions[0].rules[0].correlation: a correlation filter must set at least one field"},
		{"session id too long", "sequenced:\n  - name: s\n    sources: [in]\n    sessionId:\n      strategy: entity\n      properties:\n" +
			"        - {name: Owner, maxLength: 39}\n        - {name: Repo, maxLength: 100}\n        - {name: EntityType, maxLength: 20}\n        - {name: EntityId, maxLength: 20}\n",
			"bad.yaml:5:7: sequenced[0].sessionId: the session id can be 182 characters long, Service Bus allows 128"},
		{"unknown strategy", "sequenced:\n  - name: s\n    sources: [in]\n    sessionId: {strategy: random}\n",
			`bad.yaml:4:17: sequenced[0].sessionId.strategy: unknown strategy "random"`},
		{"sessions switched off", "sequenced:\n  - name: s\n    sources: [in]\n    requiresSession: false\n    sessionId: {strategy: repository}\n",
			"bad.yaml:4:5: sequenced[0].requiresSession: the worker subscription must require sessions"},
		{"fallback with one alternative", "sequenced:\n  - name: s\n    sources: [in]\n    sessionId: {strategy: fallback, alternatives: [{strategy: entity}]}\n",
			"sequenced[0].sessionId.alternatives: strategy fallback needs at least two alternatives"},
		{"generated filter too long", "sequenced:\n  - name: s\n    sources: [in]\n    filter: \"" + strings.Repeat("user.a = 1 AND ", 67) + "1=1\"\n    sessionId: {strategy: composite, properties: [{name: K, maxLength: 9}]}\n",
			`bad.yaml:5:5: sequenced[0].sessionId: the filter is 1029 characters long, Service Bus allows 1024 (generated by sequenced "s")`},
		{"no sources", "sequenced:\n  - name: s\n    sessionId: {strategy: entity}\n",
			"bad.yaml:2:5: sequenced[0].sources: at least one source topic is required"},
		{"generated subscription clashes", "topics:\n  - name: in\n    subscriptions: [{name: s-fwd}]\nsequenced:\n  - name: s\n    sources: [in]\n    sessionId: {strategy: none}\n",
			`bad.yaml:5:5: sequenced[0].forwardingSubscription: subscription "s-fwd" is declared twice (first at line 3) (generated by sequenced "s")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := topology.Load("bad.yaml", []byte(tt.file))
			require.Error(t, err)
			require.True(t, errors.Is(err, topology.ErrInvalid))
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestSequencedErrorsPointAtTheUsersField: a sequenced block's own filter that does not
// compile is reported once, at the filter field and with the position in what the user
// wrote, not once per source topic at the generated rule; a block already in error adds
// no follow-on errors about the rules it would generate.
func TestSequencedErrorsPointAtTheUsersField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		want string // the whole error
	}{
		{"bad filter", "sequenced:\n  - name: s\n    sources: [a, b]\n    filter: \"x = \"\n" +
			"    sessionId: {strategy: composite, properties: [{name: K, maxLength: 9}]}\n",
			"bad.yaml:4:5: sequenced[0].filter: filter does not compile: 1:5: expected expression after '=', found EOF"},
		{"composite without properties", "sequenced:\n  - name: s\n    sources: [a, b]\n" +
			"    sessionId: {strategy: composite, properties: []}\n",
			"bad.yaml:4:38: sequenced[0].sessionId.properties: strategy composite needs at least one property"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := topology.Load("bad.yaml", []byte(tt.file))
			require.ErrorIs(t, err, topology.ErrInvalid)
			require.Equal(t, tt.want, err.Error())
		})
	}
}

func TestAnchorsAndAliases(t *testing.T) {
	t.Parallel()
	file := `
x-worker: &worker
  lockDuration: PT1M
  maxDeliveryCount: 5
queues:
  - name: a
    lockDuration: *ld
`
	_, _, err := topology.Load("a.yaml", []byte(file))
	require.ErrorContains(t, err, "unknown anchor")

	file = `
queues:
  - name: a
    lockDuration: &ld PT2M
  - name: b
    lockDuration: *ld
`
	ns, _, err := topology.Load("a.yaml", []byte(file))
	require.NoError(t, err)
	require.Equal(t, "PT2M", contract.FormatDuration(*ns.Queue("b").Props.LockDuration))
}

func TestUnboundedSessionIDWarns(t *testing.T) {
	t.Parallel()
	file := "sequenced:\n  - name: s\n    sources: [in]\n    sessionId:\n      strategy: composite\n      properties: [{name: A, maxLength: 10}, B]\n"
	_, warns, err := topology.Load("w.yaml", []byte(file))
	require.NoError(t, err)
	require.Len(t, warns, 1)
	require.Equal(t, topology.SeverityWarning, warns[0].Severity)
	require.Equal(t, "w.yaml:5:7: warning: sequenced[0].sessionId: the session id length is unbounded (B): declare maxLength for every property so that it is checked against the limit of 128 characters", warns[0].String())
}

func TestDurations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string // FormatDuration of the parsed value; "" for an error
	}{
		{"PT30S", "PT30S"}, {"PT1M", "PT1M"}, {"P14D", "P14D"}, {"P1DT2H30M", "P1DT2H30M"},
		{"PT0.5S", "PT0.5S"}, {"90s", "PT1M30S"}, {"24h", "P1D"}, {"p1dt2h", "P1DT2H"},
		{"P1M", "P30D"}, {"P1Y", "P365D"}, // as the service reads them
		{"P10675199DT2H48M5.4775807S", "P10675199DT2H48M5.4775807S"},
		{"P", ""}, {"PT", ""}, {"P1H", ""}, {"PT1D", ""}, {"1 minute", ""}, {"-5s", ""}, {"P1D1D", ""},
		// ISO 8601 forms the service refuses (xs:duration has no weeks, no decimal comma and
		// fractions only on seconds): refused here too, rather than planned and failing at apply.
		{"P2W", ""}, {"PT0,5S", ""}, {"P1.5D", ""},
	}
	for _, tt := range tests {
		d, err := topology.ParseDuration(tt.in)
		if tt.want == "" {
			require.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, contract.FormatDuration(d), tt.in)
	}
}

func TestEveryExampleIsValid(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("examples/*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 2)
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		_, warns, err := topology.Load(f, data)
		require.NoError(t, err, f)
		require.Empty(t, warns, f)
	}
}

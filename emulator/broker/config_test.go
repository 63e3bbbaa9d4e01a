package broker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

const sampleConfig = `{
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "myns",
        "Queues": [
          {"Name": "queue.1", "Properties": {
            "DeadLetteringOnMessageExpiration": true, "DefaultMessageTimeToLive": "PT10M",
            "DuplicateDetectionHistoryTimeWindow": "PT30S", "ForwardDeadLetteredMessagesTo": "",
            "ForwardTo": "", "LockDuration": "PT45S", "MaxDeliveryCount": 7,
            "RequiresDuplicateDetection": true, "RequiresSession": true}},
          {"Name": "bare"}
        ],
        "Topics": [
          {"Name": "topic.1", "Properties": {"DefaultMessageTimeToLive": "P1D", "RequiresDuplicateDetection": false},
           "Subscriptions": [
             {"Name": "subscription.1", "Properties": {"LockDuration": "PT1M", "MaxDeliveryCount": 3, "ForwardTo": "bare"},
              "Rules": [
                {"Name": "app-prop-filter-1", "Properties": {"FilterType": "Correlation",
                  "CorrelationFilter": {"ContentType": "application/text", "CorrelationId": "id1", "Label": "subject1",
                    "MessageId": "msgid1", "ReplyTo": "someQueue", "ReplyToSessionId": "sessionId",
                    "SessionId": "session1", "To": "xyz", "Properties": {"prop1": "value1"}}}},
                {"Name": "sql-filter-1", "Properties": {"FilterType": "Sql",
                  "SqlFilter": {"SqlExpression": "sys.Label = 'x'"}, "Action": {"SqlExpression": "SET sys.To = 'y'"}}}
              ]},
             {"Name": "subscription.2"}
           ]}
        ]
      }
    ],
    "Logging": {"Type": "File"}
  }
}`

func TestParseUserConfig(t *testing.T) {
	t.Parallel()
	uc, err := broker.ParseUserConfig([]byte(sampleConfig))
	require.NoError(t, err)
	require.Len(t, uc.Namespaces, 1)
	ns := uc.Namespaces[0]
	require.Equal(t, "myns", ns.Name)
	require.Equal(t, "File", uc.Logging.Type)
	require.Equal(t, broker.EntityProperties{
		DeadLetteringOnMessageExpiration: true, DefaultMessageTimeToLive: 10 * time.Minute,
		DuplicateDetectionHistoryTimeWindow: 30 * time.Second, LockDuration: 45 * time.Second,
		MaxDeliveryCount: 7, RequiresDuplicateDetection: true, RequiresSession: true,
	}, ns.Queues[0].Properties)
	require.Equal(t, broker.EntityProperties{
		LockDuration: time.Minute, MaxDeliveryCount: 3, DefaultMessageTimeToLive: time.Hour,
		DuplicateDetectionHistoryTimeWindow: 20 * time.Second,
	}, ns.Queues[1].Properties, "the Config.json schema's defaults")
	require.Equal(t, 24*time.Hour, ns.Topics[0].Properties.DefaultMessageTimeToLive)
	sub := ns.Topics[0].Subscriptions[0]
	require.Equal(t, "bare", sub.Properties.ForwardTo)
	require.Equal(t, broker.Rule{Name: "app-prop-filter-1", FilterType: broker.FilterCorrelation,
		Correlation: &broker.CorrelationFilter{ContentType: "application/text", CorrelationID: "id1", Label: "subject1",
			MessageID: "msgid1", ReplyTo: "someQueue", ReplyToSessionID: "sessionId", SessionID: "session1", To: "xyz",
			Properties: map[string]any{"prop1": "value1"}}}, sub.Rules[0])
	require.Equal(t, broker.Rule{Name: "sql-filter-1", FilterType: broker.FilterSQL, SQLExpression: "sys.Label = 'x'",
		ActionSQLExpression: "SET sys.To = 'y'"}, sub.Rules[1])
}

func TestLoadConfigFileCreatesEntities(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "Config.json")
	require.NoError(t, os.WriteFile(path, []byte(sampleConfig), 0o600))
	tb := setup(t)
	require.NoError(t, tb.b.LoadConfigFile(path))

	q, err := tb.b.GetQueue("QUEUE.1")
	require.NoError(t, err)
	require.Equal(t, 45*time.Second, q.Properties.LockDuration)
	require.True(t, tb.lookup(t, "queue.1").RequiresSession())
	require.Len(t, tb.b.ListQueues(), 2)
	subs, err := tb.b.ListSubscriptions("topic.1")
	require.NoError(t, err)
	require.Equal(t, "subscription.1", subs[0].Name)
	rules, err := tb.b.ListRules("topic.1", "subscription.2")
	require.NoError(t, err)
	require.Equal(t, []broker.Rule{{Name: broker.DefaultRuleName, FilterType: broker.FilterTrue}}, rules)
	rules, err = tb.b.ListRules("topic.1", "subscription.1")
	require.NoError(t, err)
	require.Len(t, rules, 2)

	// Loading it again would create duplicates: refused, naming the path.
	err = tb.b.LoadConfigFile(path)
	require.ErrorIs(t, err, broker.ErrEntityExists)
	require.ErrorContains(t, err, "UserConfig.Namespaces[0].Queues[0].Name")

	require.Error(t, tb.b.LoadConfigFile(filepath.Join(t.TempDir(), "missing.json")))
}

func TestParseUserConfigErrors(t *testing.T) {
	t.Parallel()
	ns := func(body string) string {
		return `{"UserConfig":{"Namespaces":[{"Name":"ns",` + body + `}],"Logging":{"Type":"File"}}}`
	}
	queues := func(props ...string) string {
		qs := make([]string, len(props))
		for i, p := range props {
			qs[i] = `{"Name":"q` + string(rune('0'+i)) + `","Properties":{` + p + `}}`
		}
		return ns(`"Queues":[` + strings.Join(qs, ",") + `]`)
	}
	rule := func(props string) string {
		return ns(`"Topics":[{"Name":"t","Subscriptions":[{"Name":"s","Rules":[{"Name":"r","Properties":{` + props + `}}]}]}]`)
	}
	tests := []struct {
		name, doc, want string
	}{
		{"bad JSON", `{"UserConfig": {`, `Config.json: invalid JSON at line 1, column 17`},
		{"not an object", `[]`, `Config.json: expected an object, got an array`},
		{"no UserConfig", `{}`, `UserConfig: required`},
		{"unknown top field", `{"UserConfig":{"Namespaces":[{"Name":"n"}]},"Extra":1}`, `Config.json.Extra: unknown field`},
		{"no namespaces", `{"UserConfig":{"Namespaces":[]}}`, `UserConfig.Namespaces: at least one namespace is required`},
		{"namespaces not an array", `{"UserConfig":{"Namespaces":{}}}`, `UserConfig.Namespaces: expected an array, got an object`},
		{"namespace without name", `{"UserConfig":{"Namespaces":[{}]}}`, `UserConfig.Namespaces[0].Name: required`},
		{"bad duration", queues(`"LockDuration":"PT1M"`, `"LockDuration":"PT1M"`, `"LockDuration":"1m"`),
			`UserConfig.Namespaces[0].Queues[2].Properties.LockDuration: invalid ISO 8601 duration "1m"`},
		{"duration of wrong type", queues(`"DefaultMessageTimeToLive":60`),
			`UserConfig.Namespaces[0].Queues[0].Properties.DefaultMessageTimeToLive: expected a string, got a number`},
		{"max delivery not an integer", queues(`"MaxDeliveryCount":"3"`),
			`UserConfig.Namespaces[0].Queues[0].Properties.MaxDeliveryCount: expected an integer, got "3"`},
		{"max delivery zero", queues(`"MaxDeliveryCount":0`),
			`UserConfig.Namespaces[0].Queues[0].Properties.MaxDeliveryCount: must be at least 1`},
		{"bool of wrong type", queues(`"RequiresSession":"yes"`),
			`UserConfig.Namespaces[0].Queues[0].Properties.RequiresSession: expected a boolean, got a string`},
		{"unknown property", queues(`"LockDuraton":"PT1M"`),
			`UserConfig.Namespaces[0].Queues[0].Properties.LockDuraton: unknown field`},
		{"topic property on wrong kind", ns(`"Topics":[{"Name":"t","Properties":{"RequiresSession":true}}]`),
			`UserConfig.Namespaces[0].Topics[0].Properties.RequiresSession: unknown field`},
		{"bad status", queues(`"Status":"Paused"`), `UserConfig.Namespaces[0].Queues[0].Properties.Status: unknown status "Paused"`},
		{"bad name", ns(`"Queues":[{"Name":"-q"}]`), `UserConfig.Namespaces[0].Queues[0].Name: invalid name "-q"`},
		{"duplicate queue", ns(`"Queues":[{"Name":"q"},{"Name":"Q"}]`),
			`UserConfig.Namespaces[0].Queues[1].Name: duplicate name "Q" (first at UserConfig.Namespaces[0].Queues[0].Name)`},
		{"queue and topic share a name", ns(`"Queues":[{"Name":"x"}],"Topics":[{"Name":"x"}]`),
			`UserConfig.Namespaces[0].Topics[0].Name: duplicate name "x"`},
		{"duplicate subscription", ns(`"Topics":[{"Name":"t","Subscriptions":[{"Name":"s"},{"Name":"s"}]}]`),
			`UserConfig.Namespaces[0].Topics[0].Subscriptions[1].Name: duplicate name "s"`},
		{"duplicate rule", ns(`"Topics":[{"Name":"t","Subscriptions":[{"Name":"s","Rules":[` +
			`{"Name":"r","Properties":{"FilterType":"Sql","SqlFilter":{"SqlExpression":"1=1"}}},` +
			`{"Name":"r","Properties":{"FilterType":"Sql","SqlFilter":{"SqlExpression":"1=1"}}}]}]}]`),
			`UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[1].Name: duplicate name "r"`},
		{"unknown filter type", rule(`"FilterType":"Regex"`),
			`UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Properties.FilterType: unknown filter type "Regex"`},
		{"missing filter type", rule(`"SqlFilter":{"SqlExpression":"1=1"}`),
			`UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Properties.FilterType: required`},
		{"sql without filter", rule(`"FilterType":"Sql"`),
			`UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Properties.SqlFilter: required when FilterType is Sql`},
		{"empty correlation", rule(`"FilterType":"Correlation","CorrelationFilter":{}`),
			`UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Properties.CorrelationFilter: at least one property is required`},
		{"unknown forward target", queues(`"ForwardTo":"nowhere"`),
			`UserConfig.Namespaces[0].Queues[0].Properties.ForwardTo: forwarding target "nowhere" is not a queue or topic of the config`},
		{"bad logging type", `{"UserConfig":{"Namespaces":[{"Name":"n"}],"Logging":{"Type":"Syslog"}}}`,
			`UserConfig.Logging.Type: unknown logging type "Syslog"`},
		{"partitioning of wrong type", queues(`"EnablePartitioning":"true"`),
			`UserConfig.Namespaces[0].Queues[0].Properties.EnablePartitioning: expected a boolean, got a string`},
		{"partitioning on a subscription", ns(`"Topics":[{"Name":"t","Subscriptions":[{"Name":"s","Properties":{"EnablePartitioning":true}}]}]`),
			`UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Properties.EnablePartitioning: unknown field`},
		{"unknown session-id rule", `{"UserConfig":{"SessionIdRequired":"Sometimes","Namespaces":[{"Name":"n"}]}}`,
			`UserConfig.SessionIdRequired: "Sometimes": want Partitioned or Always`},
		{"session-id rule of wrong type", `{"UserConfig":{"SessionIdRequired":true,"Namespaces":[{"Name":"n"}]}}`,
			`UserConfig.SessionIdRequired: expected a string, got a boolean`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := broker.ParseUserConfig([]byte(tt.doc))
			require.ErrorIs(t, err, broker.ErrInvalidConfig)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestUserConfigPartitioningAndSessionIDRule(t *testing.T) {
	t.Parallel()
	uc, err := broker.ParseUserConfig([]byte(`{"UserConfig":{"SessionIdRequired":"always","Namespaces":[{"Name":"ns",
		"Queues":[{"Name":"pq","Properties":{"RequiresSession":true,"EnablePartitioning":true}}],
		"Topics":[{"Name":"pt","Properties":{"EnablePartitioning":true},"Subscriptions":[{"Name":"s","Properties":{"RequiresSession":true}}]}]}]}}`))
	require.NoError(t, err)
	require.Equal(t, broker.SessionIDAlways, uc.SessionIDRule)
	b := broker.New(broker.Config{})
	t.Cleanup(b.Close)
	require.Equal(t, broker.SessionIDOnPartitioned, b.SessionIDRule())
	require.NoError(t, b.ApplyUserConfig(uc))
	require.Equal(t, broker.SessionIDAlways, b.SessionIDRule(), "a file makes the broker stricter")
	for _, path := range []string{"pq", "pt", "pt/Subscriptions/s", "pq/$DeadLetterQueue"} {
		e, err := b.Lookup(path)
		require.NoError(t, err, path)
		require.True(t, e.Partitioned(), path)
	}
	dlq, err := b.Lookup("pq/$DeadLetterQueue")
	require.NoError(t, err)
	require.False(t, dlq.NeedsSessionID(), "a dead-letter queue has no sessions")

	// A later config asking for less does not loosen the rule.
	require.NoError(t, b.ApplyUserConfig(&broker.UserConfig{SessionIDRule: broker.SessionIDOnPartitioned}))
	require.Equal(t, broker.SessionIDAlways, b.SessionIDRule())
	require.ErrorIs(t, b.ApplyUserConfig(&broker.UserConfig{SessionIDRule: 7}), broker.ErrInvalidConfig)
}

func TestEnablePartitioningCannotChange(t *testing.T) {
	t.Parallel()
	b := broker.New(broker.Config{})
	t.Cleanup(b.Close)
	require.NoError(t, b.CreateQueue("q", broker.EntityProperties{EnablePartitioning: true}))
	require.NoError(t, b.CreateTopic("t", broker.EntityProperties{}))
	require.ErrorIs(t, b.UpdateQueue("q", broker.EntityProperties{}), broker.ErrNotAllowed)
	require.ErrorIs(t, b.UpdateTopic("t", broker.EntityProperties{EnablePartitioning: true}), broker.ErrNotAllowed)
	require.NoError(t, b.UpdateQueue("q", broker.EntityProperties{EnablePartitioning: true, MaxDeliveryCount: 4}))
}

func TestParseSessionIDRule(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want broker.SessionIDRule
		ok   bool
	}{
		{"partitioned", broker.SessionIDOnPartitioned, true},
		{"Always", broker.SessionIDAlways, true},
		{" ALWAYS ", broker.SessionIDAlways, true},
		{"", 0, false},
		{"never", 0, false},
	} {
		got, err := broker.ParseSessionIDRule(tt.in)
		if !tt.ok {
			require.ErrorIs(t, err, broker.ErrInvalidConfig, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got)
		back, err := broker.ParseSessionIDRule(got.String())
		require.NoError(t, err)
		require.Equal(t, got, back)
	}
}

package sqlrule

import (
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
)

func TestActionApply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, expr string
		app        map[string]any
		check      func(t *testing.T, m *amqp.Message)
	}{
		{
			name: "Gjura layout",
			expr: "SET sys.SessionId = user.SessionName + '_' + user.TransactionId + '_' + user.InstanceId",
			app:  map[string]any{"SessionName": "orders", "TransactionId": int64(7), "InstanceId": "i-3"},
			check: func(t *testing.T, m *amqp.Message) {
				require.Equal(t, "orders_7_i-3", *m.Properties.GroupID)
			},
		},
		{
			name: "missing operand clears the session",
			expr: "SET sys.SessionId = user.SessionName + '_' + user.InstanceId",
			app:  map[string]any{"SessionName": "orders"},
			check: func(t *testing.T, m *amqp.Message) {
				require.Nil(t, m.Properties.GroupID)
			},
		},
		{
			name: "set user properties",
			expr: "SET a = 1; SET b = 'x' + a; SET c = 2.5; SET d = TRUE; SET [e f] = NULL",
			check: func(t *testing.T, m *amqp.Message) {
				require.Equal(t, map[string]any{"a": int64(1), "b": "x1", "c": 2.5, "d": true, "e f": nil}, m.ApplicationProperties)
			},
		},
		{
			name: "statements see earlier ones",
			expr: "SET quantity = quantity / 2; SET quantity2 = quantity * 10",
			app:  map[string]any{"quantity": int64(9)},
			check: func(t *testing.T, m *amqp.Message) {
				require.Equal(t, map[string]any{"quantity": int64(4), "quantity2": int64(40)}, m.ApplicationProperties)
			},
		},
		{
			name: "names are case-insensitive and keep the existing key",
			expr: "SET COLOR = 'red'; REMOVE Size",
			app:  map[string]any{"color": "blue", "size": int64(3), "keep": "k"},
			check: func(t *testing.T, m *amqp.Message) {
				require.Equal(t, map[string]any{"color": "red", "keep": "k"}, m.ApplicationProperties)
			},
		},
		{
			name: "implicit conversion to an existing float",
			expr: "SET price = 3",
			app:  map[string]any{"price": 1.5},
			check: func(t *testing.T, m *amqp.Message) {
				require.Equal(t, 3.0, m.ApplicationProperties["price"])
			},
		},
		{
			name: "missing property yields NULL",
			expr: "SET a = missing + 1",
			check: func(t *testing.T, m *amqp.Message) {
				v, ok := m.ApplicationProperties["a"]
				require.True(t, ok)
				require.Nil(t, v)
			},
		},
		{
			name: "remove missing is a no-op",
			expr: "REMOVE nothing",
			app:  map[string]any{"a": "b"},
			check: func(t *testing.T, m *amqp.Message) {
				require.Equal(t, map[string]any{"a": "b"}, m.ApplicationProperties)
			},
		},
		{
			name: "system properties",
			expr: "SET sys.Label = 'Important'; SET sys.To = 'x'; SET sys.ReplyTo = 'r'; SET sys.CorrelationId = 'c'; " +
				"SET sys.MessageId = 'm'; SET sys.ContentType = 'text/plain'; SET sys.ReplyToSessionId = 'rs'; " +
				"SET sys.PartitionKey = 'p'",
			check: func(t *testing.T, m *amqp.Message) {
				p := m.Properties
				require.Equal(t, "Important", *p.Subject)
				require.Equal(t, "x", *p.To)
				require.Equal(t, "r", *p.ReplyTo)
				require.Equal(t, "c", p.CorrelationID)
				require.Equal(t, "m", p.MessageID)
				require.Equal(t, "text/plain", *p.ContentType)
				require.Equal(t, "rs", *p.ReplyToGroupID)
				require.Equal(t, "p", m.Annotations["x-opt-partition-key"])
			},
		},
		{
			name: "sys.Subject is sys.Label",
			expr: "SET sys.Subject = sys.Label + '!'",
			check: func(t *testing.T, m *amqp.Message) {
				require.Equal(t, "Electronics!", *m.Properties.Subject)
			},
		},
		{
			name: "copy a system property into a user property",
			expr: "SET seq = sys.SequenceNumber; SET enq = sys.EnqueuedTimeUtc; SET id = newid()",
			check: func(t *testing.T, m *amqp.Message) {
				require.Equal(t, int64(42), m.ApplicationProperties["seq"])
				require.Equal(t, testEnqueued, m.ApplicationProperties["enq"])
				require.IsType(t, amqp.UUID{}, m.ApplicationProperties["id"])
			},
		},
		{
			name: "remove a system property clears it",
			expr: "REMOVE sys.Label; SET sys.To = NULL",
			check: func(t *testing.T, m *amqp.Message) {
				require.Nil(t, m.Properties.Subject)
				require.Nil(t, m.Properties.To)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := CompileAction(tt.expr, nil)
			require.NoError(t, err)
			m := testMessage(tt.app)
			require.NoError(t, a.Apply(m))
			tt.check(t, m)
		})
	}
}

func TestActionOnBareMessage(t *testing.T) {
	t.Parallel()
	a, err := CompileAction("SET sys.SessionId = 'S'; SET x = 1", nil)
	require.NoError(t, err)
	m := &amqp.Message{}
	require.NoError(t, a.Apply(m))
	require.Equal(t, "S", *m.Properties.GroupID)
	require.Equal(t, map[string]any{"x": int64(1)}, m.ApplicationProperties)
}

func TestActionErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr, want string
	}{
		{"SET sys.SessionId = 5", "sqlrule: evaluation failed: 1:1: cannot assign Int64 to sys.SessionId, which is a String"},
		{"SET a = 1; SET sys.Label = TRUE", "sqlrule: evaluation failed: 1:12: cannot assign Boolean to sys.Label, which is a String"},
		{"SET a = 1 / 0", "sqlrule: evaluation failed: 1:11: division by zero"},
		{"SET a = sys.TimeToLive", "sqlrule: evaluation failed: 1:1: cannot store a TimeSpan in application property a"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			t.Parallel()
			a, err := CompileAction(tt.expr, nil)
			require.NoError(t, err)
			err = a.Apply(testMessage(nil))
			require.ErrorIs(t, err, ErrEvaluation)
			require.EqualError(t, err, tt.want)
		})
	}
}

func TestActionParameters(t *testing.T) {
	t.Parallel()
	a, err := CompileAction("SET sys.Label = @label; SET n = @n * 2", &CompileOptions{Parameters: map[string]any{"@label": "L", "@n": 21}})
	require.NoError(t, err)
	m := testMessage(nil)
	require.NoError(t, a.Apply(m))
	require.Equal(t, "L", *m.Properties.Subject)
	require.Equal(t, int64(42), m.ApplicationProperties["n"])

	_, err = CompileAction("SET a = @nope", nil)
	require.EqualError(t, err, "sqlrule: 1:9: parameter @nope is not defined")
}

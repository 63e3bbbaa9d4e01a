package sqlrule

import (
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
)

func TestFilterMatch(t *testing.T) {
	t.Parallel()
	app := map[string]any{
		"color":         "blue",
		"Quantity":      int32(10),
		"price":         9.5,
		"big":           uint64(1 << 63),
		"flag":          true,
		"nothing":       nil,
		"name":          "Ab_c%",
		"my prop":       "spaced",
		"sym":           amqp.Symbol("symbol"),
		"small":         int8(-3),
		"id":            amqp.UUID{0xaa},
		"when":          testEnqueued.Add(time.Minute),
		"SessionName":   "orders",
		"TransactionId": int64(7),
		"u16":           uint16(65535),
		"pct":           "100%",
	}
	tests := []struct {
		name, expr string
		want       bool
	}{
		// Comparisons and coercion between integer and floating point.
		{"int equals", "Quantity = 10", true},
		{"int equals float", "Quantity = 10.0", true},
		{"float vs int ordering", "price > 9 AND price < 10", true},
		{"int width does not matter", "small = -3 AND u16 = 65535", true},
		{"uint64 beyond int64 is a float", "big > 9223372036854775807", false},
		{"uint64 beyond int64 equals its float", "big = 9223372036854775808.0", true},
		{"integer division truncates", "Quantity / 4 = 2", true},
		{"float division", "Quantity / 4.0 = 2.5", true},
		{"modulo", "Quantity % 3 = 1", true},
		{"float modulo", "price % 2 = 1.5", true},
		{"precedence", "1 + 2 * 3 = 7 AND (1 + 2) * 3 = 9", true},
		{"unary minus", "-Quantity = -10 AND - -Quantity = 10", true},
		{"exponent", "1.5E1 = 15 AND 150E-1 = 15", true},
		// Strings: ordinal, case-sensitive.
		{"string equals", "color = 'blue'", true},
		{"string case-sensitive", "color = 'Blue'", false},
		{"string not equal", "color <> 'Blue' AND color != 'red'", true},
		{"string ordering is ordinal", "'B' < 'a' AND color > 'a'", true},
		{"symbol is a string", "sym = 'symbol'", true},
		{"quote escape", "'it''s' = 'it' + '''' + 's'", true},
		// Concatenation of string and number as .NET does.
		{"concat string and int", "color + 1 = 'blue1'", true},
		{"concat int and string", "1 + color = '1blue'", true},
		{"concat float", "'' + price = '9.5' AND '' + 1E20 = '1E+20' AND '' + 0.00001 = '1E-05'", true},
		{"concat bool", "'x' + flag = 'xTrue'", true},
		{"numbers add, not concat", "1 + 2 = 3", true},
		// Names: case-insensitive, scopes, delimited.
		{"property names case-insensitive", "COLOR = 'blue' AND user.quantity = 10", true},
		{"delimited name", "[my prop] = 'spaced' AND \"my prop\" = 'spaced'", true},
		{"user scope", "user.color = 'blue'", true},
		// NULL and unknown.
		{"missing property compares unknown", "missing = 1", false},
		{"NOT unknown is unknown", "NOT (missing = 1)", false},
		{"unknown <> is unknown", "missing <> 1", false},
		{"FALSE AND unknown", "NOT (1 = 0 AND missing = 1)", true},
		{"TRUE OR unknown", "1 = 1 OR missing = 1", true},
		{"FALSE OR unknown", "1 = 0 OR missing = 1", false},
		{"unknown AND TRUE", "missing = 1 AND 1 = 1", false},
		{"NOT (unknown OR FALSE)", "NOT (missing = 1 OR 1 = 0)", false},
		{"IS NULL on missing", "missing IS NULL", true},
		{"IS NULL on null value", "nothing IS NULL", true},
		{"IS NOT NULL", "color IS NOT NULL AND NOT (nothing IS NOT NULL)", true},
		{"NULL literal compares unknown", "NULL = NULL", false},
		{"arithmetic with unknown", "missing + 1 IS NULL AND color + missing IS NULL", true},
		{"EXISTS", "EXISTS(color) AND EXISTS(nothing) AND NOT EXISTS(missing)", true},
		{"EXISTS is case-insensitive", "EXISTS(user.COLOR)", true},
		// Type mismatch in a comparison is unknown.
		{"string vs number unknown", "color = 1", false},
		{"string vs number not negated", "NOT (color = 1)", false},
		{"bool ordering unknown", "flag > FALSE", false},
		{"bool equality", "flag = TRUE AND flag", true},
		{"non-boolean predicate", "color", false},
		// IN.
		{"IN", "color IN ('red', 'blue')", true},
		{"IN numbers coerce", "Quantity IN (1.0, 10.0)", true},
		{"NOT IN", "color NOT IN ('red', 'green')", true},
		{"NOT IN when present", "color NOT IN ('red', 'blue')", false},
		{"IN unknown left", "missing IN (1, 2) OR missing NOT IN (1, 2)", false},
		{"IN with NULL element", "color IN (NULL, 'blue')", true},
		{"NOT IN with NULL element", "color NOT IN (NULL, 'red')", true},
		// LIKE.
		{"LIKE prefix", "sys.Label LIKE 'Elec%'", true},
		{"LIKE underscore", "color LIKE 'bl_e'", true},
		{"LIKE underscore needs a char", "color LIKE 'blue_'", false},
		{"LIKE case-sensitive", "color LIKE 'BLUE'", false},
		{"LIKE whole string", "color LIKE 'blu'", false},
		{"LIKE middle", "color LIKE '%lu%'", true},
		{"LIKE backtracking", "'aaab' LIKE '%a%ab' AND 'abcabd' LIKE '%abd'", true},
		{"LIKE unicode", "'straße' LIKE 'stra_e'", true},
		{"LIKE escape percent", "pct LIKE '100!%' ESCAPE '!'", true},
		{"LIKE escaped percent is literal", "'1000' LIKE '100!%' ESCAPE '!'", false},
		{"LIKE escape underscore", "name LIKE 'Ab!_c!%' ESCAPE '!'", true},
		{"LIKE escaped underscore is literal", "'Abxc%' LIKE 'Ab!_c%' ESCAPE '!'", false},
		{"LIKE backslash escape", `name LIKE 'Ab\_%' ESCAPE '\'`, true},
		{"NOT LIKE", "color NOT LIKE 'r%'", true},
		{"LIKE unknown", "missing LIKE '%' OR missing NOT LIKE '%'", false},
		{"LIKE non-string", "Quantity LIKE '1%'", false},
		{"LIKE computed pattern", "color LIKE sym + '%' OR color LIKE 'b' + '%'", true},
		// System properties.
		{"sys.Label", "sys.Label = 'Electronics'", true},
		{"sys.Subject is Label", "sys.Subject = sys.Label", true},
		{"sys names case-insensitive", "sys.label = 'Electronics' AND SYS.MESSAGEID = 'msg-1'", true},
		{"sys.To IN", "sys.To IN ('Store5', 'Store6')", true},
		{"sys.SessionId", "sys.SessionId = 'session-1' AND sys.ReplyToSessionId = 'reply-session'", true},
		{"sys.CorrelationId uuid as string", "sys.CorrelationId = '01020000-0000-0000-0000-000000000000'", true},
		{"sys.ContentType", "sys.ContentType LIKE 'application/%' AND sys.ReplyTo = 'replies'", true},
		{"sys.SequenceNumber", "sys.SequenceNumber = 42 AND sys.SequenceNumber > 41.5", true},
		{"sys.DeliveryCount", "sys.DeliveryCount = 2", true},
		{"sys.Size", "sys.Size = 5", true},
		{"sys.PartitionKey", "sys.PartitionKey = 'pk'", true},
		{"sys.EnqueuedTimeUtc ordering", "sys.EnqueuedTimeUtc < user.when", true},
		{"date arithmetic", "user.when - sys.EnqueuedTimeUtc < sys.TimeToLive AND sys.ExpiresAtUtc > user.when", true},
		{"missing sys property is NULL", "sys.ScheduledEnqueueTimeUtc IS NULL AND NOT EXISTS(sys.ScheduledEnqueueTimeUtc)", true},
		{"EXISTS sys", "EXISTS(sys.SessionId)", true},
		// Functions.
		{"property()", "property('color') = 'blue' AND property('user.Quantity') = 10 AND property('sys.Label') = 'Electronics'", true},
		{"property() of missing", "property('nope') IS NULL", true},
		{"newid()", "newid() <> newid() AND newid() IS NOT NULL", true},
		{"guid equality", "id = id AND (id = 'aa') IS NULL", true},
		// Constants.
		{"TRUE", "TRUE", true},
		{"FALSE", "FALSE", false},
		{"NULL filter", "NULL", false},
		{"Gjura layout", "EXISTS(user.SessionName) AND EXISTS(user.TransactionId)", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := CompileFilter(tt.expr, nil)
			require.NoError(t, err)
			got, err := f.Match(testMessage(app))
			require.NoError(t, err)
			require.Equal(t, tt.want, got, "%s", f)
		})
	}
}

func TestFilterParameters(t *testing.T) {
	t.Parallel()
	f, err := CompileFilter("sys.Label = @label AND user.Quantity > @min AND color LIKE @pat ESCAPE @esc", &CompileOptions{
		Parameters: map[string]any{"@label": "Electronics", "MIN": 5, "@pat": "bl!_u%", "esc": "!"},
	})
	require.NoError(t, err)
	ok, err := f.Match(testMessage(map[string]any{"Quantity": int64(6), "color": "bl_ue"}))
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = f.Match(testMessage(map[string]any{"Quantity": int64(5), "color": "bl_ue"}))
	require.NoError(t, err)
	require.False(t, ok)

	_, err = CompileFilter("x = @p", &CompileOptions{Parameters: map[string]any{"p": []int{1}}})
	require.EqualError(t, err, "sqlrule: 1:5: parameter @p has unsupported type []int")
}

func TestFilterEvaluationErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr, want string
	}{
		{"x / 0 = 1", "sqlrule: evaluation failed: 1:3: division by zero"},
		{"x % 0 = 1", "sqlrule: evaluation failed: 1:3: division by zero"},
		{"s * 2 = 1", "sqlrule: evaluation failed: 1:3: operator * cannot be applied to String and Int64"},
		{"-s = 1", "sqlrule: evaluation failed: 1:1: operator - cannot be applied to String"},
		{"property('sys.Nope') = 1", "sqlrule: evaluation failed: 1:1: unknown system property sys.Nope"},
		{"property(x) = 1", "sqlrule: evaluation failed: 1:1: property() needs a string, got Int64"},
		{"s LIKE 'a' ESCAPE s", "sqlrule: evaluation failed: 1:3: ESCAPE must be a string of one character, got String \"str\""},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			t.Parallel()
			f, err := CompileFilter(tt.expr, nil)
			require.NoError(t, err)
			ok, err := f.Match(testMessage(map[string]any{"x": int64(1), "s": "str"}))
			require.False(t, ok)
			require.ErrorIs(t, err, ErrEvaluation)
			require.EqualError(t, err, tt.want)
		})
	}
	// Division by zero of floats is IEEE, not an error.
	f, err := CompileFilter("1.0 / 0 > 1E308", nil)
	require.NoError(t, err)
	ok, err := f.Match(testMessage(nil))
	require.NoError(t, err)
	require.True(t, ok)
	// Short-circuit: the right side of a decided AND is not evaluated.
	f, err = CompileFilter("1 = 0 AND 1 / 0 = 1", nil)
	require.NoError(t, err)
	ok, err = f.Match(testMessage(nil))
	require.NoError(t, err)
	require.False(t, ok)
}

func TestTrueFalseFilters(t *testing.T) {
	t.Parallel()
	for _, m := range []*amqp.Message{testMessage(nil), {}} {
		ok, err := TrueFilter.Match(m)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = FalseFilter.Match(m)
		require.NoError(t, err)
		require.False(t, ok)
	}
	require.Equal(t, "1 = 1", TrueFilter.String())
}

func TestFilterOnBareMessage(t *testing.T) {
	t.Parallel()
	// A message with no properties, header or annotations at all.
	f, err := CompileFilter("sys.SessionId IS NULL AND sys.MessageId IS NULL AND sys.DeliveryCount = 0 AND "+
		"sys.SequenceNumber IS NULL AND sys.TimeToLive IS NULL AND sys.ExpiresAtUtc IS NULL AND sys.Size = 0 AND NOT EXISTS(a)", nil)
	require.NoError(t, err)
	ok, err := f.Match(&amqp.Message{})
	require.NoError(t, err)
	require.True(t, ok)
}

func TestFilterConcurrentUse(t *testing.T) {
	t.Parallel()
	f, err := CompileFilter("color LIKE 'b%' AND n % 2 = 0", nil)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				ok, err := f.Match(testMessage(map[string]any{"color": "blue", "n": int64(i + j)}))
				if err != nil || ok != ((i+j)%2 == 0) {
					t.Errorf("match %d/%d: %v %v", i, j, ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

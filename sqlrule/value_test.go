package sqlrule

import (
	"math"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
)

// TestConcatenationFormatsLikeDotNet checks the text a value turns into when it
// is concatenated to a string.
func TestConcatenationFormatsLikeDotNet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"int64", int64(-42), "-42"},
		{"uint64 beyond int64", uint64(math.MaxUint64), "1.8446744073709552E+19"},
		{"float", 2.5, "2.5"},
		{"whole float", 3.0, "3"},
		{"small float", 0.0001, "0.0001"},
		{"tiny float", 0.00001, "1E-05"},
		{"large float", 1e15, "1E+15"},
		{"below 1e15", 123456789012345.0, "123456789012345"},
		{"float32", float32(0.5), "0.5"},
		{"NaN", math.NaN(), "NaN"},
		{"infinity", math.Inf(-1), "-Infinity"},
		{"bool", false, "False"},
		{"symbol", amqp.Symbol("sym"), "sym"},
		{"uuid", amqp.UUID{0xde, 0xad, 0xbe, 0xef}, "deadbeef-0000-0000-0000-000000000000"},
		{"binary", []byte{0xca, 0xfe}, "cafe"},
		{"timespan", 26*time.Hour + 3*time.Minute + 4*time.Second + 5*time.Millisecond, "1.02:03:04.0050000"},
		{"short timespan", 90 * time.Minute, "01:30:00"},
		{"negative timespan", -time.Second, "-00:00:01"},
		{"datetime", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "01/02/2026 03:04:05"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := CompileFilter("'<' + v + '>' = @want", &CompileOptions{Parameters: map[string]any{
				"want": "<" + tt.want + ">",
			}})
			require.NoError(t, err)
			ok, err := f.Match(&amqp.Message{ApplicationProperties: map[string]any{"v": tt.v}})
			require.NoError(t, err)
			require.True(t, ok, "got %q", fromGo(tt.v).format())
		})
	}
}

func TestMessageIDsReadAsStrings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id   any
		want string
	}{
		{"plain", "plain"},
		{uint64(12345), "12345"},
		{amqp.UUID{0x01}, "01000000-0000-0000-0000-000000000000"},
		{[]byte{0xab, 0x01}, "ab01"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			m := &amqp.Message{Properties: &amqp.MessageProperties{MessageID: tt.id, CorrelationID: tt.id}}
			f, err := CompileFilter("sys.MessageId = @want AND sys.CorrelationId = @want", &CompileOptions{
				Parameters: map[string]any{"want": tt.want},
			})
			require.NoError(t, err)
			ok, err := f.Match(m)
			require.NoError(t, err)
			require.True(t, ok)
			ok, err = CorrelationFilter{MessageID: tt.want, CorrelationID: tt.want}.Match(m)
			require.NoError(t, err)
			require.True(t, ok)
		})
	}
}

func TestTimeArithmetic(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f, err := CompileFilter("@t + @d = @t2 AND @d + @t = @t2 AND @t2 - @d = @t AND @t2 - @t = @d AND "+
		"@d + @d - @d = @d AND -@d < @d AND +@d = @d AND @d > @zero", &CompileOptions{Parameters: map[string]any{
		"t": at, "t2": at.Add(time.Hour), "d": time.Hour, "zero": time.Duration(0),
	}})
	require.NoError(t, err)
	ok, err := f.Match(&amqp.Message{})
	require.NoError(t, err)
	require.True(t, ok)

	f, err = CompileFilter("@t + 1 = 1", &CompileOptions{Parameters: map[string]any{"t": at}})
	require.NoError(t, err)
	_, err = f.Match(&amqp.Message{})
	require.EqualError(t, err, "sqlrule: evaluation failed: 1:4: operator + cannot be applied to DateTime and Int64")
}

package sqlrule

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCompileFilterCanonicalForm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"1=1", "1 = 1"},
		{"color = 'blue' and quantity = 10", "color = 'blue' AND quantity = 10"},
		{"sys.Label LIKE 'de%'", "sys.Label LIKE 'de%'"},
		{"SYS.label like 'de%' escape '!'", "sys.label LIKE 'de%' ESCAPE '!'"},
		{"user.StoreId NOT IN ('Store1','Store2')", "user.StoreId NOT IN ('Store1', 'Store2')"},
		{"[my prop] = 'x' OR \"other-prop\" <> 2", "[my prop] = 'x' OR [other-prop] <> 2"},
		{"a != b", "a <> b"},
		{"NOT (a = 1 OR b = 2) AND c IS NOT NULL", "NOT (a = 1 OR b = 2) AND c IS NOT NULL"},
		{"(a + b) * c - -d / 2 % 3 > 1.5e3", "(a + b) * c - -d / 2 % 3 > 1500.0"},
		{"a - (b - c) = a - b - c", "a - (b - c) = a - b - c"},
		{"a = 1 AND (b = 2 OR c = 3)", "a = 1 AND (b = 2 OR c = 3)"},
		{"(a = 1 AND b = 2) OR c = 3", "a = 1 AND b = 2 OR c = 3"},
		{"EXISTS ( user.SessionName ) and exists([TransactionId])", "EXISTS(user.SessionName) AND EXISTS(TransactionId)"},
		{"s = 'it''s'", "s = 'it''s'"},
		{"x = @p1", "x = @p1"},
		{"id = NEWID() or property('a' + 'b') = 1", "id = newid() OR property('a' + 'b') = 1"},
		{"TRUE", "TRUE"},
		{"[a]]b] = .5", "[a]]b] = 0.5"},
		{"[AND] = 1", "[AND] = 1"},
		{"[sys].[To] = 'x'", "sys.To = 'x'"},
		{"x = 1.0 AND y = 10.", "x = 1.0 AND y = 10.0"},
		{"straße = 1 AND _x", ""}, // error: identifiers start with a letter
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			f, err := CompileFilter(tt.in, &CompileOptions{Parameters: map[string]any{"@p1": 1}})
			if tt.want == "" {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, f.String())
			require.Equal(t, tt.in, f.Expression())
			// The canonical form compiles to the same tree.
			g, err := CompileFilter(f.String(), &CompileOptions{Parameters: map[string]any{"p1": 1}})
			require.NoError(t, err)
			require.Equal(t, dumpNode(f.root), dumpNode(g.root))
		})
	}
}

func TestCompileFilterErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"a = 1 AND", "sqlrule: 1:10: expected expression after AND, found EOF"},
		{"", "sqlrule: 1:1: expected predicate, found EOF"},
		{"   ", "sqlrule: 1:4: expected predicate, found EOF"},
		{"a =", "sqlrule: 1:4: expected expression after '=', found EOF"},
		{"a = 1 = 2", "sqlrule: 1:7: expected operator or EOF after number 1, found '='"},
		{"a = 'abc", "sqlrule: 1:5: unterminated string"},
		{"[abc = 1", "sqlrule: 1:1: unterminated delimited identifier"},
		{"a = 1\n  AND b ! 2", "sqlrule: 2:9: unexpected character '!' (did you mean '!='?)"},
		{"sys.Nope = 1", "sqlrule: 1:5: unknown system property sys.Nope"},
		{"foo.bar = 1", "sqlrule: 1:1: unknown scope foo (want sys or user)"},
		{"a IN ()", "sqlrule: 1:7: expected expression after '(', found ')'"},
		{"a IN (1, 2", "sqlrule: 1:11: expected ',' or ')' after number 2, found EOF"},
		{"a IN 1", "sqlrule: 1:6: expected '(' after IN, found number 1"},
		{"a IS 1", "sqlrule: 1:6: expected NULL after IS, found number 1"},
		{"a NOT 1", "sqlrule: 1:7: expected LIKE or IN after NOT, found number 1"},
		{"a LIKE 'x' ESCAPE 'ab'", "sqlrule: 1:19: ESCAPE must be a string of one character, found 'ab'"},
		{"a LIKE 'x!' ESCAPE '!'", "sqlrule: 1:3: LIKE pattern ends with the escape character"},
		{"x = @missing", "sqlrule: 1:5: parameter @missing is not defined"},
		{"x = 99999999999999999999", "sqlrule: 1:5: integer constant 99999999999999999999 is out of range [-9223372036854775808, 9223372036854775807]"},
		{"x = 1e999", "sqlrule: 1:5: number 1e999 is out of range"},
		{"x = 1e", "sqlrule: 1:5: malformed number \"1e\": expected digits in the exponent"},
		{"x = foo(1)", "sqlrule: 1:5: unknown function foo (want newid or property)"},
		{"EXISTS(1)", "sqlrule: 1:8: expected property after '(', found number 1"},
		{"a + 1", "sqlrule: 1:1: a filter must be a predicate (a comparison, LIKE, IN, IS NULL, EXISTS or a boolean), not an arithmetic or constant expression"},
		{"newid()", "sqlrule: 1:1: a filter must be a predicate (a comparison, LIKE, IN, IS NULL, EXISTS or a boolean), not an arithmetic or constant expression"},
		{"'abc'", "sqlrule: 1:1: a filter must be a predicate (a comparison, LIKE, IN, IS NULL, EXISTS or a boolean), not an arithmetic or constant expression"},
		{"and = 1", "sqlrule: 1:1: expected expression, found AND"},
		{"  or", "sqlrule: 1:3: expected expression, found OR"},
		{"(a = 1", "sqlrule: 1:7: expected ')' after number 1, found EOF"},
		{"x = @", "sqlrule: 1:5: expected parameter name after '@'"},
		{"x = []", "sqlrule: 1:5: empty identifier"},
		{"x = 'a' \xff", "sqlrule: 1:9: invalid UTF-8"},
		{"sys. = 1", "sqlrule: 1:6: expected property name after '.', found '='"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			_, err := CompileFilter(tt.in, nil)
			require.EqualError(t, err, tt.want)
			var se *SyntaxError
			require.ErrorAs(t, err, &se)
		})
	}
}

func TestCompileLengthLimit(t *testing.T) {
	t.Parallel()
	ok := "a = '" + strings.Repeat("é", MaxExpressionLength-6) + "'"
	_, err := CompileFilter(ok, nil)
	require.NoError(t, err, "the limit counts characters, not bytes")

	_, err = CompileFilter(ok+" ", nil)
	require.ErrorIs(t, err, ErrTooLong)
	require.EqualError(t, err, "sqlrule: expression too long: 1025 characters, the limit is 1024")

	_, err = CompileAction("SET a = '"+strings.Repeat("x", MaxExpressionLength)+"'", nil)
	require.True(t, errors.Is(err, ErrTooLong))
}

func TestCompileActionCanonicalForm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"SET a = 1", "SET a = 1"},
		{"set a = 1;", "SET a = 1"},
		{"SET a = 1; REMOVE b; SET sys.Label = 'x' + b;", "SET a = 1; REMOVE b; SET sys.Label = 'x' + b"},
		{"SET a = 1 SET b = 2", "SET a = 1; SET b = 2"},
		{"SET sys.SessionId = user.SessionName + '_' + user.TransactionId + '_' + user.InstanceId",
			"SET sys.SessionId = user.SessionName + '_' + user.TransactionId + '_' + user.InstanceId"},
		{"SET x = (a = 1)", "SET x = (a = 1)"},
		{"SET [HR-Employee] = -(1 + 2)", "SET [HR-Employee] = -(1 + 2)"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			a, err := CompileAction(tt.in, nil)
			require.NoError(t, err)
			require.Equal(t, tt.want, a.String())
			b, err := CompileAction(a.String(), nil)
			require.NoError(t, err)
			require.Equal(t, a.String(), b.String())
		})
	}
}

func TestCompileActionErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"", "sqlrule: 1:1: expected SET or REMOVE, found EOF"},
		{";", "sqlrule: 1:1: expected SET or REMOVE, found ';'"},
		{"SET a = 1;;", "sqlrule: 1:11: expected ';', SET, REMOVE or EOF after ';', found ';'"},
		{"SET a 1", "sqlrule: 1:7: expected '=' after identifier a, found number 1"},
		{"SET = 1", "sqlrule: 1:5: expected property after SET, found '='"},
		{"SET a = 1 = 2", "sqlrule: 1:11: expected ';', SET, REMOVE or EOF after number 1, found '='"},
		{"SET sys.SequenceNumber = 1", "sqlrule: 1:5: system property sys.SequenceNumber is read-only"},
		{"REMOVE sys.DeliveryCount", "sqlrule: 1:8: system property sys.DeliveryCount is read-only"},
		{"SET sys.Foo = 1", "sqlrule: 1:9: unknown system property sys.Foo"},
		{"SET a = ", "sqlrule: 1:9: expected expression after '=', found EOF"},
		{"a = 1", "sqlrule: 1:1: expected SET or REMOVE, found identifier a"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			_, err := CompileAction(tt.in, nil)
			require.EqualError(t, err, tt.want)
		})
	}
}

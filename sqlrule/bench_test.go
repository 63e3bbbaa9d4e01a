package sqlrule

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func BenchmarkFilterMatch(b *testing.B) {
	app := map[string]any{"SessionName": "orders", "TransactionId": int64(7), "color": "blue", "quantity": int64(12)}
	for _, bm := range []struct{ name, expr string }{
		{"gjura", "EXISTS(user.SessionName) AND EXISTS(user.TransactionId)"},
		{"mixed", "sys.Label LIKE 'Elec%' AND color IN ('red', 'green', 'blue') AND quantity * 2 > 20.5"},
		{"missing", "missing = 1 OR sys.SessionId = 'nope'"},
	} {
		b.Run(bm.name, func(b *testing.B) {
			f, err := CompileFilter(bm.expr, nil)
			require.NoError(b, err)
			m := testMessage(app)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.Match(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkActionApply(b *testing.B) {
	a, err := CompileAction("SET sys.SessionId = user.SessionName + '_' + user.TransactionId + '_' + user.InstanceId", nil)
	require.NoError(b, err)
	m := testMessage(map[string]any{"SessionName": "orders", "TransactionId": int64(7), "InstanceId": "i-3"})
	b.ReportAllocs()
	for b.Loop() {
		if err := a.Apply(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompileFilter(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CompileFilter("sys.Label LIKE 'Elec%' AND color IN ('red', 'green', 'blue') AND quantity * 2 > 20.5", nil); err != nil {
			b.Fatal(err)
		}
	}
}

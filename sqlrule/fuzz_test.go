package sqlrule

import (
	"errors"
	"testing"
	"unicode/utf8"
)

var fuzzSeeds = []string{
	"1=1",
	"color = 'blue' AND quantity = 10",
	"sys.Label LIKE 'de%' ESCAPE '!' OR NOT sys.To IN ('a', 'b')",
	"EXISTS(user.SessionName) AND EXISTS(user.TransactionId)",
	"[my prop] IS NOT NULL AND \"q\"\"x\" <> -1.5E-3 * (a + b) % 2",
	"x = @p OR property('sys.Label') = newid()",
	"SET sys.SessionId = user.SessionName + '_' + user.TransactionId + '_' + user.InstanceId",
	"SET a = 1; REMOVE b; SET [c]]d] = -(-2)",
	"a NOT LIKE b ESCAPE c AND d NOT IN (1, 2.0, 'x', NULL, TRUE)",
	"((((a))))=.5e+3",
	"a = 1\n AND\tb = 'line\nbreak'",
}

// FuzzParse checks that the parser never panics, that its errors carry a
// position inside the input, and that a parsed filter or action printed with
// String parses back to the same tree.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	msg := testMessage(map[string]any{"a": int64(1), "b": "x", "color": "blue", "SessionName": "s"})
	f.Fuzz(func(t *testing.T, src string) {
		root, err := parseFilter(src)
		checkParseError(t, src, err)
		if err == nil {
			out := dumpText(root)
			if utf8.RuneCountInString(out) <= MaxExpressionLength {
				again, err := parseFilter(out)
				if err != nil {
					t.Fatalf("String() of %q is %q, which does not parse: %v", src, out, err)
				}
				if d1, d2 := dumpNode(root), dumpNode(again); d1 != d2 {
					t.Fatalf("round trip of %q via %q changed the tree:\n%s\n%s", src, out, d1, d2)
				}
			}
			_, _ = root.eval(msg) // must not panic
			if f, err := CompileFilter(src, nil); err == nil {
				_, _ = f.Match(msg)
			}
		}

		stmts, err := parseAction(src)
		checkParseError(t, src, err)
		if err == nil {
			a := &Action{src: src, stmts: stmts}
			out := a.String()
			if utf8.RuneCountInString(out) <= MaxExpressionLength {
				again, err := parseAction(out)
				if err != nil {
					t.Fatalf("String() of action %q is %q, which does not parse: %v", src, out, err)
				}
				if out2 := (&Action{stmts: again}).String(); out2 != out {
					t.Fatalf("action round trip of %q: %q then %q", src, out, out2)
				}
			}
			_ = a.Apply(testMessage(nil)) // must not panic
		}
	})
}

func dumpText(n node) string { return (&Filter{root: n}).String() }

func checkParseError(t *testing.T, src string, err error) {
	t.Helper()
	if err == nil || errors.Is(err, ErrTooLong) {
		return
	}
	var se *SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("parse %q: error %v is not a *SyntaxError", src, err)
	}
	if se.Offset < 0 || se.Offset > len(src) || se.Line < 1 || se.Column < 1 {
		t.Fatalf("parse %q: bad position in %v (offset %d)", src, err, se.Offset)
	}
}

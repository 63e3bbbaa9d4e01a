package sqlrule

import (
	"strings"

	"github.com/Azure/go-amqp"
)

// Action is a compiled SQL rule action. It is immutable and safe for concurrent use.
type Action struct {
	src   string
	stmts []statement
}

// CompileAction parses and checks a SQL rule action: SET and REMOVE
// statements, each optionally followed by ';'. Errors are *SyntaxError values
// (with a position), or wrap ErrTooLong.
func CompileAction(expr string, opts *CompileOptions) (*Action, error) {
	stmts, err := parseAction(expr)
	if err != nil {
		return nil, err
	}
	for _, st := range stmts {
		if st.x == nil {
			continue
		}
		if err := bind(expr, st.x, opts); err != nil {
			return nil, err
		}
	}
	return &Action{src: expr, stmts: stmts}, nil
}

// Apply runs the statements in order against m, changing it in place; each
// statement sees the effect of the ones before it. Errors wrap ErrEvaluation;
// on error m may be partly changed.
func (a *Action) Apply(m *amqp.Message) error {
	for _, st := range a.stmts {
		if err := st.apply(m); err != nil {
			return wrapEval(a.src, err)
		}
	}
	return nil
}

func (st statement) apply(m *amqp.Message) error {
	t := st.target
	v := null
	if st.x != nil {
		var err error
		if v, err = st.x.eval(m); err != nil {
			return err
		}
	}
	if t.sys != nil {
		switch v.k {
		case kNull:
			t.sys.set(m, nil)
		case kString:
			s := v.s
			t.sys.set(m, &s)
		default:
			return evalErrorf(st.pos, "cannot assign %s to sys.%s, which is a String", v.typeName(), t.sys.name)
		}
		return nil
	}
	key, exists := userKey(m, t.name)
	if st.x == nil { // REMOVE
		if exists {
			delete(m.ApplicationProperties, key)
		}
		return nil
	}
	if v.k == kDuration {
		return evalErrorf(st.pos, "cannot store a TimeSpan in application property %s", quoteIdent(t.name))
	}
	if !exists {
		key = t.name
	} else if v.k == kInt {
		// Implicit conversion to the existing property's type where C# has one.
		switch m.ApplicationProperties[key].(type) {
		case float64:
			v = floatValue(float64(v.n))
		case float32:
			v = value{k: kOther, o: float32(v.n)}
		}
	}
	if m.ApplicationProperties == nil {
		m.ApplicationProperties = map[string]any{}
	}
	m.ApplicationProperties[key] = v.toGo()
	return nil
}

// String returns the action in canonical form, statements separated by "; ".
func (a *Action) String() string {
	var b strings.Builder
	writeStatements(&b, a.stmts)
	return b.String()
}

// Expression returns the expression as given to CompileAction.
func (a *Action) Expression() string { return a.src }

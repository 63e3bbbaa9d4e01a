package sqlrule

import (
	"fmt"
	"strings"

	"github.com/Azure/go-amqp"
)

// CompileOptions are the optional settings of CompileFilter and CompileAction.
type CompileOptions struct {
	// Parameters are the values of @name parameters, keyed "@name" or "name"
	// (matched case-insensitively). Allowed types are those of Service Bus,
	// string, integers, bool and float64, plus time.Time, time.Duration and
	// amqp.UUID. A parameter the expression uses but the map lacks is a
	// compile error.
	Parameters map[string]any
}

// Filter is a compiled SQL filter. It is immutable and safe for concurrent use.
type Filter struct {
	src  string
	root node
}

// TrueFilter matches every message and FalseFilter none, as the service's
// filters of those names (SQL "1=1" and "1=0").
var (
	TrueFilter  = mustCompileFilter("1=1")
	FalseFilter = mustCompileFilter("1=0")
)

func mustCompileFilter(expr string) *Filter {
	f, err := CompileFilter(expr, nil)
	if err != nil {
		panic(err)
	}
	return f
}

// CompileFilter parses and checks a SQL filter expression. Errors are
// *SyntaxError values (with a position), or wrap ErrTooLong.
func CompileFilter(expr string, opts *CompileOptions) (*Filter, error) {
	root, err := parseFilter(expr)
	if err != nil {
		return nil, err
	}
	if err := bind(expr, root, opts); err != nil {
		return nil, err
	}
	return &Filter{src: expr, root: root}, nil
}

// Match reports whether m satisfies the filter: the expression is TRUE (FALSE
// and unknown do not match). Errors wrap ErrEvaluation.
func (f *Filter) Match(m *amqp.Message) (bool, error) {
	v, err := f.root.eval(m)
	if err != nil {
		return false, wrapEval(f.src, err)
	}
	return v.isTrue(), nil
}

// String returns the filter in canonical form: keywords upper-cased,
// parentheses only where needed. Compiling it again gives the same filter.
func (f *Filter) String() string {
	var b strings.Builder
	f.root.write(&b)
	return b.String()
}

// Expression returns the expression as given to CompileFilter.
func (f *Filter) Expression() string { return f.src }

// bind resolves parameters and compiles constant LIKE patterns.
func bind(src string, root node, opts *CompileOptions) error {
	var params map[string]any
	if opts != nil {
		params = opts.Parameters
	}
	var err error
	walk(root, func(n node) {
		if err != nil {
			return
		}
		switch n := n.(type) {
		case *paramNode:
			v, ok := lookupParam(params, n.name)
			if !ok {
				err = newSyntaxError(src, n.pos, "parameter @%s is not defined", n.name)
				return
			}
			n.v = fromGo(v)
			if _, isUUID := v.(amqp.UUID); n.v.k == kOther && !isUUID {
				err = newSyntaxError(src, n.pos, "parameter @%s has unsupported type %T", n.name, v)
			}
		case *likeNode:
			err = compileConstLike(src, n)
		}
	})
	return err
}

func compileConstLike(src string, n *likeNode) error {
	pat, ok := constant(n.pat)
	if !ok || pat.k != kString {
		return nil
	}
	esc := rune(-1)
	if n.esc != nil {
		ev, ok := constant(n.esc)
		if !ok {
			return nil
		}
		if ev.k == kNull {
			return nil // unknown at every evaluation
		}
		r, ok := escapeRune(ev.s)
		if ev.k != kString || !ok {
			return newSyntaxError(src, n.pos, "ESCAPE must be a string of one character, got %s %q", ev.typeName(), ev.format())
		}
		esc = r
	}
	p, err := compileLike(pat.s, esc)
	if err != nil {
		return newSyntaxError(src, n.pos, "%v", err)
	}
	n.compiled = p
	return nil
}

// constant returns the value of a literal or bound parameter.
func constant(n node) (value, bool) {
	switch n := n.(type) {
	case *litNode:
		return n.v, true
	case *paramNode:
		return n.v, true
	}
	return null, false
}

func lookupParam(params map[string]any, name string) (any, bool) {
	for _, k := range []string{"@" + name, name} {
		if v, ok := params[k]; ok {
			return v, true
		}
	}
	for k, v := range params {
		if strings.EqualFold(strings.TrimPrefix(k, "@"), name) {
			return v, true
		}
	}
	return nil, false
}

// walk calls fn for every node below n and then for n (children first).
func walk(n node, fn func(node)) {
	switch n := n.(type) {
	case *unaryNode:
		walk(n.x, fn)
	case *binaryNode:
		walk(n.l, fn)
		walk(n.r, fn)
	case *likeNode:
		walk(n.x, fn)
		walk(n.pat, fn)
		if n.esc != nil {
			walk(n.esc, fn)
		}
	case *inNode:
		walk(n.x, fn)
		for _, e := range n.list {
			walk(e, fn)
		}
	case *isNullNode:
		walk(n.x, fn)
	case *existsNode:
		walk(n.p, fn)
	case *callNode:
		for _, a := range n.args {
			walk(a, fn)
		}
	}
	fn(n)
}

// dumpNode renders the tree structure without positions (for tests).
func dumpNode(n node) string {
	var b strings.Builder
	n.dump(&b)
	return b.String()
}

var (
	_ fmt.Stringer = (*Filter)(nil)
	_ fmt.Stringer = (*Action)(nil)
)

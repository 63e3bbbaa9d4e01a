package sqlrule

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/Azure/go-amqp"
)

// node is an expression of the syntax tree. Nodes keep the byte offset of
// their first (or operator) token for error messages.
type node interface {
	eval(m *amqp.Message) (value, error)
	// write appends the canonical source text.
	write(b *strings.Builder)
	// prec is the binding strength used to decide where parentheses go.
	prec() int
	// dump appends a position-free structural form (for tests).
	dump(b *strings.Builder)
}

// Precedence levels, loosest first.
const (
	precOr = iota + 1
	precAnd
	precNot
	precCmp
	precAdd
	precMul
	precUnary
	precPrimary
)

type scope uint8

const (
	scopeNone scope = iota
	scopeUser
	scopeSys
)

type (
	litNode struct {
		pos int
		v   value
	}
	paramNode struct {
		pos  int
		name string
		v    value // bound at compile time
	}
	propNode struct {
		pos   int
		scope scope
		name  string
		sys   *sysProp // scopeSys only
	}
	unaryNode struct {
		pos int
		op  tokenKind // tokPlus, tokMinus, tokNot
		x   node
	}
	binaryNode struct {
		pos  int
		op   tokenKind // arithmetic, comparison, tokAnd, tokOr
		l, r node
	}
	likeNode struct {
		pos         int
		not         bool
		x, pat, esc node // esc may be nil
		compiled    *likePattern
	}
	inNode struct {
		pos  int
		not  bool
		x    node
		list []node
	}
	isNullNode struct {
		pos int
		not bool
		x   node
	}
	existsNode struct {
		pos int
		p   *propNode
	}
	callNode struct {
		pos  int
		fn   string // "newid" or "property"
		args []node
	}
)

func (*litNode) prec() int    { return precPrimary }
func (*paramNode) prec() int  { return precPrimary }
func (*propNode) prec() int   { return precPrimary }
func (*existsNode) prec() int { return precPrimary }
func (*callNode) prec() int   { return precPrimary }
func (*likeNode) prec() int   { return precCmp }
func (*inNode) prec() int     { return precCmp }
func (*isNullNode) prec() int { return precCmp }

func (n *unaryNode) prec() int {
	if n.op == tokNot {
		return precNot
	}
	return precUnary
}

func (n *binaryNode) prec() int {
	switch n.op {
	case tokOr:
		return precOr
	case tokAnd:
		return precAnd
	case tokPlus, tokMinus:
		return precAdd
	case tokStar, tokSlash, tokPercent:
		return precMul
	}
	return precCmp
}

// writeAt writes n, parenthesised when it binds looser than min.
func writeAt(b *strings.Builder, n node, min int) {
	if n.prec() < min {
		b.WriteByte('(')
		n.write(b)
		b.WriteByte(')')
		return
	}
	n.write(b)
}

func opString(k tokenKind) string {
	if s, ok := opText[k]; ok {
		return s
	}
	for s, kw := range keywords {
		if kw == k {
			return s
		}
	}
	return "?"
}

func (n *litNode) write(b *strings.Builder) { b.WriteString(literalText(n.v)) }

func literalText(v value) string {
	switch v.k {
	case kNull:
		return "NULL"
	case kBool:
		if v.n != 0 {
			return "TRUE"
		}
		return "FALSE"
	case kInt:
		return strconv.FormatInt(v.n, 10)
	case kFloat:
		s := strconv.FormatFloat(v.f, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eEIN") {
			s += ".0"
		}
		return s
	case kString:
		return quoteString(v.s)
	}
	return v.format()
}

func (n *paramNode) write(b *strings.Builder) { b.WriteString("@" + n.name) }

func (n *propNode) write(b *strings.Builder) {
	switch n.scope {
	case scopeSys:
		b.WriteString("sys.")
	case scopeUser:
		b.WriteString("user.")
	}
	b.WriteString(quoteIdent(n.name))
}

func (n *unaryNode) write(b *strings.Builder) {
	if n.op == tokNot {
		b.WriteString("NOT ")
		writeAt(b, n.x, precNot)
		return
	}
	b.WriteString(opString(n.op))
	writeAt(b, n.x, precUnary)
}

func (n *binaryNode) write(b *strings.Builder) {
	p := n.prec()
	left, right := p, p+1 // left-associative
	if p == precCmp {
		left, right = precAdd, precAdd
	}
	writeAt(b, n.l, left)
	b.WriteString(" " + opString(n.op) + " ")
	writeAt(b, n.r, right)
}

func (n *likeNode) write(b *strings.Builder) {
	writeAt(b, n.x, precAdd)
	if n.not {
		b.WriteString(" NOT")
	}
	b.WriteString(" LIKE ")
	writeAt(b, n.pat, precAdd)
	if n.esc != nil {
		b.WriteString(" ESCAPE ")
		writeAt(b, n.esc, precAdd)
	}
}

func (n *inNode) write(b *strings.Builder) {
	writeAt(b, n.x, precAdd)
	if n.not {
		b.WriteString(" NOT")
	}
	b.WriteString(" IN (")
	for i, e := range n.list {
		if i > 0 {
			b.WriteString(", ")
		}
		writeAt(b, e, precAdd)
	}
	b.WriteByte(')')
}

func (n *isNullNode) write(b *strings.Builder) {
	writeAt(b, n.x, precAdd)
	if n.not {
		b.WriteString(" IS NOT NULL")
		return
	}
	b.WriteString(" IS NULL")
}

func (n *existsNode) write(b *strings.Builder) {
	b.WriteString("EXISTS(")
	n.p.write(b)
	b.WriteByte(')')
}

func (n *callNode) write(b *strings.Builder) {
	b.WriteString(n.fn + "(")
	for i, a := range n.args {
		if i > 0 {
			b.WriteString(", ")
		}
		a.write(b)
	}
	b.WriteByte(')')
}

// dump forms: (op child...), with literals and names in Go syntax.

func (n *litNode) dump(b *strings.Builder) { fmt.Fprintf(b, "(lit %d %q)", n.v.k, literalText(n.v)) }

func (n *paramNode) dump(b *strings.Builder) { fmt.Fprintf(b, "(param %q)", n.name) }

func (n *propNode) dump(b *strings.Builder) { fmt.Fprintf(b, "(prop %d %q)", n.scope, n.name) }

func (n *unaryNode) dump(b *strings.Builder) {
	fmt.Fprintf(b, "(unary %s ", opString(n.op))
	n.x.dump(b)
	b.WriteByte(')')
}

func (n *binaryNode) dump(b *strings.Builder) {
	fmt.Fprintf(b, "(%s ", opString(n.op))
	n.l.dump(b)
	b.WriteByte(' ')
	n.r.dump(b)
	b.WriteByte(')')
}

func (n *likeNode) dump(b *strings.Builder) {
	fmt.Fprintf(b, "(like %t ", n.not)
	n.x.dump(b)
	b.WriteByte(' ')
	n.pat.dump(b)
	if n.esc != nil {
		b.WriteByte(' ')
		n.esc.dump(b)
	}
	b.WriteByte(')')
}

func (n *inNode) dump(b *strings.Builder) {
	fmt.Fprintf(b, "(in %t ", n.not)
	n.x.dump(b)
	for _, e := range n.list {
		b.WriteByte(' ')
		e.dump(b)
	}
	b.WriteByte(')')
}

func (n *isNullNode) dump(b *strings.Builder) {
	fmt.Fprintf(b, "(isnull %t ", n.not)
	n.x.dump(b)
	b.WriteByte(')')
}

func (n *existsNode) dump(b *strings.Builder) {
	b.WriteString("(exists ")
	n.p.dump(b)
	b.WriteByte(')')
}

func (n *callNode) dump(b *strings.Builder) {
	fmt.Fprintf(b, "(call %s", n.fn)
	for _, a := range n.args {
		b.WriteByte(' ')
		a.dump(b)
	}
	b.WriteByte(')')
}

// quoteString renders s as a string constant.
func quoteString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// quoteIdent renders name as a regular identifier when it is one, otherwise
// as a delimited identifier.
func quoteIdent(name string) string {
	if isRegularIdent(name) {
		return name
	}
	return "[" + strings.ReplaceAll(name, "]", "]]") + "]"
}

func isRegularIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if i == 0 && !isIdentStart(r) || !isIdentPart(r) {
			return false
		}
	}
	_, kw := keywords[strings.ToUpper(s)]
	return !kw
}

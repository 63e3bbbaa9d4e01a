package sqlrule

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

type parser struct {
	lex  lexer
	tok  token // current token
	prev token // the token before it, for "after X" messages
}

func newParser(src string) (*parser, error) {
	if err := checkLength(src); err != nil {
		return nil, err
	}
	if !utf8.ValidString(src) {
		i := 0
		for i < len(src) {
			r, n := utf8.DecodeRuneInString(src[i:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			i += n
		}
		return nil, newSyntaxError(src, i, "invalid UTF-8")
	}
	p := &parser{lex: lexer{src: src}, tok: token{pos: -1}}
	if err := p.advance(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *parser) advance() error {
	t, err := p.lex.next()
	if err != nil {
		return err
	}
	p.prev, p.tok = p.tok, t
	return nil
}

func (p *parser) errorf(format string, args ...any) error {
	return newSyntaxError(p.lex.src, p.tok.pos, format, args...)
}

// expected reports that the current token is not what was expected.
func (p *parser) expected(what string) error {
	if p.prev.pos < 0 { // nothing before the current token
		return p.errorf("expected %s, found %s", what, p.tok.describe())
	}
	return p.errorf("expected %s after %s, found %s", what, p.prev.describe(), p.tok.describe())
}

func (p *parser) expect(k tokenKind) error {
	if p.tok.kind != k {
		return p.expected("'" + opString(k) + "'")
	}
	return p.advance()
}

// parseFilter parses a whole filter expression.
func parseFilter(src string) (node, error) {
	p, err := newParser(src)
	if err != nil {
		return nil, err
	}
	if p.tok.kind == tokEOF {
		return nil, p.errorf("expected predicate, found EOF")
	}
	n, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tokEOF {
		return nil, p.errorf("expected operator or EOF after %s, found %s", p.prev.describe(), p.tok.describe())
	}
	if !isPredicate(n) {
		return nil, newSyntaxError(src, 0, "a filter must be a predicate (a comparison, LIKE, IN, IS NULL, EXISTS or a boolean), not an arithmetic or constant expression")
	}
	return n, nil
}

// isPredicate rejects filters that can never be boolean: arithmetic and
// non-boolean constants.
func isPredicate(n node) bool {
	switch n := n.(type) {
	case *litNode:
		return n.v.k == kBool || n.v.k == kNull
	case *binaryNode:
		return n.prec() <= precCmp
	case *unaryNode:
		return n.op == tokNot
	case *callNode:
		return n.fn != "newid"
	}
	return true
}

func (p *parser) parseOr() (node, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.tok.kind == tokOr {
		pos := p.tok.pos
		if err := p.advance(); err != nil {
			return nil, err
		}
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &binaryNode{pos: pos, op: tokOr, l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseAnd() (node, error) {
	l, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.tok.kind == tokAnd {
		pos := p.tok.pos
		if err := p.advance(); err != nil {
			return nil, err
		}
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		l = &binaryNode{pos: pos, op: tokAnd, l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseNot() (node, error) {
	if p.tok.kind != tokNot {
		return p.parseCmp()
	}
	pos := p.tok.pos
	if err := p.advance(); err != nil {
		return nil, err
	}
	x, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	return &unaryNode{pos: pos, op: tokNot, x: x}, nil
}

func (p *parser) parseCmp() (node, error) {
	l, err := p.parseAdd()
	if err != nil {
		return nil, err
	}
	pos := p.tok.pos
	switch k := p.tok.kind; k {
	case tokEq, tokNe, tokNe2, tokGt, tokGe, tokLt, tokLe:
		if err := p.advance(); err != nil {
			return nil, err
		}
		r, err := p.parseAdd()
		if err != nil {
			return nil, err
		}
		if k == tokNe2 {
			k = tokNe // != and <> are the same operator
		}
		return &binaryNode{pos: pos, op: k, l: l, r: r}, nil
	case tokIs:
		if err := p.advance(); err != nil {
			return nil, err
		}
		not := p.tok.kind == tokNot
		if not {
			if err := p.advance(); err != nil {
				return nil, err
			}
		}
		if p.tok.kind != tokNull {
			return nil, p.expected("NULL")
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		return &isNullNode{pos: pos, not: not, x: l}, nil
	case tokNot, tokLike, tokIn:
		not := k == tokNot
		if not {
			if err := p.advance(); err != nil {
				return nil, err
			}
			if p.tok.kind != tokLike && p.tok.kind != tokIn {
				return nil, p.expected("LIKE or IN")
			}
		}
		if p.tok.kind == tokLike {
			return p.parseLike(pos, not, l)
		}
		return p.parseIn(pos, not, l)
	}
	return l, nil
}

func (p *parser) parseLike(pos int, not bool, x node) (node, error) {
	if err := p.advance(); err != nil {
		return nil, err
	}
	pat, err := p.parseAdd()
	if err != nil {
		return nil, err
	}
	n := &likeNode{pos: pos, not: not, x: x, pat: pat}
	if p.tok.kind == tokEscape {
		if err := p.advance(); err != nil {
			return nil, err
		}
		escPos := p.tok.pos
		if n.esc, err = p.parseAdd(); err != nil {
			return nil, err
		}
		if lit, ok := n.esc.(*litNode); ok {
			if _, ok := escapeRune(lit.v.s); lit.v.k != kString || !ok {
				return nil, newSyntaxError(p.lex.src, escPos, "ESCAPE must be a string of one character, found %s", literalText(lit.v))
			}
		}
	}
	return n, nil
}

func (p *parser) parseIn(pos int, not bool, x node) (node, error) {
	if err := p.advance(); err != nil {
		return nil, err
	}
	if err := p.expect(tokLParen); err != nil {
		return nil, err
	}
	n := &inNode{pos: pos, not: not, x: x}
	for {
		e, err := p.parseAdd()
		if err != nil {
			return nil, err
		}
		n.list = append(n.list, e)
		if p.tok.kind != tokComma {
			break
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
	}
	if p.tok.kind != tokRParen {
		return nil, p.expected("',' or ')'")
	}
	return n, p.advance()
}

func (p *parser) parseAdd() (node, error) {
	l, err := p.parseMul()
	if err != nil {
		return nil, err
	}
	for p.tok.kind == tokPlus || p.tok.kind == tokMinus {
		op, pos := p.tok.kind, p.tok.pos
		if err := p.advance(); err != nil {
			return nil, err
		}
		r, err := p.parseMul()
		if err != nil {
			return nil, err
		}
		l = &binaryNode{pos: pos, op: op, l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseMul() (node, error) {
	l, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	for p.tok.kind == tokStar || p.tok.kind == tokSlash || p.tok.kind == tokPercent {
		op, pos := p.tok.kind, p.tok.pos
		if err := p.advance(); err != nil {
			return nil, err
		}
		r, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		l = &binaryNode{pos: pos, op: op, l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseUnary() (node, error) {
	if p.tok.kind != tokPlus && p.tok.kind != tokMinus {
		return p.parsePrimary()
	}
	op, pos := p.tok.kind, p.tok.pos
	if err := p.advance(); err != nil {
		return nil, err
	}
	x, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	return &unaryNode{pos: pos, op: op, x: x}, nil
}

func (p *parser) parsePrimary() (node, error) {
	t := p.tok
	switch t.kind {
	case tokLParen:
		if err := p.advance(); err != nil {
			return nil, err
		}
		n, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tokRParen {
			return nil, p.expected("')'")
		}
		return n, p.advance()
	case tokInt:
		n, err := strconv.ParseInt(t.text, 10, 64)
		if err != nil {
			return nil, p.errorf("integer constant %s is out of range [%d, %d]", t.text, int64(math.MinInt64), int64(math.MaxInt64))
		}
		return &litNode{pos: t.pos, v: intValue(n)}, p.advance()
	case tokFloat:
		f, err := strconv.ParseFloat(t.text, 64)
		if err != nil {
			return nil, p.errorf("number %s is out of range", t.text)
		}
		return &litNode{pos: t.pos, v: floatValue(f)}, p.advance()
	case tokString:
		return &litNode{pos: t.pos, v: stringValue(t.text)}, p.advance()
	case tokTrue, tokFalse:
		return &litNode{pos: t.pos, v: boolValue(t.kind == tokTrue)}, p.advance()
	case tokNull:
		return &litNode{pos: t.pos, v: null}, p.advance()
	case tokParam:
		return &paramNode{pos: t.pos, name: t.text}, p.advance()
	case tokExists:
		if err := p.advance(); err != nil {
			return nil, err
		}
		if err := p.expect(tokLParen); err != nil {
			return nil, err
		}
		if p.tok.kind != tokIdent && p.tok.kind != tokQuotedIdent {
			return nil, p.expected("property")
		}
		prop, err := p.parseProperty()
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tokRParen {
			return nil, p.expected("')'")
		}
		return &existsNode{pos: t.pos, p: prop}, p.advance()
	case tokIdent:
		if err := p.advance(); err != nil {
			return nil, err
		}
		if p.tok.kind == tokLParen {
			return p.parseCall(t)
		}
		return p.finishProperty(t)
	case tokQuotedIdent:
		if err := p.advance(); err != nil {
			return nil, err
		}
		return p.finishProperty(t)
	}
	return nil, p.expected("expression")
}

// parseProperty parses [scope .] name starting at the current token.
func (p *parser) parseProperty() (*propNode, error) {
	t := p.tok
	if err := p.advance(); err != nil {
		return nil, err
	}
	return p.finishProperty(t)
}

// finishProperty completes a property whose first identifier t has been consumed.
func (p *parser) finishProperty(t token) (*propNode, error) {
	if p.tok.kind != tokDot {
		return &propNode{pos: t.pos, name: t.text}, nil
	}
	var sc scope
	switch strings.ToLower(t.text) {
	case "sys":
		sc = scopeSys
	case "user":
		sc = scopeUser
	default:
		return nil, newSyntaxError(p.lex.src, t.pos, "unknown scope %s (want sys or user)", quoteIdent(t.text))
	}
	if err := p.advance(); err != nil {
		return nil, err
	}
	name := p.tok
	if name.kind != tokIdent && name.kind != tokQuotedIdent && !name.kind.isKeyword() {
		return nil, p.expected("property name")
	}
	if err := p.advance(); err != nil {
		return nil, err
	}
	n := &propNode{pos: t.pos, scope: sc, name: name.text}
	if sc == scopeSys {
		if n.sys = lookupSystemProperty(name.text); n.sys == nil {
			return nil, newSyntaxError(p.lex.src, name.pos, "unknown system property sys.%s", quoteIdent(name.text))
		}
	}
	return n, nil
}

// parseCall parses a function call; the name t is consumed and the current token is '('.
func (p *parser) parseCall(t token) (node, error) {
	fn := strings.ToLower(t.text)
	if err := p.advance(); err != nil {
		return nil, err
	}
	n := &callNode{pos: t.pos, fn: fn}
	switch fn {
	case "newid":
	case "property":
		arg, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		n.args = []node{arg}
	default:
		return nil, newSyntaxError(p.lex.src, t.pos, "unknown function %s (want newid or property)", t.text)
	}
	if p.tok.kind != tokRParen {
		return nil, p.expected("')'")
	}
	return n, p.advance()
}

// statement is one SET or REMOVE of an action; x is nil for REMOVE.
type statement struct {
	pos    int
	target *propNode
	x      node
}

// parseAction parses a whole action: statements, each optionally followed by ';'.
func parseAction(src string) ([]statement, error) {
	p, err := newParser(src)
	if err != nil {
		return nil, err
	}
	var out []statement
	for {
		if p.tok.kind == tokEOF && len(out) > 0 {
			return out, nil
		}
		st := statement{pos: p.tok.pos}
		switch p.tok.kind {
		case tokSet, tokRemove:
		default:
			if len(out) == 0 {
				return nil, p.errorf("expected SET or REMOVE, found %s", p.tok.describe())
			}
			return nil, p.expected("';', SET, REMOVE or EOF")
		}
		set := p.tok.kind == tokSet
		if err := p.advance(); err != nil {
			return nil, err
		}
		if p.tok.kind != tokIdent && p.tok.kind != tokQuotedIdent {
			return nil, p.expected("property")
		}
		if st.target, err = p.parseProperty(); err != nil {
			return nil, err
		}
		if sp := st.target.sys; sp != nil && sp.set == nil {
			return nil, newSyntaxError(src, st.target.pos, "system property sys.%s is read-only", sp.name)
		}
		if set {
			if err := p.expect(tokEq); err != nil {
				return nil, err
			}
			if st.x, err = p.parseAdd(); err != nil {
				return nil, err
			}
		}
		out = append(out, st)
		if p.tok.kind == tokSemicolon {
			if err := p.advance(); err != nil {
				return nil, err
			}
		}
	}
}

func writeStatements(b *strings.Builder, sts []statement) {
	for i, st := range sts {
		if i > 0 {
			b.WriteString("; ")
		}
		if st.x == nil {
			b.WriteString("REMOVE ")
			st.target.write(b)
			continue
		}
		b.WriteString("SET ")
		st.target.write(b)
		b.WriteString(" = ")
		writeAt(b, st.x, precAdd)
	}
}

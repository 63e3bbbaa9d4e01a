package sqlrule

import (
	"crypto/rand"
	"math"
	"strings"

	"github.com/Azure/go-amqp"
)

func (n *litNode) eval(*amqp.Message) (value, error)   { return n.v, nil }
func (n *paramNode) eval(*amqp.Message) (value, error) { return n.v, nil }

func (n *propNode) eval(m *amqp.Message) (value, error) {
	if n.sys != nil {
		return n.sys.get(m), nil
	}
	v, _ := userProperty(m, n.name)
	return v, nil
}

func (n *existsNode) eval(m *amqp.Message) (value, error) {
	if n.p.sys != nil {
		return boolValue(n.p.sys.get(m).k != kNull), nil
	}
	_, ok := userKey(m, n.p.name)
	return boolValue(ok), nil
}

func (n *isNullNode) eval(m *amqp.Message) (value, error) {
	v, err := n.x.eval(m)
	if err != nil {
		return null, err
	}
	return boolValue((v.k == kNull) != n.not), nil
}

func (n *unaryNode) eval(m *amqp.Message) (value, error) {
	v, err := n.x.eval(m)
	if err != nil || v.k == kNull {
		return null, err
	}
	switch n.op {
	case tokNot:
		if v.k != kBool {
			return null, nil
		}
		return boolValue(v.n == 0), nil
	case tokMinus:
		switch v.k {
		case kInt, kDuration:
			v.n = -v.n
			return v, nil
		case kFloat:
			v.f = -v.f
			return v, nil
		}
	case tokPlus:
		if isNumber(v) || v.k == kDuration {
			return v, nil
		}
	}
	return null, evalErrorf(n.pos, "operator %s cannot be applied to %s", opString(n.op), v.typeName())
}

func (n *binaryNode) eval(m *amqp.Message) (value, error) {
	if n.op == tokAnd || n.op == tokOr {
		return n.evalLogic(m)
	}
	l, err := n.l.eval(m)
	if err != nil {
		return null, err
	}
	r, err := n.r.eval(m)
	if err != nil {
		return null, err
	}
	if l.k == kNull || r.k == kNull {
		return null, nil // unknown
	}
	switch n.op {
	case tokEq, tokNe, tokGt, tokGe, tokLt, tokLe:
		c, o := compare(l, r)
		if o == incomparable || (o == equalOnly && n.op != tokEq && n.op != tokNe) {
			return null, nil
		}
		switch n.op {
		case tokEq:
			return boolValue(c == 0), nil
		case tokNe:
			return boolValue(c != 0), nil
		case tokGt:
			return boolValue(c > 0), nil
		case tokGe:
			return boolValue(c >= 0), nil
		case tokLt:
			return boolValue(c < 0), nil
		}
		return boolValue(c <= 0), nil
	}
	return n.arith(l, r)
}

// evalLogic is three-valued AND/OR; non-boolean operands count as unknown.
func (n *binaryNode) evalLogic(m *amqp.Message) (value, error) {
	short := n.op == tokOr // the value that decides the result on its own
	l, err := n.l.eval(m)
	if err != nil {
		return null, err
	}
	if l.k == kBool && (l.n != 0) == short {
		return l, nil
	}
	r, err := n.r.eval(m)
	if err != nil {
		return null, err
	}
	if r.k == kBool && (r.n != 0) == short {
		return r, nil
	}
	if l.k == kBool && r.k == kBool {
		return boolValue(!short), nil
	}
	return null, nil
}

func (n *binaryNode) arith(l, r value) (value, error) {
	if n.op == tokPlus && (l.k == kString || r.k == kString) {
		return stringValue(l.format() + r.format()), nil
	}
	if l.k == kInt && r.k == kInt {
		a, b := l.n, r.n
		switch n.op {
		case tokPlus:
			return intValue(a + b), nil
		case tokMinus:
			return intValue(a - b), nil
		case tokStar:
			return intValue(a * b), nil
		case tokSlash, tokPercent:
			if b == 0 {
				return null, evalErrorf(n.pos, "division by zero")
			}
			if n.op == tokSlash {
				return intValue(a / b), nil
			}
			return intValue(a % b), nil
		}
	}
	if isNumber(l) && isNumber(r) {
		a, b := l.num(), r.num()
		switch n.op {
		case tokPlus:
			return floatValue(a + b), nil
		case tokMinus:
			return floatValue(a - b), nil
		case tokStar:
			return floatValue(a * b), nil
		case tokSlash:
			return floatValue(a / b), nil
		case tokPercent:
			return floatValue(math.Mod(a, b)), nil
		}
	}
	// DateTime and TimeSpan arithmetic.
	switch {
	case n.op == tokPlus && l.k == kTime && r.k == kDuration:
		return value{k: kTime, n: l.n + r.n}, nil
	case n.op == tokPlus && l.k == kDuration && r.k == kTime:
		return value{k: kTime, n: l.n + r.n}, nil
	case n.op == tokPlus && l.k == kDuration && r.k == kDuration:
		return value{k: kDuration, n: l.n + r.n}, nil
	case n.op == tokMinus && l.k == kTime && r.k == kDuration:
		return value{k: kTime, n: l.n - r.n}, nil
	case n.op == tokMinus && l.k == kTime && r.k == kTime:
		return value{k: kDuration, n: l.n - r.n}, nil
	case n.op == tokMinus && l.k == kDuration && r.k == kDuration:
		return value{k: kDuration, n: l.n - r.n}, nil
	}
	return null, evalErrorf(n.pos, "operator %s cannot be applied to %s and %s", opString(n.op), l.typeName(), r.typeName())
}

func (n *likeNode) eval(m *amqp.Message) (value, error) {
	x, err := n.x.eval(m)
	if err != nil {
		return null, err
	}
	pat := n.compiled
	if pat == nil {
		if pat, err = n.pattern(m); err != nil || pat == nil {
			return null, err
		}
	}
	if x.k != kString {
		return null, nil // unknown, or not a string
	}
	return boolValue(pat.match(x.s) != n.not), nil
}

// pattern evaluates and compiles a non-constant pattern; nil means unknown.
func (n *likeNode) pattern(m *amqp.Message) (*likePattern, error) {
	pv, err := n.pat.eval(m)
	if err != nil || pv.k != kString {
		return nil, err
	}
	esc := rune(-1)
	if n.esc != nil {
		ev, err := n.esc.eval(m)
		if err != nil || ev.k == kNull {
			return nil, err
		}
		r, ok := escapeRune(ev.s)
		if ev.k != kString || !ok {
			return nil, evalErrorf(n.pos, "ESCAPE must be a string of one character, got %s %q", ev.typeName(), ev.format())
		}
		esc = r
	}
	p, err := compileLike(pv.s, esc)
	if err != nil {
		return nil, evalErrorf(n.pos, "%v", err)
	}
	return p, nil
}

func (n *inNode) eval(m *amqp.Message) (value, error) {
	x, err := n.x.eval(m)
	if err != nil || x.k == kNull {
		return null, err
	}
	for _, el := range n.list {
		v, err := el.eval(m)
		if err != nil {
			return null, err
		}
		if equal(x, v) {
			return boolValue(!n.not), nil
		}
	}
	return boolValue(n.not), nil
}

func (n *callNode) eval(m *amqp.Message) (value, error) {
	if n.fn == "newid" {
		var u amqp.UUID
		_, _ = rand.Read(u[:]) // crypto/rand.Read never fails
		u[6] = u[6]&0x0f | 0x40
		u[8] = u[8]&0x3f | 0x80
		return value{k: kOther, o: u}, nil
	}
	v, err := n.args[0].eval(m)
	if err != nil || v.k == kNull {
		return null, err
	}
	if v.k != kString {
		return null, evalErrorf(n.pos, "property() needs a string, got %s", v.typeName())
	}
	name := v.s
	if len(name) > 4 && strings.EqualFold(name[:4], "sys.") {
		sp := lookupSystemProperty(name[4:])
		if sp == nil {
			return null, evalErrorf(n.pos, "unknown system property %s", name)
		}
		return sp.get(m), nil
	}
	if len(name) > 5 && strings.EqualFold(name[:5], "user.") {
		name = name[5:]
	}
	v, _ = userProperty(m, name)
	return v, nil
}

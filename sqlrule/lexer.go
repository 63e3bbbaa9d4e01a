package sqlrule

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokenKind uint8

const (
	tokEOF tokenKind = iota
	tokIdent
	tokQuotedIdent // [name] or "name"
	tokString
	tokInt
	tokFloat
	tokParam
	tokLParen
	tokRParen
	tokComma
	tokDot
	tokSemicolon
	tokEq
	tokNe  // <>
	tokNe2 // !=
	tokGt
	tokGe
	tokLt
	tokLe
	tokPlus
	tokMinus
	tokStar
	tokSlash
	tokPercent
	// Keywords: regular identifiers recognised case-insensitively.
	tokAnd
	tokOr
	tokNot
	tokIs
	tokNull
	tokIn
	tokLike
	tokEscape
	tokExists
	tokTrue
	tokFalse
	tokSet
	tokRemove
)

var keywords = map[string]tokenKind{
	"AND": tokAnd, "OR": tokOr, "NOT": tokNot, "IS": tokIs, "NULL": tokNull, "IN": tokIn,
	"LIKE": tokLike, "ESCAPE": tokEscape, "EXISTS": tokExists, "TRUE": tokTrue, "FALSE": tokFalse,
	"SET": tokSet, "REMOVE": tokRemove,
}

var opText = map[tokenKind]string{
	tokLParen: "(", tokRParen: ")", tokComma: ",", tokDot: ".", tokSemicolon: ";",
	tokEq: "=", tokNe: "<>", tokNe2: "!=", tokGt: ">", tokGe: ">=", tokLt: "<", tokLe: "<=",
	tokPlus: "+", tokMinus: "-", tokStar: "*", tokSlash: "/", tokPercent: "%",
}

func (k tokenKind) isKeyword() bool { return k >= tokAnd }

// token is one lexeme. text is the identifier name (unescaped for delimited
// identifiers), the string value (unescaped), the number's source text or the
// parameter name without its @.
type token struct {
	kind tokenKind
	pos  int // byte offset in the source
	text string
}

// describe names the token in error messages.
func (t token) describe() string {
	switch {
	case t.kind == tokEOF:
		return "EOF"
	case t.kind.isKeyword():
		return strings.ToUpper(t.text)
	case t.kind == tokIdent || t.kind == tokQuotedIdent:
		return "identifier " + quoteIdent(t.text)
	case t.kind == tokString:
		return "string " + quoteString(t.text)
	case t.kind == tokInt || t.kind == tokFloat:
		return "number " + t.text
	case t.kind == tokParam:
		return "parameter @" + t.text
	default:
		return "'" + opText[t.kind] + "'"
	}
}

type lexer struct {
	src string
	pos int
}

// isIdentStart and isIdentPart follow the documented regular identifier
// [[:IsLetter:]][_[:IsLetter:][:IsDigit:]]*.
func isIdentStart(r rune) bool { return unicode.IsLetter(r) }
func isIdentPart(r rune) bool  { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// next returns the next token or a syntax error.
func (l *lexer) next() (token, error) {
	for l.pos < len(l.src) {
		r, n := utf8.DecodeRuneInString(l.src[l.pos:])
		if !unicode.IsSpace(r) {
			break
		}
		l.pos += n
	}
	start := l.pos
	if start >= len(l.src) {
		return token{kind: tokEOF, pos: start}, nil
	}
	c := l.src[start]
	tok := func(k tokenKind, n int) (token, error) {
		l.pos += n
		return token{kind: k, pos: start, text: l.src[start:l.pos]}, nil
	}
	peek := func(off int) byte {
		if start+off < len(l.src) {
			return l.src[start+off]
		}
		return 0
	}
	switch c {
	case '(':
		return tok(tokLParen, 1)
	case ')':
		return tok(tokRParen, 1)
	case ',':
		return tok(tokComma, 1)
	case ';':
		return tok(tokSemicolon, 1)
	case '=':
		return tok(tokEq, 1)
	case '+':
		return tok(tokPlus, 1)
	case '-':
		return tok(tokMinus, 1)
	case '*':
		return tok(tokStar, 1)
	case '/':
		return tok(tokSlash, 1)
	case '%':
		return tok(tokPercent, 1)
	case '<':
		switch peek(1) {
		case '>':
			return tok(tokNe, 2)
		case '=':
			return tok(tokLe, 2)
		}
		return tok(tokLt, 1)
	case '>':
		if peek(1) == '=' {
			return tok(tokGe, 2)
		}
		return tok(tokGt, 1)
	case '!':
		if peek(1) == '=' {
			return tok(tokNe2, 2)
		}
		return token{}, newSyntaxError(l.src, start, "unexpected character '!' (did you mean '!='?)")
	case '.':
		if isDigit(peek(1)) {
			return l.number()
		}
		return tok(tokDot, 1)
	case '\'':
		s, err := l.quoted('\'', "string")
		return token{kind: tokString, pos: start, text: s}, err
	case '"':
		s, err := l.quoted('"', "quoted identifier")
		if err == nil && s == "" {
			err = newSyntaxError(l.src, start, "empty identifier")
		}
		return token{kind: tokQuotedIdent, pos: start, text: s}, err
	case '[':
		s, err := l.quoted(']', "delimited identifier")
		if err == nil && s == "" {
			err = newSyntaxError(l.src, start, "empty identifier")
		}
		return token{kind: tokQuotedIdent, pos: start, text: s}, err
	case '@':
		l.pos++
		for l.pos < len(l.src) {
			r, n := utf8.DecodeRuneInString(l.src[l.pos:])
			if !isIdentPart(r) {
				break
			}
			l.pos += n
		}
		if l.pos == start+1 {
			return token{}, newSyntaxError(l.src, start, "expected parameter name after '@'")
		}
		return token{kind: tokParam, pos: start, text: l.src[start+1 : l.pos]}, nil
	}
	if isDigit(c) {
		return l.number()
	}
	r, n := utf8.DecodeRuneInString(l.src[start:])
	if isIdentStart(r) {
		l.pos += n
		for l.pos < len(l.src) {
			r, n := utf8.DecodeRuneInString(l.src[l.pos:])
			if !isIdentPart(r) {
				break
			}
			l.pos += n
		}
		text := l.src[start:l.pos]
		if k, ok := keywords[strings.ToUpper(text)]; ok {
			return token{kind: k, pos: start, text: text}, nil
		}
		return token{kind: tokIdent, pos: start, text: text}, nil
	}
	return token{}, newSyntaxError(l.src, start, "unexpected character %q", r)
}

// quoted reads a string delimited by the byte at l.pos and close; a doubled
// close character stands for itself.
func (l *lexer) quoted(closer byte, what string) (string, error) {
	start := l.pos
	l.pos++
	var b strings.Builder
	for {
		i := strings.IndexByte(l.src[l.pos:], closer)
		if i < 0 {
			l.pos = len(l.src)
			return "", newSyntaxError(l.src, start, "unterminated %s", what)
		}
		b.WriteString(l.src[l.pos : l.pos+i])
		l.pos += i + 1
		if l.pos < len(l.src) && l.src[l.pos] == closer {
			b.WriteByte(closer)
			l.pos++
			continue
		}
		return b.String(), nil
	}
}

// number reads digits [. digits] [E [+-] digits], or . digits [...].
func (l *lexer) number() (token, error) {
	start := l.pos
	digits := func() int {
		n := 0
		for l.pos < len(l.src) && isDigit(l.src[l.pos]) {
			l.pos++
			n++
		}
		return n
	}
	digits()
	kind := tokInt
	if l.pos < len(l.src) && l.src[l.pos] == '.' {
		kind = tokFloat
		l.pos++
		digits()
	}
	if l.pos < len(l.src) && (l.src[l.pos] == 'e' || l.src[l.pos] == 'E') {
		kind = tokFloat
		l.pos++
		if l.pos < len(l.src) && (l.src[l.pos] == '+' || l.src[l.pos] == '-') {
			l.pos++
		}
		if digits() == 0 {
			return token{}, newSyntaxError(l.src, start, "malformed number %q: expected digits in the exponent", l.src[start:l.pos])
		}
	}
	return token{kind: kind, pos: start, text: l.src[start:l.pos]}, nil
}

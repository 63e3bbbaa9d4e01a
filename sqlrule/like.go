package sqlrule

import (
	"errors"
	"unicode/utf8"
)

type likeOp uint8

const (
	likeLit  likeOp = iota // one literal character
	likeOne                // _
	likeMany               // %
)

type likeTok struct {
	op likeOp
	r  rune
}

// likePattern is a compiled LIKE pattern.
type likePattern struct{ toks []likeTok }

var errEscapeAtEnd = errors.New("LIKE pattern ends with the escape character")

// compileLike compiles pattern; esc < 0 means no escape character. An escape
// character makes the next character literal.
func compileLike(pattern string, esc rune) (*likePattern, error) {
	p := &likePattern{toks: make([]likeTok, 0, len(pattern))}
	escaped := false
	for _, r := range pattern {
		switch {
		case escaped:
			p.toks = append(p.toks, likeTok{op: likeLit, r: r})
			escaped = false
		case esc >= 0 && r == esc:
			escaped = true
		case r == '%':
			if n := len(p.toks); n == 0 || p.toks[n-1].op != likeMany {
				p.toks = append(p.toks, likeTok{op: likeMany})
			}
		case r == '_':
			p.toks = append(p.toks, likeTok{op: likeOne})
		default:
			p.toks = append(p.toks, likeTok{op: likeLit, r: r})
		}
	}
	if escaped {
		return nil, errEscapeAtEnd
	}
	return p, nil
}

// match reports whether s matches the whole pattern. It backtracks only to the
// latest %, so it runs in O(len(s)·len(pattern)) at worst.
func (p *likePattern) match(s string) bool {
	toks := p.toks
	pi, si := 0, 0
	starPi, starSi := -1, 0
	for si < len(s) {
		if pi < len(toks) {
			t := toks[pi]
			if t.op == likeMany {
				starPi, starSi = pi, si
				pi++
				continue
			}
			r, n := utf8.DecodeRuneInString(s[si:])
			if t.op == likeOne || t.r == r {
				pi++
				si += n
				continue
			}
		}
		if starPi < 0 {
			return false
		}
		_, n := utf8.DecodeRuneInString(s[starSi:])
		starSi += n
		pi, si = starPi+1, starSi
	}
	for pi < len(toks) && toks[pi].op == likeMany {
		pi++
	}
	return pi == len(toks)
}

// escapeRune checks that an ESCAPE operand is a single character.
func escapeRune(s string) (rune, bool) {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 || n != len(s) {
		return 0, false
	}
	return r, true
}

package sqlrule

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxExpressionLength is the longest filter or action expression, in
// characters, that Service Bus accepts.
const MaxExpressionLength = 1024

var (
	// ErrTooLong is returned (wrapped) for expressions longer than MaxExpressionLength.
	ErrTooLong = errors.New("sqlrule: expression too long")
	// ErrEvaluation wraps errors raised while evaluating a filter or applying an
	// action: division by zero, arithmetic on unsupported types, assigning a
	// value of the wrong type to a system property, and the like.
	ErrEvaluation = errors.New("sqlrule: evaluation failed")
)

// SyntaxError is a parse or compile error with its position in the expression.
type SyntaxError struct {
	// Offset is the byte offset of the offending token; Line and Column
	// (counted in characters) are 1-based.
	Offset, Line, Column int
	// Msg says what was expected and what was found.
	Msg string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("sqlrule: %d:%d: %s", e.Line, e.Column, e.Msg)
}

// lineCol converts a byte offset into a 1-based line and character column.
func lineCol(src string, off int) (line, col int) {
	line, col = 1, 1
	if off > len(src) {
		off = len(src)
	}
	for _, r := range src[:off] {
		if r == '\n' {
			line++
			col = 1
			continue
		}
		col++
	}
	return line, col
}

func newSyntaxError(src string, off int, format string, args ...any) *SyntaxError {
	line, col := lineCol(src, off)
	return &SyntaxError{Offset: off, Line: line, Column: col, Msg: fmt.Sprintf(format, args...)}
}

// evalError is an evaluation failure at a node; Match and Apply turn it into
// an error wrapping ErrEvaluation with the node's line and column.
type evalError struct {
	pos int
	msg string
}

func (e *evalError) Error() string { return e.msg }

func evalErrorf(pos int, format string, args ...any) error {
	return &evalError{pos: pos, msg: fmt.Sprintf(format, args...)}
}

// wrapEval gives err, returned while evaluating src, its position and ErrEvaluation.
func wrapEval(src string, err error) error {
	var ee *evalError
	if errors.As(err, &ee) {
		line, col := lineCol(src, ee.pos)
		return fmt.Errorf("%w: %d:%d: %s", ErrEvaluation, line, col, ee.msg)
	}
	return fmt.Errorf("%w: %w", ErrEvaluation, err)
}

func checkLength(expr string) error {
	if n := utf8.RuneCountInString(expr); n > MaxExpressionLength {
		return fmt.Errorf("%w: %d characters, the limit is %d", ErrTooLong, n, MaxExpressionLength)
	}
	return nil
}

package topology

import (
	"errors"
	"fmt"
	"strings"
)

// Severity tells an error from a warning.
type Severity int

// Severities.
const (
	SeverityError Severity = iota
	SeverityWarning
)

// Diagnostic is one problem found in a file: where (file, line, column, field path) and
// what.
type Diagnostic struct {
	Severity Severity
	File     string
	Line     int
	Column   int
	// Field is the path of the field, e.g. "topics[0].subscriptions[1].lockDuration".
	Field string
	Msg   string
}

func (d Diagnostic) String() string {
	var b strings.Builder
	if d.File != "" {
		b.WriteString(d.File)
		if d.Line > 0 {
			fmt.Fprintf(&b, ":%d", d.Line)
			if d.Column > 0 {
				fmt.Fprintf(&b, ":%d", d.Column)
			}
		}
		b.WriteString(": ")
	}
	if d.Severity == SeverityWarning {
		b.WriteString("warning: ")
	}
	if d.Field != "" {
		b.WriteString(d.Field)
		b.WriteString(": ")
	}
	b.WriteString(d.Msg)
	return b.String()
}

// ErrInvalid is matched (errors.Is) by the *Errors of Parse and Validate.
var ErrInvalid = errors.New("invalid topology")

// Errors is the error returned for a file with errors. It lists every error found, in
// file order.
type Errors []Diagnostic

func (e Errors) Error() string {
	lines := make([]string, len(e))
	for i, d := range e {
		lines[i] = d.String()
	}
	return strings.Join(lines, "\n")
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e Errors) Is(target error) bool { return target == ErrInvalid }

// diags collects diagnostics.
type diags struct {
	list []Diagnostic
}

func (d *diags) at(sev Severity, src Source, key, format string, args ...any) {
	line, col, path := src.Field(key)
	msg := fmt.Sprintf(format, args...)
	if src.Origin != "" {
		msg += " (" + src.Origin + ")"
	}
	d.list = append(d.list, Diagnostic{
		Severity: sev, File: src.File, Line: line, Column: col, Field: path,
		Msg: msg,
	})
}

func (d *diags) errorf(src Source, key, format string, args ...any) {
	d.at(SeverityError, src, key, format, args...)
}

func (d *diags) warnf(src Source, key, format string, args ...any) {
	d.at(SeverityWarning, src, key, format, args...)
}

// errors counts the errors collected so far.
func (d *diags) errors() int {
	n := 0
	for _, x := range d.list {
		if x.Severity == SeverityError {
			n++
		}
	}
	return n
}

// split returns the errors (as an Errors, nil when none) and the warnings.
func (d *diags) split() (error, []Diagnostic) {
	var errs Errors
	var warns []Diagnostic
	for _, x := range d.list {
		if x.Severity == SeverityError {
			errs = append(errs, x)
		} else {
			warns = append(warns, x)
		}
	}
	if len(errs) == 0 {
		return nil, warns
	}
	return errs, warns
}

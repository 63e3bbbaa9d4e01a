package configdoc

import (
	"fmt"
	"go/token"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Section is one table of the reference: the settings of one struct.
type Section struct {
	// Title heads the section; Intro is the prose under it (Markdown, may be empty).
	Title string
	Intro string
	// Prefix is prepended to each envconfig tag with an underscore ("SEQBUS": SEQBUS_QUEUE).
	Prefix string
	// Defaults is the struct (not a pointer) holding every setting's default.
	Defaults any
	// Valid is Defaults with whatever else a valid value needs (a connection string, an
	// entity, ...): each probe changes one field of a copy of it. Nil: Defaults.
	Valid any
	// Validate checks a value of the struct's type and returns its problems, one a line, each
	// line "VARIABLE: problem" (an optional trailing " (Config.Field)" is dropped); lines
	// without a variable of this section are ignored.
	Validate func(v any) error
	// Format renders the defaults of the types it names; other values are rendered by kind
	// (durations as 30s, 1m, 24h).
	Format map[reflect.Type]func(reflect.Value) string
	// GoOnly lists the fields without a variable (set from Go only) in a table of their own.
	GoOnly bool
}

// Setting is one row of a section.
type Setting struct {
	Var        string // the environment variable; "" for a field set from Go only
	Field      string // the Go field, as a selector of the struct's type: Config.HandlerTimeout
	Default    string
	Validation string // what validation says of the probes, "" when it refuses none
	Meaning    string // the desc tag
}

// Settings returns the rows of s in field order (promoted fields of embedded structs included,
// where Go declares them). A field without a desc tag is an error naming it.
func (s Section) Settings() ([]Setting, error) {
	def := reflect.ValueOf(s.Defaults)
	if def.Kind() != reflect.Struct {
		return nil, fmt.Errorf("configdoc: %s: Defaults is a %s, want a struct", s.Title, def.Kind())
	}
	valid := def
	if s.Valid != nil {
		valid = reflect.ValueOf(s.Valid)
		if valid.Type() != def.Type() {
			return nil, fmt.Errorf("configdoc: %s: Valid is a %s, want a %s", s.Title, valid.Type(), def.Type())
		}
	}
	if s.Validate != nil {
		if err := s.Validate(valid.Interface()); err != nil {
			return nil, fmt.Errorf("configdoc: %s: the value to probe from is not valid: %w", s.Title, err)
		}
	}
	var rows []Setting
	var missing []string
	for _, f := range reflect.VisibleFields(def.Type()) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		field := def.Type().Name() + "." + f.Name
		meaning := strings.TrimSpace(f.Tag.Get("desc"))
		if meaning == "" {
			missing = append(missing, field)
			continue
		}
		tag := f.Tag.Get("envconfig")
		if tag == "" || f.Tag.Get("ignored") == "true" {
			if s.GoOnly {
				rows = append(rows, Setting{Field: field, Meaning: meaning})
			}
			continue
		}
		row := Setting{
			Var:     s.Prefix + "_" + tag,
			Field:   field,
			Default: s.format(def.FieldByIndex(f.Index)),
			Meaning: meaning,
		}
		if s.Validate != nil {
			row.Validation = s.validation(valid, f, row.Var)
		}
		rows = append(rows, row)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("configdoc: %s: no desc tag on %s", s.Title, strings.Join(missing, ", "))
	}
	return rows, nil
}

// probeString is a value no setting accepts as a name, so that a setting with a fixed set of
// values says which.
const probeString = "?probe"

// probes returns the values one field is probed with: for numbers -1 and 0, for strings the
// empty string and an unknown name. Other kinds (bools, lists) are not probed.
func probes(t reflect.Type) []reflect.Value {
	var vs []any
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		vs = []any{int64(-1), int64(0)}
	case reflect.String:
		vs = []any{"", probeString}
	default:
		return nil
	}
	out := make([]reflect.Value, len(vs))
	for i, v := range vs {
		out[i] = reflect.ValueOf(v).Convert(t)
	}
	return out
}

var (
	// trailing parts of a problem that name the probe rather than the rule
	gotSuffix   = regexp.MustCompile(`, got .*$`)
	fieldSuffix = regexp.MustCompile(` \(Config\.[A-Za-z.]+\)$`)
	notOneOf    = regexp.MustCompile(`^".*" is not one of (.*)$`)
	quotedProbe = regexp.MustCompile(`^"` + regexp.QuoteMeta(probeString) + `" `)
)

// validation probes field f of a copy of valid and returns what validation says of it, each
// distinct problem once, joined by "; ".
func (s Section) validation(valid reflect.Value, f reflect.StructField, variable string) string {
	var said []string
	for _, p := range probes(f.Type) {
		v := reflect.New(valid.Type()).Elem()
		v.Set(valid)
		v.FieldByIndex(f.Index).Set(p)
		err := s.Validate(v.Interface())
		if err == nil {
			continue
		}
		for line := range strings.SplitSeq(err.Error(), "\n") {
			msg, ok := strings.CutPrefix(line, variable+": ")
			if !ok {
				continue
			}
			msg = fieldSuffix.ReplaceAllString(msg, "")
			msg = gotSuffix.ReplaceAllString(msg, "")
			if m := notOneOf.FindStringSubmatch(msg); m != nil {
				msg = "one of " + m[1]
			} else if p.Kind() == reflect.String && p.String() == probeString {
				// An unknown name is refused with a message about the value given: keep only
				// what it says of the setting.
				msg = quotedProbe.ReplaceAllString(msg, "")
			}
			if !slices.Contains(said, msg) {
				said = append(said, msg)
			}
		}
	}
	return strings.Join(said, "; ")
}

func (s Section) format(v reflect.Value) string {
	if f, ok := s.Format[v.Type()]; ok {
		return f(v)
	}
	if d, ok := v.Interface().(time.Duration); ok {
		return FormatDuration(d)
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = fmt.Sprint(v.Index(i).Interface())
		}
		return strings.Join(parts, ",")
	default:
		return fmt.Sprint(v.Interface())
	}
}

// FormatDuration writes d as the environment would: 30s, 1m, 1h30m, 24h (no trailing zero
// units), 0 as 0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// FormatBytes writes n in the largest binary unit that divides it: 256KiB, 8MiB, 1000.
func FormatBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		factor int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.factor == 0 {
			return fmt.Sprintf("%d%s", n/u.factor, u.suffix)
		}
	}
	return fmt.Sprint(n)
}

// Render writes the sections as Markdown tables, each under a "##" heading, after header.
func Render(w io.Writer, header string, sections ...Section) error {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(header))
	b.WriteString("\n")
	for _, s := range sections {
		rows, err := s.Settings()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "\n## %s\n\n", s.Title)
		if intro := strings.TrimSpace(s.Intro); intro != "" {
			b.WriteString(intro)
			b.WriteString("\n\n")
		}
		// The Go field is shown for an exported type only: another's is of no use to a reader.
		goField := token.IsExported(reflect.TypeOf(s.Defaults).Name())
		env := slices.DeleteFunc(slices.Clone(rows), func(r Setting) bool { return r.Var == "" })
		if len(env) > 0 {
			b.WriteString("| Variable | Default | Validation | Meaning |")
			if goField {
				b.WriteString(" Go field |")
			}
			b.WriteString("\n|---|---|---|---|")
			if goField {
				b.WriteString("---|")
			}
			b.WriteString("\n")
			for _, r := range env {
				fmt.Fprintf(&b, "| `%s` | %s | %s | %s |", r.Var, code(r.Default), cell(r.Validation), cell(r.Meaning))
				if goField {
					fmt.Fprintf(&b, " `%s` |", r.Field)
				}
				b.WriteString("\n")
			}
		}
		goOnly := slices.DeleteFunc(slices.Clone(rows), func(r Setting) bool { return r.Var != "" })
		if len(goOnly) > 0 {
			b.WriteString("\nSet from Go only:\n\n| Go field | Meaning |\n|---|---|\n")
			for _, r := range goOnly {
				fmt.Fprintf(&b, "| `%s` | %s |\n", r.Field, cell(r.Meaning))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("configdoc: %w", err)
	}
	return nil
}

// code renders a default as code, or a dash for none.
func code(s string) string {
	if s == "" {
		return "—"
	}
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`"
}

// cell escapes what would end a table cell.
func cell(s string) string {
	if s == "" {
		return ""
	}
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

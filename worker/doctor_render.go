package worker

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable writes r as a table: one line per check, with its result, what was seen and what
// to do, then a summary line.
func (r DoctorReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintf(tw, "CHECK\tRESULT\tDETAIL\tWHAT TO DO\n")
	counts := map[DoctorResult]int{}
	for _, c := range r.Checks {
		counts[c.Result]++
		action := c.Action
		if action == "" {
			action = "-"
		}
		detail, todo := wrap(c.Detail, detailWidth), wrap(action, actionWidth)
		for i := range max(len(detail), len(todo)) {
			check, result := "", ""
			if i == 0 {
				check, result = c.Check, string(c.Result)
			}
			_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", check, result, at(detail, i), at(todo, i))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s: %d passed, %d warned, %d failed, %d skipped\n", r.Entity,
		counts[DoctorPass], counts[DoctorWarn], counts[DoctorFail], counts[DoctorSkip])
	return err
}

// The widths a table's detail and action cells wrap at, so that a line fits a wide terminal.
const (
	detailWidth = 72
	actionWidth = 44
)

// wrap splits the words of s (a joined error lists one problem a line) into lines of at most
// width characters; a longer word stands alone on its line.
func wrap(s string, width int) []string {
	var lines []string
	var b strings.Builder
	for _, w := range strings.Fields(s) {
		if b.Len() > 0 && b.Len()+1+len(w) > width {
			lines = append(lines, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
	}
	if b.Len() > 0 || len(lines) == 0 {
		lines = append(lines, b.String())
	}
	return lines
}

// at returns lines[i], or "" past its end.
func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return ""
}

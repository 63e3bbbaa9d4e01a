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
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Check, c.Result, oneLine(c.Detail), oneLine(action))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s: %d passed, %d warned, %d failed, %d skipped\n", r.Entity,
		counts[DoctorPass], counts[DoctorWarn], counts[DoctorFail], counts[DoctorSkip])
	return err
}

// oneLine joins the lines of s (a joined error lists one problem a line) for a table cell.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

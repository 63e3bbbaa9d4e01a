package soak

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WriteTable writes the reports for a terminal: one block per store.
func WriteTable(w io.Writer, reports []Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tsessions\tmsgs/session\treplicas\telapsed\tmsg/s first 10%\tmsg/s last 10%\tlast/first\t"+
		"calls/msg\tsweep calls/msg\tscale calls/msg\tsweep catch-up\tcredits/msg\tpeak RSS MB (max)\tidle calls/interval\tidle sweep calls/interval\tidle credits/interval\tviolations\tduplicates\tmissing\t")
	for _, r := range reports {
		var peak int64
		for _, p := range r.PeakRSS {
			peak = max(peak, p)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0fs\t%.0f\t%.0f\t%.2f\t%.2f\t%.3f\t%.3f\t%.0fs\t%.2f\t%.0f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%d\t\n",
			r.Store, r.Sessions, r.Messages, r.Replicas, r.Elapsed.Seconds(), r.SliceRates[0], r.SliceRates[Slices-1],
			r.SliceRates[Slices-1]/max(r.SliceRates[0], 1e-9),
			r.PerMessage(r.EngineCalls+r.StateCalls+r.SweepCalls), r.PerMessage(r.SweepCalls), r.PerMessage(r.ScaleCalls), r.CatchUp.Seconds(), r.PerMessage(r.Credits),
			float64(peak)/(1<<20), r.IdleCalls, r.IdleSweepCalls, r.IdleCredits, r.Violations, r.Duplicates, r.Missing)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("soak: write table: %w", err)
	}
	return nil
}

// WriteCSV writes one row per report.
func WriteCSV(w io.Writer, reports []Report) error {
	cw := csv.NewWriter(w)
	header := []string{"store", "sessions", "messages", "replicas", "elapsed_s"}
	for k := range Slices {
		header = append(header, fmt.Sprintf("rate_slice_%d_msg_per_s", k+1))
	}
	header = append(header, "engine_calls_per_msg", "state_calls_per_msg", "sweep_calls_per_msg", "scale_calls_per_msg", "database_calls_per_msg", "sweep_catch_up_s", "credits_per_msg",
		"peak_rss_bytes", "idle_calls_per_interval", "idle_sweep_calls_per_interval", "idle_credits_per_interval",
		"order_violations", "duplicates", "missing")
	if err := cw.Write(header); err != nil {
		return fmt.Errorf("soak: write CSV: %w", err)
	}
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	for _, r := range reports {
		row := []string{r.Store, strconv.Itoa(r.Sessions), strconv.Itoa(r.Messages), strconv.Itoa(r.Replicas), f(r.Elapsed.Seconds(), 1)}
		for _, v := range r.SliceRates {
			row = append(row, f(v, 1))
		}
		var peaks []string
		for _, p := range r.PeakRSS {
			peaks = append(peaks, strconv.FormatInt(p, 10))
		}
		row = append(row, f(r.PerMessage(r.EngineCalls), 3), f(r.PerMessage(r.StateCalls), 3), f(r.PerMessage(r.SweepCalls), 3), f(r.PerMessage(r.ScaleCalls), 3),
			f(r.PerMessage(r.DatabaseCalls), 3), f(r.CatchUp.Seconds(), 1), f(r.PerMessage(r.Credits), 3), fmt.Sprint(peaks), f(r.IdleCalls, 1), f(r.IdleSweepCalls, 1), f(r.IdleCredits, 1),
			strconv.Itoa(r.Violations), strconv.Itoa(r.Duplicates), strconv.Itoa(r.Missing))
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("soak: write CSV: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("soak: write CSV: %w", err)
	}
	return nil
}

// ChartFile is the name of the chart WriteOutputs writes.
const ChartFile = "soak_throughput_by_tenth.svg"

// WriteOutputs writes soak.csv and the chart of the throughput of each tenth into dir, and
// returns the files written.
func WriteOutputs(dir string, reports []Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	csvPath := filepath.Join(dir, "soak.csv")
	f, err := os.Create(csvPath)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	err = WriteCSV(f, reports)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	p := plot.New()
	p.Title.Text = "Soak: throughput of each tenth of the messages"
	p.X.Label.Text = "tenth of the run"
	p.Y.Label.Text = "messages/s"
	p.Y.Min = 0
	var lines []any
	for _, r := range reports {
		pts := make(plotter.XYs, Slices)
		for k, v := range r.SliceRates {
			pts[k] = plotter.XY{X: float64(k + 1), Y: v}
		}
		lines = append(lines, fmt.Sprintf("%s store, %d sessions × %d, %d replicas", r.Store, r.Sessions, r.Messages, r.Replicas), pts)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, fmt.Errorf("soak: chart: %w", err)
	}
	p.Legend.Top = false
	chart := filepath.Join(dir, ChartFile)
	if err := p.Save(7*vg.Inch, 4*vg.Inch, chart); err != nil {
		return nil, fmt.Errorf("soak: chart: %w", err)
	}
	return []string{csvPath, chart}, nil
}

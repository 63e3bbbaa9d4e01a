package bench

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// csvHeader names the columns of results.csv, one row per cell.
var csvHeader = []string{
	"replicas", "pressure", "exception_rate", "arrival", "sessions", "messages", "elapsed_s",
	"rate_msg_per_s", "handler_calls", "handler_errors", "exception_rate_measured",
	"latency_p50_ms", "latency_p99_ms", "broker_calls_per_msg", "state_calls_per_msg",
	"state_writes_per_msg", "duplicates", "throttled", "deliveries_delayed",
	"order_violations", "incomplete_sessions", "early_messages",
	"plain_rate_msg_per_s", "plain_elapsed_s", "plain_broker_calls_per_msg", "worker_plain_ratio",
	"credits_per_msg", "credit_limited_rate_msg_per_s", "credit_ratio",
	"offered_rate_msg_per_s", "offered_handled_msg_per_s", "offered_latency_p50_ms", "offered_latency_p99_ms", "offered_throttled",
	"error",
}

// WriteCSV writes the results as CSV with a header row.
func WriteCSV(w io.Writer, results []Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return fmt.Errorf("bench: write CSV header: %w", err)
	}
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	ms := func(d time.Duration) string { return f(float64(d.Microseconds())/1000, 1) }
	for _, r := range results {
		errText := ""
		if r.Err != nil {
			errText = r.Err.Error()
		}
		row := []string{
			strconv.Itoa(r.Replicas), string(r.Pressure), f(r.ExceptionRate, 3), string(r.Arrival),
			strconv.Itoa(r.Sessions), strconv.Itoa(r.Messages), f(r.Elapsed.Seconds(), 2),
			f(r.Rate, 1), strconv.FormatUint(r.HandlerCalls, 10), strconv.FormatUint(r.HandlerErrors, 10),
			f(r.ExceptionRateMeasured(), 4), ms(r.LatencyP50), ms(r.LatencyP99),
			f(r.perMessage(r.BrokerCalls), 2), f(r.perMessage(r.StoreCalls), 2), f(r.perMessage(r.StateWrites), 2),
			strconv.FormatUint(r.Duplicates, 10), strconv.FormatUint(r.Throttled, 10), strconv.FormatUint(r.DeliveriesDelayed, 10),
			strconv.Itoa(r.Violations), strconv.Itoa(r.Incomplete), string(r.early()),
			f(r.PlainRate, 1), f(r.PlainElapsed.Seconds(), 2), f(r.perMessage(r.PlainBrokerCalls), 2), f(r.Ratio(), 3),
			f(r.CreditsPerMessage(), 2), f(r.CreditLimitedRate(), 1), f(r.CreditRatio(), 3),
			f(r.Offered.Rate, 1), f(r.Offered.Handled, 1), ms(r.Offered.LatencyP50), ms(r.Offered.LatencyP99), strconv.FormatUint(r.Offered.Throttled, 10),
			errText,
		}
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("bench: write CSV row for %s: %w", r.Cell, err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("bench: write CSV: %w", err)
	}
	return nil
}

// WriteTable writes one line per cell for a terminal: the worker's rate, the plain consumer's in
// the same cell and their ratio, with the calls per message of each.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "replicas\tpressure\texceptions\tarrival\tearly\tworker msg/s\tplain msg/s\tratio\tworker calls/msg\tbroker calls/msg\tplain calls/msg\tp99 ms\trefused\tcredits/msg\tcredit ratio\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t%d\t%.2f\t%.2f\t\n", r.Replicas, r.Pressure, percent(r.ExceptionRate), r.Arrival, r.early(),
			r.Rate, r.PlainRate, r.Ratio(), r.perMessage(r.BrokerCalls+r.StoreCalls), r.perMessage(r.BrokerCalls), r.perMessage(r.PlainBrokerCalls),
			float64(r.LatencyP99.Microseconds())/1000, r.Throttled, r.CreditsPerMessage(), r.CreditRatio())
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("bench: write table: %w", err)
	}
	if !slices.ContainsFunc(results, func(r Result) bool { return r.Offered.Rate > 0 }) {
		return nil
	}
	fmt.Fprintln(tw, "\nreplicas\tpressure\texceptions\tarrival\tcredit-limited msg/s\toffered msg/s\thandled msg/s\toffered p50 ms\toffered p99 ms\trefused\t")
	for _, r := range results {
		if r.Offered.Rate <= 0 {
			continue
		}
		o := r.Offered
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t\n", r.Replicas, r.Pressure, percent(r.ExceptionRate), r.Arrival,
			r.CreditLimitedRate(), o.Rate, o.Handled, float64(o.LatencyP50.Microseconds())/1000, float64(o.LatencyP99.Microseconds())/1000, o.Throttled)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("bench: write table: %w", err)
	}
	return nil
}

// Chart file names written by WriteCharts, without the format's extension.
const (
	ChartThroughputReplicas  = "throughput_vs_replicas"
	ChartThroughputException = "throughput_vs_exception_rate"
	ChartLatencyReplicas     = "latency_p99_vs_replicas"
	ChartCallsArrival        = "broker_calls_per_msg_by_arrival"
)

// Gjura's flow (receive, state write, complete; early: also read state, defer, receive
// deferred, …), the reference line of the broker calls chart.
const (
	gjuraInOrderCalls = 3
	gjuraEarlyCalls   = 6.5
)

// WriteCharts writes one chart per dimension into dir, in format "svg" or "png", and returns the
// files written. A chart whose cells were not run is left out.
func WriteCharts(dir, format string, results []Result) ([]string, error) {
	var written []string
	charts := []struct {
		file string
		make func([]Result) (*plot.Plot, error)
	}{
		{ChartThroughputReplicas, chartThroughputReplicas},
		{ChartThroughputException, chartThroughputException},
		{ChartLatencyReplicas, chartLatencyReplicas},
		{ChartCallsArrival, chartCallsArrival},
	}
	for _, c := range charts {
		p, err := c.make(results)
		if err != nil {
			return written, fmt.Errorf("bench: chart %s: %w", c.file, err)
		}
		if p == nil {
			continue
		}
		path := filepath.Join(dir, c.file+"."+format)
		if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
			return written, fmt.Errorf("bench: save chart %s: %w", path, err)
		}
		written = append(written, path)
	}
	return written, nil
}

// WriteOutputs writes results.csv and the charts (format "svg" or "png") into dir, created if
// need be, and returns the files written.
func WriteOutputs(dir, format string, results []Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: output directory: %w", err)
	}
	path := filepath.Join(dir, "results.csv")
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := WriteCSV(f, results); err != nil {
		_ = f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("bench: close %s: %w", path, err)
	}
	charts, err := WriteCharts(dir, format, results)
	return append([]string{path}, charts...), err
}

// pick returns the results that keep says to, in the order given, of the first result's mode
// of early messages alone (a chart draws one line per pressure level).
func pick(results []Result, keep func(Result) bool) []Result {
	var out []Result
	for _, r := range results {
		if keep(r) && r.Err == nil && r.early() == results[0].early() {
			out = append(out, r)
		}
	}
	return out
}

// baseline is the reference row of each chart: no exceptions, messages in order.
func baseline(r Result) bool { return r.ExceptionRate == 0 && r.Arrival == ArrivalInOrder }

// linesByPressure plots y against x, one line per pressure level, for the results keep picks,
// with a tick at each x and a logarithmic y axis (the levels differ by orders of magnitude).
func linesByPressure(title, xLabel, yLabel string, results []Result, keep func(Result) bool, x, y func(Result) float64) (*plot.Plot, error) {
	rows := pick(results, keep)
	if len(rows) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xLabel, yLabel
	p.Title.Padding = vg.Points(8)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), -vg.Points(4)
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	var ticks []plot.Tick
	for _, r := range rows {
		if v := x(r); !slices.ContainsFunc(ticks, func(t plot.Tick) bool { return t.Value == v }) {
			ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 4, 64)})
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	var args []any
	for _, pr := range pressuresOf(rows) {
		var pts plotter.XYs
		for _, r := range rows {
			if r.Pressure == pr {
				pts = append(pts, plotter.XY{X: x(r), Y: y(r)})
			}
		}
		slices.SortFunc(pts, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		args = append(args, string(pr), pts)
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return nil, err
	}
	// Room above the highest point for the legend.
	p.Y.Max *= 4
	return p, nil
}

func chartThroughputReplicas(results []Result) (*plot.Plot, error) {
	return linesByPressure("Throughput by replicas (no exceptions, in order)", "worker replicas", "messages handled per second",
		results, baseline, func(r Result) float64 { return float64(r.Replicas) }, func(r Result) float64 { return r.Rate })
}

func chartLatencyReplicas(results []Result) (*plot.Plot, error) {
	return linesByPressure("End-to-end latency p99, publish → handler (no exceptions, in order)", "worker replicas", "p99 latency (ms)",
		results, baseline, func(r Result) float64 { return float64(r.Replicas) },
		func(r Result) float64 { return float64(r.LatencyP99.Microseconds()) / 1000 })
}

func chartThroughputException(results []Result) (*plot.Plot, error) {
	most := 0
	for _, r := range results {
		most = max(most, r.Replicas)
	}
	return linesByPressure(fmt.Sprintf("Throughput by handler exception rate (%d replicas, in order)", most),
		"handler calls that fail (%)", "messages handled per second", results,
		func(r Result) bool { return r.Replicas == most && r.Arrival == ArrivalInOrder },
		func(r Result) float64 { return r.ExceptionRate * 100 }, func(r Result) float64 { return r.Rate })
}

// chartCallsArrival shows, per pressure level, the broker round trips per message (session
// calls plus state calls, which the Service Bus store makes to the broker) for messages in
// order and shuffled, averaged over the replica counts, against Gjura's flow.
func chartCallsArrival(results []Result) (*plot.Plot, error) {
	rows := pick(results, func(r Result) bool { return r.ExceptionRate == 0 })
	if len(rows) == 0 {
		return nil, nil
	}
	pressures := pressuresOf(rows)
	p := plot.New()
	p.Title.Text = "Broker round trips per message (session + state calls; no exceptions)"
	p.Y.Label.Text = "calls per message"
	p.Legend.Top = true
	w := vg.Points(18)
	for i, a := range []Arrival{ArrivalInOrder, ArrivalShuffled} {
		vals := make(plotter.Values, len(pressures))
		any := false
		for j, pr := range pressures {
			var sum float64
			var n int
			for _, r := range rows {
				if r.Pressure == pr && r.Arrival == a {
					sum += r.perMessage(r.BrokerCalls + r.StoreCalls)
					n++
				}
			}
			if n > 0 {
				vals[j] = sum / float64(n)
				any = true
			}
		}
		if !any {
			continue
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(2*i-1) * w / 2
		p.Add(bars)
		p.Legend.Add("worker, "+string(a), bars)
	}
	for i, ref := range []struct {
		label string
		v     float64
	}{{"plain Gjura flow, in order (3)", gjuraInOrderCalls}, {"plain Gjura flow, early message (6–7)", gjuraEarlyCalls}} {
		line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: ref.v}, {X: float64(len(pressures)) - 0.5, Y: ref.v}})
		if err != nil {
			return nil, err
		}
		line.Color = color.Gray{Y: uint8(60 + 60*i)}
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(line)
		p.Legend.Add(ref.label, line)
	}
	names := make([]string, len(pressures))
	for i, pr := range pressures {
		names[i] = "pressure: " + string(pr)
	}
	p.NominalX(names...)
	p.Y.Min, p.Y.Max = 0, 8
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	return p, nil
}

// pressuresOf lists the pressure levels present, in the matrix's order.
func pressuresOf(rows []Result) []Pressure {
	var out []Pressure
	for _, pr := range DefaultPressures {
		if slices.ContainsFunc(rows, func(r Result) bool { return r.Pressure == pr }) {
			out = append(out, pr)
		}
	}
	return out
}

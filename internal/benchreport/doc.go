// Package benchreport writes the dated report folder of a benchmark run: cmd/bench and cmd/soak
// put their results CSV and charts in a folder named by the date, the command and the commit
// (docs/reports/2026-11-29-bench-1a2b3c4/), and a report.md beside them names what the run
// needs to be compared or repeated: the commit, the date, the machine (CPU model, cores,
// memory), the Go version and the command line, with the command's summary table.
//
// It knows nothing of what a benchmark measures: its callers give the summary and the files.
package benchreport

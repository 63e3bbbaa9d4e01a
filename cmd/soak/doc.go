// Command soak runs the long-run benchmark of internal/soak: by default 100,000 sessions of 3
// in-order messages through 4 worker processes on the in-process emulator, once with each state
// store, then 5 sweep intervals idle. It prints a table, and writes soak.csv and a chart of the
// throughput of each tenth of the run to -out.
//
//	go run ./cmd/soak                                  # both stores, the defaults
//	go run ./cmd/soak -sessions 20000 -store servicebus
//
// With -idle it runs no soak but the idle measurement on ended sessions (-ended, 1,000, 10,000
// and 100,000 by default, after a baseline of none), the -worker and, side by side, a
// -before-worker when given, and prints a table:
//
//	go run ./cmd/soak -idle -worker /tmp/worker-after -before-worker /tmp/worker-before
//
// With -report DIR (docs/reports in the repository) the outputs go instead to a new folder
// DIR/<date>-soak-<commit> (-idle: <date>-soak-idle-<commit>) with a report.md that names the
// commit, the date, the machine, the Go version and the command line, and holds the table and
// any failure (see package internal/benchreport):
//
//	go run ./cmd/soak -sessions 20000 -report docs/reports
//
// It exits 1 when a soak failed, handled a message out of order or left one unhandled, and 2 on
// bad flags.
package main

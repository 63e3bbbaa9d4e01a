// Command bench measures seqbus's throughput baseline: the matrix worker replicas {1, 2, 4, 8} ×
// Service Bus pressure {none, Standard-like throttle, 5 ms latency} × handler exception rate
// {0, 1 %, 10 %} × arrival {in order, shuffled}, each cell on a fresh in-process emulator (or,
// with -connection-string, against a real namespace, pressure none only). See internal/bench
// for what a cell does and measures.
//
// Usage:
//
//	bench [-provider servicebus|sqs] [-quick] [-replicas 1,2,4,8] [-pressure none,throttle,latency] [-exception-rate 0,1%,10%]
//	      [-arrival in-order,shuffled,reversed] [-early defer,store] [-reorder-window N] [-sessions 60] [-messages 50] [-sessions-per-replica 4]
//	      [-session-connections 1]
//	      [-throttle-credits 1000] [-latency 5ms] [-pipeline-runs] [-database-url URL] [-retry-base 2ms]
//	      [-cell-timeout 3m] [-seed 1]
//	      [-connection-string CS (-queue Q | -topic T -subscription S)]
//	      [-out bench-out | -report DIR] [-format svg] [-progress=true] [-log-level error] [-cpuprofile FILE]
//
// It writes DIR/results.csv (a header row, one row per cell) and one chart per dimension (SVG, or
// PNG with -format png):
// throughput by replicas and by exception rate, p99 latency by replicas, broker calls per
// message in order and shuffled; and on stdout a table of each cell's worker rate, the plain
// pipelined SDK consumer's rate in the same cell and their ratio, the calls per message of each,
// the worker's p99 latency, the operations the throttle refused, the credits a message cost and
// the credit ratio (the worker's rate over the rate the throttle's credits allow at that cost).
// With -report DIR (docs/reports in the repository) the outputs go instead to a new folder
// DIR/<date>-bench-<commit> with a report.md that names the commit, the date, the machine, the
// Go version and the command line, and holds the table and any failure (see package
// internal/benchreport). A progress bar runs on stderr. -quick runs a small matrix in under a minute; the dimension
// flags select subsets; -pipeline-runs=false runs the replicas with SEQBUS_PIPELINE_RUNS=false
// (each completion awaited; the worker's default pipelines them); -database-url keeps the
// replicas' state in Postgres (the migrations applied at start); -early defer,store runs each
// cell once per mode of early messages (SEQBUS_EARLY_MESSAGES), side by side on the same input,
// store on a partitioned queue (it needs -database-url), with -reorder-window smaller than a
// session so that early messages reach the mode; the table's "broker calls/msg" counts the
// session and source calls alone, "worker calls/msg" adds the state store's; -cpuprofile writes a CPU profile
// whose samples carry the cell and the side (worker, plain, publisher) as pprof labels. Handler exceptions are
// transient: the engine retries a failed call after 2 ms, doubling up to 20 ms, 10 attempts
// (-retry-base changes the first wait; the worker's default of 1 s would make the exception
// cells measure the backoff).
//
// With -provider sqs (it needs -database-url; pressure none or latency, each SQS call delayed by
// -latency) each cell runs on an in-process SQS FIFO (emulator/sqs) instead: the replicas with SEQBUS_PROVIDER=sqs, state and early messages
// in Postgres, then a plain AWS SDK FIFO consumer (ReceiveMessage up to 10, DeleteMessage each,
// no ordering of its own) on a queue of its own with the same input. The broker calls of each
// side are the SQS API calls the local SQS counted from that side's client; after the table it
// prints the SQS budgets: in order, the worker's rate at least 0.8 of the plain consumer's;
// shuffled and reversed, the worker's SQS calls per message at most the in-order cell's + 0.3.
//
// Exit codes: 0 when every cell finished in order, 1 when a cell failed, did not finish or saw
// an order violation, 2 for bad flags.
package main

// Package bench measures seqbus's throughput baseline, the matrix the sequenced-delivery design
// asks for: {processing rate, exception rate} × {worker replicas, Service Bus pressure}, with the
// order in which each session's messages arrive as a fourth dimension. cmd/bench is its command
// line.
//
// Each cell starts an in-process emulator with the cell's pressure (none; the Standard tier's
// credit-based throttle; a fixed latency on every answer) or uses the namespace of a connection
// string, starts the cell's replicas (worker.Client, each with its own connections, state in
// Service Bus session state), and publishes sessions in one batch each, in order or shuffled,
// keeping a bounded backlog of unfinished sessions so that the replicas always have work and the
// publish → handler latency measures the pipeline rather than a growing queue. The publisher
// shares the namespace, and so its credits; a batch the throttle refused is tried again within
// the namespace's period (50-200 ms), so that the replicas do not wait for their backlog. The
// handler fails a share of its calls (a transient exception the engine retries with a small
// backoff), checks each session's order and records the latency.
//
// A cell reports the rate (messages handled per second, first publish to last message), the
// exception rate, latency p50 and p99, the replicas' broker calls, state store calls and state
// writes per message, the duplicates dropped, what the emulator's pressure refused or delayed,
// the credits the throttle charged per message, the rate its credits allow at that cost and the
// worker's share of it (Result.CreditRatio), and order violations (must be 0). Each cell then runs PlainConsumer, the plain pipelined SDK
// session consumer, on the same emulator and pressure with sessions of its own, so that every
// cell has the worker's rate, the plain consumer's and their ratio. WriteOutputs writes
// results.csv and one SVG chart per dimension (gonum/plot); WriteTable prints the rates.
//
// With Options.Provider ProviderSQS a cell runs on the in-process SQS FIFO (emulator/sqs), behind
// an http.Handler that counts the API calls of each side by the header its client sets: the
// replicas (SEQBUS_PROVIDER=sqs, state and early messages in a Postgres schema of the cell's
// own) on one queue, then PlainSQSConsumer on another with the same input; with the latency
// pressure every call waits Options.Latency first. SQSBudgets checks the results against the
// SQS budgets.
//
// This package may import anything of seqbus; only cmd/bench and tests import it.
package bench

// Package worker runs seqbus as a service: [New] builds, from one [Config], the Service Bus
// adapter, the state store, the handler chain, the runner and the sweeper that cmd/worker and
// the demo run alike (river's Client is the model); [Client.Start] connects and starts,
// [Client.Stop] drains and [Client.StopAndCancel] cancels.
//
// # Configuration
//
// [Config] is the one description of the worker's settings: each field with an envconfig tag is
// also the variable SEQBUS_<tag> that cmd/worker reads ([FromEnv]); [DefaultConfig] holds the
// defaults (what an empty environment gives); [Config.Validate], which New calls, reports every
// problem at once, each a [*ConfigError] naming the field and its variable. Zero means zero:
// start from DefaultConfig and change what differs. [RelayConfig] follows the same rules;
// [ServiceBus], [Database] and [Service] are the settings they share.
//
// # Services
//
// Every long-running part has one lifecycle (Start; Stop lets the work in hand finish, canceling
// it when the context ends; StopAndCancel; Stopped) and gets the logger and the clock of its
// Service settings: the runner, the unordered consumer, the sweeper (with the Postgres tombstone
// purge), the readiness checks and the relay. Client and Relay stop them in order; Service.SoftStopTimeout
// turns a graceful stop into a hard one, and Stop then reports [ErrSoftStopTimeout]. [Connect]
// builds the Service Bus clients, the database pool, the state store and the session lister
// with one set of knobs, for the worker, the relay and the operator commands alike.
//
// # What runs
//
//   - The runner (sequencer.Runner) accepts up to Config.MaxConcurrentSessions sessions at once
//     and restores each one's order with the engine's policy (the sequencing fields of Config).
//   - The handler chain: tracing (one span per call), metrics, panic recovery and a timeout
//     around Config.Handler (or the journal handler with Postgres).
//   - The sweeper, every Config.SweepInterval, on the one replica that holds the entity's lease
//     (a Postgres advisory lock, or the lock of the reserved session sessionstate.LeaseSessionID):
//     it finds the sessions whose state says they are parked, blocked, waiting on a gap,
//     stranded or waiting for a released retry (a query with Postgres; with Service Bus a
//     sessionstate.Watch that reads only the sessions whose state changed since the last sweep
//     and that no replica's release report explains),
//     wakes those the broker will not offer (stranded on deferred messages; past their gap
//     timeout; due for their released retry, the ones not due yet on time by a timer armed for the
//     earliest; the runner that released a session wakes it at its time too), refreshes the
//     session gauges, warns
//     about gaps open for 1 min, 10 min and 1 h, and clears tombstones older than
//     Config.TombstoneTTL. The other replicas report 0 in the session gauges.
//   - With Service Bus session state, the release reporter, every half Config.SweepInterval on
//     every replica: the sessions this replica's runner saved in the last two intervals, and
//     whether each saved state needs the sweeper, written into the state of its own reserved
//     session (sessionstate.ReportSessionID), so that the sweeper need not read them.
//   - Readiness checks every Config.ReadyInterval: the broker (a management call) and, with
//     Postgres, the database.
//   - The scaling signal, every Config.ScaleInterval on the replica that holds the sweeper lease:
//     the sessions with messages ready to handle (a session listing, less the sessions the stored
//     states say are parked, blocked or ended, with a lock and a peek for those the listing and
//     the states leave in doubt: on a gap, or with Service Bus session state, where a state that
//     rules a session out is read again only once it changed), and the replicas
//     that makes, ceil(ready ÷ MaxConcurrentSessions) up to ScaleMaxReplicas. [Scaler] (`worker
//     scaler`) serves the same signal on its own, consuming nothing, for scaling from zero.
//
// # Checks at start and the doctor
//
// Start probes the entity (a wrong name or key stops it) and, when Config.EarlyMessages is
// [EarlyMessagesDefer] and the management API can read the entity (Manage right), refuses a
// partitioned entity unless Config.DeferOnPartitioned: Service Bus is known to fail the fetch of
// a session's deferred messages there. Without Manage it logs that it could not check.
// [RunDoctor] (`worker doctor`) checks, with the same Config, the connection, the rights, the
// entity, the state store and a live round trip of every broker call the worker makes, and
// returns a [DoctorReport] of lines (pass, warn, fail, skip), each saying what to do.
//
// # HTTP
//
// With Config.HTTPAddr set the Client serves GET /metrics (Prometheus), GET /healthz (200 while
// the process runs) and GET /readyz (200 when the last check reached the broker and the database,
// 503 with a JSON list of reasons otherwise; within two ready intervals of losing either) and
// GET /scale, the last evaluation of the scaling signal as JSON ([Scale]; 503 with the reason when
// this replica does not evaluate it or has not yet).
//
// # Metrics
//
// The names and labels are part of the interface; no label ever carries a session id:
//
//	seqbus_messages_total{outcome}          handled, held, deferred, duplicate, invalid, dead_lettered, retried, blocked, released_retry
//	seqbus_handler_duration_seconds         histogram of handler calls
//	seqbus_handler_errors_total             failed, panicked or timed-out handler calls
//	seqbus_sessions_active                  sessions this worker handles now
//	seqbus_sessions_parked                  parked sessions of the entity (as of the last sweep)
//	seqbus_sessions_blocked                 blocked sessions of the entity (as of the last sweep)
//	seqbus_sessions_retrying                sessions released until a retry (as of the last sweep)
//	seqbus_gap_wait_seconds                 histogram of gap waits, observed when a gap closes
//	seqbus_gap_oldest_seconds               age of the oldest open gap (as of the last sweep)
//	seqbus_gaps_opened_total                sessions released idle with a sequence missing
//	seqbus_state_saves_total                state saves
//	seqbus_state_loads_total                state loads
//	seqbus_state_conflicts_total            saves refused by the version check
//	seqbus_state_save_duration_seconds      histogram of state saves
//	seqbus_broker_calls_total{op}           Service Bus calls by operation
//	seqbus_lock_lost_total                  session runs stopped by a lost lock
//	seqbus_sweeper_wakes_total              sessions the sweeper handed to the runner
//	seqbus_sweeper_lease                    1 on the replica that holds the sweeper lease
//	seqbus_sweep_broker_calls_total{op}     the sweeper's, its lease's and the release reports' Service Bus calls
//	seqbus_ready                            1 when the last readiness check passed
//	seqbus_replicas_wanted                  replicas the entity's work needs (the scaling signal)
//	seqbus_sessions_ready                   sessions with messages ready to handle
//	seqbus_scale_broker_calls_total{op}     the scaling signal's Service Bus calls
//	seqbus_scale_evaluations_total          evaluations of the scaling signal
//
// plus the Go and process collectors.
//
// # Tracing
//
// With Config.TracerProvider set (TracingFromEnv builds one from the OTEL_* variables) each
// handler call is a span, a child of the publisher's trace context when the message carries one
// in its Diagnostic-Id or traceparent application property, with the session id, sequence,
// delivery count and outcome as attributes. [LogHandler] adds trace_id to log records made with
// the span's context.
//
// worker may import every seqbus package but the emulator; cmd/worker and the demo import it.
package worker

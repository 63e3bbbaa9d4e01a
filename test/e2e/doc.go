// Package e2e holds seqbus's end-to-end scenarios. There is no production code here: the tests
// start the in-repo Service Bus emulator in-process, use the local Postgres (through
// internal/pgtest, one schema per test) and run the real worker binary, built once from
// ./cmd/worker in TestMain, as separate processes. Nothing is mocked.
//
// # Scenarios
//
//   - shuffled sessions restored in order with each state store (servicebus, postgres);
//   - two worker processes sharing one entity's sessions (log handler; and journal handler, whose
//     rows merged by handle time across both processes give each session's 1..N);
//   - a worker killed with SIGKILL mid-session and another one resuming from the stored state;
//   - the journal handler (exactly-once effects in the postgres transaction) with a crash
//     between the handler and the commit (the SEQBUS_TEST_CRASH_BEFORE_COMMIT test hook);
//   - the operator commands: the canonical recovery (a handler bug parks sessions, dlq replay
//     --all, sessions resume --all-parked) with each store, a replay killed half way and run
//     again, skip --to on a gap, resume waiting for the session's holder, bad input;
//   - deferral where the broker refuses the fetch of a deferred message (a partitioned session
//     queue, or any session queue on the strict emulator): the worker stops each session at its
//     first deferred sequence, leaving every message not handled at the broker, and `worker
//     doctor`'s round trip fails at that step;
//   - invalid configuration rejected at process level without leaking the key;
//   - docker-compose.yml kept true to the worker's configuration;
//   - the worker against Microsoft's Service Bus emulator (and the SQL Server it needs) in Docker,
//     through testcontainers-go, as docker-compose.yml's "microsoft" profile runs it; skipped,
//     saying so, where no Docker engine answers.
//
// The benchmarks compare the worker's pipeline (sequencer.Runner + sbadapter + the Service Bus
// state store, in-process) with a plain SDK session consumer on the same emulator:
//
//	go test ./test/e2e -run '^$' -bench . -benchtime 3x
//
// This package may import anything in the module; nothing may import it.
package e2e

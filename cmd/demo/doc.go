// Command demo runs seqbus end to end on embedded defaults, with nothing to install: it starts the
// in-repo Service Bus emulator in-process, creates a session-enabled queue, publishes sessions
// whose sequences arrive shuffled (with duplicate copies), runs worker replicas (the worker
// package, as cmd/worker builds it) with their state in Service Bus session state, and prints a
// summary that accounts for every published copy.
//
//	go run ./cmd/demo                # 8 sessions × 50 messages, 2 replicas
//	go run ./cmd/demo -crash         # kill a replica a third of the way through
//	go run ./cmd/demo -h             # the flags
//
// The exit code is 0 when every session was handled in order and nothing was left behind, 1
// otherwise, 2 for a bad command line. The demo is a command of its own so that the deployed
// worker binary does not carry the emulator.
package main

// Package goawscheck runs the local SQS conformance suite (emulator/sqs/sqstest)
// against goaws (github.com/Admiral-Piett/goaws), embedded in-process, to show
// how far it is from the FIFO behaviour seqbus relies on. It is a module of its
// own so that goaws never enters the seqbus module's dependencies; run it with
//
//	cd emulator/sqs/goawscheck && go test -count=1 .
//
// The result is recorded in docs/sqs-local.md.
package goawscheck

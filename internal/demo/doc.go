// Package demo runs seqbus end to end in one process: it starts the in-repo Service Bus emulator,
// publishes sessions whose messages arrive shuffled (with duplicates), runs worker replicas on
// them and checks that every session was handled exactly in order. cmd/demo calls [Run].
//
// The demo is a tool beside the product: it may import everything (emulator, adapter, stores,
// sequencer), and nothing outside cmd/worker and tests may import it.
package demo

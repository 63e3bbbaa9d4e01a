package sequencer_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/sequencer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pipeliningOf is sequencer.Pipelined when pipelined is set, sequencer.Awaited otherwise.
func pipeliningOf(pipelined bool) sequencer.Pipelining {
	if pipelined {
		return sequencer.Pipelined
	}
	return sequencer.Awaited
}

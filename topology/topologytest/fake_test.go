package topologytest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/topology"
	"github.com/seqbus/seqbus/topology/topologytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFakeConformance(t *testing.T) {
	t.Parallel()
	topologytest.Exercise(t, func(*testing.T) topology.Admin { return topologytest.NewFake() })
}

package worker

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/memory"
	"github.com/seqbus/seqbus/sessionstate/postgres"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
)

// The metrics wrapper keeps what the engine asks of a store: whether it is kept in the session
// (no fencing needed) and whether it is atomic.
func TestInstrumentKeepsTheStoresKind(t *testing.T) {
	t.Parallel()
	m, err := newMetrics(prometheus.NewRegistry(), func() float64 { return 0 }, func() map[string]uint64 { return nil }, func() float64 { return 0 })
	require.NoError(t, err)

	sb := instrument(sbstate.New(nil), m, nil)
	bound, ok := sb.(sequencer.SessionBoundStore)
	require.True(t, ok && bound.WritesThroughSession(), "the Service Bus session state is session-bound")

	mem := instrument(memory.New(), m, nil)
	bound, ok = mem.(sequencer.SessionBoundStore)
	require.True(t, ok)
	require.False(t, bound.WritesThroughSession(), "a store of its own is not")
	_, atomic := mem.(sequencer.AtomicStore)
	require.False(t, atomic)

	pg := instrument(&postgres.TxStore{}, m, nil)
	_, atomic = pg.(sequencer.AtomicStore)
	require.True(t, atomic, "the transactional store stays atomic")
}

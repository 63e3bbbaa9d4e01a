package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/workerconfig"
	"github.com/seqbus/seqbus/sequencer"
)

// TestEngineConfigFollowsTheSettings checks that the engine's policy settings reach the engine
// from the environment, defaults included.
func TestEngineConfigFollowsTheSettings(t *testing.T) {
	t.Setenv("SEQBUS_CONNECTION_STRING", "Endpoint=sb://localhost;SharedAccessKeyName=k;SharedAccessKey=v")
	t.Setenv("SEQBUS_QUEUE", "orders")
	cfg, err := workerconfig.Load(nil)
	require.NoError(t, err)
	e := engineConfig(cfg)
	require.Equal(t, sequencer.GapWait, e.GapPolicy)
	require.Zero(t, e.GapTimeout)
	require.Equal(t, sequencer.UnsequencedDeadLetter, e.Unsequenced)
	require.Equal(t, sequencer.PoisonPark, e.Poison)
	require.NoError(t, e.WithDefaults().Validate())

	t.Setenv("SEQBUS_GAP_TIMEOUT", "90s")
	t.Setenv("SEQBUS_GAP_POLICY", "park")
	t.Setenv("SEQBUS_UNSEQUENCED", "passthrough")
	t.Setenv("SEQBUS_POISON_POLICY", "block")
	cfg, err = workerconfig.Load(nil)
	require.NoError(t, err)
	e = engineConfig(cfg)
	require.Equal(t, 90*time.Second, e.GapTimeout)
	require.Equal(t, sequencer.GapPark, e.GapPolicy)
	require.Equal(t, sequencer.UnsequencedPassThrough, e.Unsequenced)
	require.Equal(t, sequencer.PoisonBlock, e.Poison)
	require.NoError(t, e.WithDefaults().Validate())
}

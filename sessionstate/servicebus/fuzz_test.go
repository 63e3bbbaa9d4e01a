package servicebus_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/servicebus"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

// FuzzLoad feeds arbitrary session state blobs (another application's, or corrupt ones) to Load:
// it must return a state or an error, never panic, and a blob it accepts must save back.
func FuzzLoad(f *testing.F) {
	ctx := context.Background()
	seed := storetest.NewSession("seed")
	_, err := servicebus.New(nil).Save(ctx, sequencer.SaveParams{Session: seed, State: storetest.SampleState()})
	require.NoError(f, err)
	blob, err := seed.GetState(ctx)
	require.NoError(f, err)
	f.Add(blob)
	f.Add([]byte{})
	f.Add([]byte{0x01})
	f.Add([]byte{0x01, 0x00})
	f.Add([]byte{0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte(`{"next":3}`))

	f.Fuzz(func(t *testing.T, in []byte) {
		sess := storetest.NewSession("fuzz")
		require.NoError(t, sess.SetState(ctx, in))
		store := servicebus.New(nil)
		st, v, err := store.Load(ctx, sequencer.LoadParams{Session: sess})
		if err != nil {
			return
		}
		_, err = store.Save(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: v})
		require.NoError(t, err)
	})
}

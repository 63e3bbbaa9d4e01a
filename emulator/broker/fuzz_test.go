package broker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
)

// FuzzParseUserConfig checks that the Config.json parser never panics, and that every
// document it accepts can be applied to an empty broker.
func FuzzParseUserConfig(f *testing.F) {
	f.Add([]byte(sampleConfig))
	f.Add([]byte(`{"UserConfig":{"Namespaces":[{"Name":"n","Queues":[{"Name":"q","Properties":{"LockDuration":"PT1M"}}]}]}}`))
	f.Add([]byte(`{"UserConfig":{"Namespaces":[{"Name":"n","Topics":[{"Name":"t","Subscriptions":[{"Name":"s","Rules":[` +
		`{"Name":"r","Properties":{"FilterType":"Correlation","CorrelationFilter":{"Label":"x"}}}]}]}]}]}}`))
	f.Add([]byte(`{"UserConfig":{"Namespaces":[{"Name":"n","Queues":[{"Name":"a"},{"Name":"b","Properties":{"ForwardTo":"a"}}]}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		uc, err := broker.ParseUserConfig(data)
		if err != nil {
			require.ErrorIs(t, err, broker.ErrInvalidConfig)
			return
		}
		b := broker.New(broker.Config{})
		defer b.Close()
		require.NoError(t, b.ApplyUserConfig(uc))
	})
}

package topology_test

import (
	"io"
	"os"
	"testing"

	"github.com/seqbus/seqbus/topology"
)

// FuzzLoad checks that no file makes Load panic, and that whatever it accepts renders.
func FuzzLoad(f *testing.F) {
	example, err := os.ReadFile("examples/two-sources.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte("queues: [{name: a, forwardTo: b}, {name: b, forwardTo: a}]\n"))
	f.Add([]byte("sequenced:\n  - name: s\n    sources: [in]\n    sessionId: {strategy: fallback, alternatives: [{strategy: entity}, {strategy: repository}]}\n"))
	f.Add([]byte("topics: [{name: t, subscriptions: [{name: s, rules: [{name: r, correlation: {properties: {a: 1, b: 1.5, c: true}}}]}]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ns, _, err := topology.Load("fuzz.yaml", data)
		if err != nil {
			return
		}
		if err := topology.Render(io.Discard, ns, nil); err != nil {
			t.Fatal(err)
		}
	})
}

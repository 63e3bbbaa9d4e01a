package topology_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/seqbus/seqbus/topology"
	"github.com/seqbus/seqbus/topology/topologytest"
)

func BenchmarkLoadExample(b *testing.B) {
	data, err := os.ReadFile("examples/two-sources.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := topology.Load("two-sources.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

// bigFile declares n sequenced blocks with two source topics each.
func bigFile(n int) []byte {
	var sb strings.Builder
	sb.WriteString("sequenced:\n")
	for i := range n {
		fmt.Fprintf(&sb, "  - name: s%d\n    sources: [a%d, b%d]\n    sessionId: {strategy: composite, properties: [{name: K, maxLength: 40}, {name: T, maxLength: 40}]}\n    lockDuration: PT1M\n", i, i, i)
	}
	return []byte(sb.String())
}

// BenchmarkPlan100 plans 100 sequenced blocks (300 topics, 300 subscriptions) against an
// up-to-date fake namespace: the cost of an idempotent re-plan without network.
func BenchmarkPlan100(b *testing.B) {
	want, _, err := topology.Load("big.yaml", bigFile(100))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	fake := topologytest.NewFake()
	live, err := topology.Fetch(ctx, fake, want)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := topology.Apply(ctx, fake, topology.Diff(want, live), nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		live, err := topology.Fetch(ctx, fake, want)
		if err != nil {
			b.Fatal(err)
		}
		if p := topology.Diff(want, live); !p.Empty() {
			b.Fatal("not empty")
		}
	}
}

func BenchmarkLoad100(b *testing.B) {
	data := bigFile(100)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := topology.Load("big.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

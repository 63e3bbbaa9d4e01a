package handler_test

import (
	"context"
	"io"
	"testing"

	"github.com/seqbus/seqbus/handler"
)

func BenchmarkLogHandle(b *testing.B) {
	h := handler.NewLog(io.Discard)
	m := msg([]byte(`{"order":"order-001","step":17,"amount":"12.50"}`))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := h.Handle(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMiddlewareChain(b *testing.B) {
	var metrics handler.Metrics
	h := handler.Chain(handler.NewLog(io.Discard), metrics.Middleware(), handler.WithRecover(nil), handler.WithTimeout(1e9))
	m := msg([]byte("x"))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := h.Handle(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

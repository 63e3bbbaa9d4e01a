package sbadapter

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
)

func BenchmarkMapError(b *testing.B) {
	errs := []error{
		&azservicebus.Error{Code: azservicebus.CodeLockLost},
		&amqp.Error{Condition: condSessionCannotBeLocked},
		&azservicebus.Error{Code: azservicebus.CodeConnectionLost},
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = mapError(opSession, "complete", errs[i%len(errs)])
	}
}

func BenchmarkToMessage(b *testing.B) {
	rm := sbMsg("s1", 42, `{"order":"order-001","step":17}`)
	b.ReportAllocs()
	for b.Loop() {
		_ = ToMessage(rm)
	}
}

// BenchmarkSessionComplete is the adapter's share of a completion: the watch of the settlement
// (watchSettlement) and its bookkeeping around the SDK's call, here a fake that answers at once.
// Parallel, as the engine's pipeline completes up to 16 messages of a session at once; with a
// Limiter, as the worker runs.
func BenchmarkSessionComplete(b *testing.B) {
	for _, limited := range []bool{false, true} {
		b.Run(fmt.Sprintf("limiter=%t", limited), func(b *testing.B) {
			s := newSession(newFakeReceiver("s1"), discard())
			if limited {
				s.limit = NewLimiter(nil)
			}
			var n atomic.Int64
			ctx := b.Context()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					bs := n.Add(1)
					rm := sbMsg("s1", bs, "a")
					binary.BigEndian.PutUint64(rm.LockToken[8:], uint64(bs))
					if err := s.Complete(ctx, ToMessage(rm)); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

package sbadapter_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/sbadapter"
)

// BenchmarkAcceptNextConnections locks sessions with 8 accepts at a time, as a replica's runner
// does, with 5 ms on every broker answer, on one connection and on several
// (Config.AcceptClients): the SDK negotiates each accept's claims one at a time per connection.
// Each op is one session locked, read (one message) and released.
func BenchmarkAcceptNextConnections(b *testing.B) {
	for _, conns := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("connections=%d", conns), func(b *testing.B) {
			srv := emulatortest.Start(b, &emulatortest.Options{
				Queues:        map[string]broker.EntityProperties{"sq": {RequiresSession: true, LockDuration: 30 * time.Second}},
				Config:        emulator.Config{Pressure: emulator.Pressure{Latency: 5 * time.Millisecond}},
				ClientOptions: sbadapter.ClientOptions(nil),
			})
			ctx := b.Context()
			sender, err := srv.Client.NewSender("sq", nil)
			require.NoError(b, err)
			var extra []*azservicebus.Client
			for range conns - 1 {
				extra = append(extra, srv.NewClient(b, sbadapter.ClientOptions(nil)))
			}
			source, err := sbadapter.NewSource(srv.NewClient(b, sbadapter.ClientOptions(nil)),
				sbadapter.Config{Entity: sbadapter.Entity{Queue: "sq"}, AcceptClients: extra})
			require.NoError(b, err)
			batch, err := sender.NewMessageBatch(ctx, nil)
			require.NoError(b, err)
			for i := range b.N {
				sid := "s" + strconv.Itoa(i)
				require.NoError(b, batch.AddMessage(&azservicebus.Message{SessionID: &sid, Body: []byte("x")}, nil))
				if batch.NumMessages() == 100 || i == b.N-1 {
					require.NoError(b, sender.SendMessageBatch(ctx, batch, nil))
					if batch, err = sender.NewMessageBatch(ctx, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
			jobs := make(chan struct{}, b.N)
			for range b.N {
				jobs <- struct{}{}
			}
			close(jobs)
			b.ResetTimer()
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range jobs {
						if err := lockReadRelease(ctx, source); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sessions/s")
		})
	}
}

func lockReadRelease(ctx context.Context, source *sbadapter.Source) error {
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sess, err := source.AcceptNext(actx)
	if err != nil {
		return err
	}
	msgs, err := sess.Receive(actx, 1)
	if err == nil && len(msgs) == 1 {
		err = sess.Complete(actx, msgs[0])
	}
	if cerr := sess.Close(context.WithoutCancel(ctx)); err == nil {
		err = cerr
	}
	return err
}

package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/sbadapter"
)

// TestLeaseOneHolderAtATime: of the replicas of an entity one holds the lease; it keeps it on
// every try; when it lets go, or its connection goes, another takes it at its next try. Both
// kinds: the lock of the reserved session, and the Postgres advisory lock.
func TestLeaseOneHolderAtATime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// newLeases returns two replicas' leases on one entity and a third on another entity,
		// and cut, which ends the first lease's connection as a crash would.
		newLeases func(t *testing.T) (a, b, other lease, cut func())
	}{
		{"servicebus", func(t *testing.T) (lease, lease, lease, func()) {
			srv := emulatortest.Start(t, &emulatortest.Options{Queues: map[string]broker.EntityProperties{
				"orders": {RequiresSession: true, LockDuration: 10 * time.Second},
			}})
			source := func(opts *sbadapter.Entity) *sessionLease {
				client := srv.NewClient(t, sbadapter.ClientOptions(nil))
				s, err := sbadapter.NewSource(client, sbadapter.Config{Entity: *opts})
				require.NoError(t, err)
				return &sessionLease{source: s}
			}
			a := source(&sbadapter.Entity{Queue: "orders"})
			return a, source(&sbadapter.Entity{Queue: "orders"}), nil, func() {
				// A crashed holder's link closes with its connection: the broker frees the lock.
				a.mu.Lock()
				defer a.mu.Unlock()
				_ = a.sess.Close(context.Background())
			}
		}},
		{"postgres", func(t *testing.T) (lease, lease, lease, func()) {
			pool := pgtest.NewPool(t, nil)
			a := &advisoryLease{pool: pool, entity: "orders"}
			return a, &advisoryLease{pool: pool, entity: "orders"}, &advisoryLease{pool: pool, entity: "topic/subscriptions/s"}, func() {
				a.mu.Lock()
				defer a.mu.Unlock()
				_, err := pool.Exec(context.Background(), `SELECT pg_terminate_backend($1, 5000)`, a.conn.Conn().PgConn().PID())
				require.NoError(t, err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a, b, other, cut := tt.newLeases(t)
			hold := func(l lease) bool {
				held, err := l.Hold(ctx)
				require.NoError(t, err)
				return held
			}
			require.True(t, hold(a))
			require.False(t, hold(b), "one holder at a time")
			require.True(t, hold(a), "the holder keeps it")
			if other != nil {
				require.True(t, hold(other), "another entity has a lease of its own")
				other.Release(ctx)
			}
			a.Release(ctx)
			require.True(t, hold(b), "released: the next try takes it")
			require.False(t, hold(a))
			b.Release(ctx)

			require.True(t, hold(a))
			cut()
			require.True(t, hold(b), "the lock went with the connection")
			require.False(t, hold(a), "the old holder knows it lost the lease, and another has it")
			b.Release(ctx)
			require.True(t, hold(a), "a holder that lost the lease takes it again when it is free")
			a.Release(ctx)
		})
	}
}

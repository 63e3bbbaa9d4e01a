package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/outbox"
	"github.com/seqbus/seqbus/publisher"
)

func TestCounter_SharedDurableGapless(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	pool := newPool(t, 8)
	c, err := outbox.NewCounter(pool, &outbox.CounterConfig{Entity: "orders"})
	require.NoError(t, err)

	// Many callers at once (processes, as far as the counter can tell): 1..n, each once.
	const callers, each = 6, 20
	var (
		mu  sync.Mutex
		got []int64
		wg  sync.WaitGroup
	)
	for range callers {
		wg.Go(func() {
			for range each {
				seq, err := c.Next(ctx, "s")
				if !assertNoError(t, err) {
					return
				}
				mu.Lock()
				got = append(got, seq)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	for i, s := range got {
		require.Equal(t, int64(i+1), s)
	}
	require.Len(t, got, callers*each)

	// The outbox continues the same sequence: one counter per session.
	require.Equal(t, int64(callers*each+1), enqueue(ctx, t, pool, outbox.EnqueueParams{Entity: "orders", SessionID: "s"}))

	// NextLast ends the session; so does End.
	last, err := c.NextLast(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, int64(callers*each+2), last)
	_, err = c.Next(ctx, "s")
	require.ErrorIs(t, err, outbox.ErrSessionEnded)
	_, err = c.Next(ctx, "t")
	require.NoError(t, err)
	require.NoError(t, c.End(ctx, "t"))
	require.NoError(t, c.End(ctx, "t"), "ending twice does nothing")
	require.NoError(t, c.End(ctx, "never-numbered"))
	_, err = c.Next(ctx, "t")
	require.ErrorIs(t, err, outbox.ErrSessionEnded)
	_, err = c.Next(ctx, "")
	require.ErrorIs(t, err, outbox.ErrInvalidSessionID)
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// TestCounter_InTheCallersTransaction: a Counter on a pgx.Tx allocates in that
// transaction; a rollback gives the numbers back.
func TestCounter_InTheCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 20*time.Second)
	pool := newPool(t, 4)
	for _, commit := range []bool{false, true} {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		c, err := outbox.NewCounter(tx, &outbox.CounterConfig{Entity: "orders"})
		require.NoError(t, err)
		for want := int64(1); want <= 2; want++ {
			seq, err := c.Next(ctx, "s")
			require.NoError(t, err)
			require.Equal(t, want, seq)
		}
		if commit {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
	}
	seq, err := outbox.NextSequence(ctx, pool, outbox.NextSequenceParams{Entity: "orders", SessionID: "s"})
	require.NoError(t, err)
	require.Equal(t, int64(3), seq)
}

// recorder is a publisher.Sender that keeps what it is given.
type recorder struct {
	mu   sync.Mutex
	sent []*azservicebus.Message
}

func (r *recorder) SendMessage(_ context.Context, m *azservicebus.Message, _ *azservicebus.SendMessageOptions) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, m)
	return nil
}

// TestCounter_PublisherSurvivesARestart: a Publisher on a Counter continues a session's
// numbers after a restart and alongside a second instance (MemoryCounter would start
// again at 1), and its last message ends the session for every instance.
func TestCounter_PublisherSurvivesARestart(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 20*time.Second)
	pool := newPool(t, 4)
	newPublisher := func() (*publisher.Publisher, *recorder) {
		c, err := outbox.NewCounter(pool, &outbox.CounterConfig{Entity: "orders"})
		require.NoError(t, err)
		rec := &recorder{}
		p, err := publisher.New(rec, &publisher.Config{Strategy: publisher.Composite{Properties: []string{"Order"}}, Counter: c})
		require.NoError(t, err)
		return p, rec
	}
	m := func() *azservicebus.Message {
		return &azservicebus.Message{ApplicationProperties: map[string]any{"Order": int64(42)}}
	}
	first, _ := newPublisher()
	for range 2 {
		_, err := first.Publish(ctx, m(), nil)
		require.NoError(t, err)
	}
	restarted, rec := newPublisher()
	second, _ := newPublisher()
	res, err := restarted.Publish(ctx, m(), nil)
	require.NoError(t, err)
	require.Equal(t, publisher.Published{SessionID: "42", Sequence: 3}, res)
	res, err = second.Publish(ctx, m(), &publisher.PublishOptions{Last: true})
	require.NoError(t, err)
	require.Equal(t, int64(4), res.Sequence)
	_, err = first.Publish(ctx, m(), nil)
	require.ErrorIs(t, err, outbox.ErrSessionEnded)
	require.Equal(t, "42/3", *rec.sent[0].MessageID)
}

func TestNewCounter_Invalid(t *testing.T) {
	t.Parallel()
	pool := newPoolUnmigrated(t)
	for _, tt := range []struct {
		db   outbox.DB
		cfg  *outbox.CounterConfig
		want string
	}{
		{nil, &outbox.CounterConfig{Entity: "q"}, "db is nil"},
		{pool, nil, "Entity is required"},
		{pool, &outbox.CounterConfig{Entity: "a queue"}, "invalid entity"},
	} {
		_, err := outbox.NewCounter(tt.db, tt.cfg)
		require.ErrorContains(t, err, tt.want, fmt.Sprint(tt.cfg))
	}
}

// A pgx.Tx is a DB too (TestCounter_InTheCallersTransaction).
var _ outbox.DB = pgx.Tx(nil)

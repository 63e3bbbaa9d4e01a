package sqsadapter_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/contract"
	"github.com/seqbus/seqbus/sqsadapter"
)

// TestTwoSourcesKeepGroupOrder runs two Sources (two processes) with three sessions each over one
// queue: every message is handled once, each group in order, and no message of a group is
// handed out while an earlier one is unsettled anywhere.
func TestTwoSourcesKeepGroupOrder(t *testing.T) {
	t.Parallel()
	const groups, perGroup = 6, 20
	l := newLocal(t, nil)
	url, _ := l.queue(t, 100)
	pub := publisher{c: l.Client, url: url}
	for i := 1; i <= perGroup; i++ {
		for g := range groups {
			send(t, pub, fmt.Sprint("g", g), int64(i))
		}
	}
	var mu sync.Mutex
	next := map[string]int64{} // the group's next expected sequence
	handled := 0
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for p := range 2 {
		src, err := sqsadapter.New(sqsadapter.Config{Client: l.Client, QueueURL: url, Visibility: 10 * time.Second, Wait: time.Second, Linger: time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = src.Close(context.Background()) })
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					mu.Lock()
					finished := handled == groups*perGroup
					mu.Unlock()
					if finished {
						return
					}
					actx, acancel := context.WithTimeout(ctx, 500*time.Millisecond)
					sess, err := src.AcceptNext(actx)
					acancel()
					if err != nil {
						continue
					}
					for {
						rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
						msgs, err := sess.Receive(rctx, 3)
						rcancel()
						if err != nil {
							errs <- fmt.Errorf("source %d worker %d: %w", p, w, err)
							return
						}
						if len(msgs) == 0 {
							break
						}
						for _, m := range msgs {
							seq, _, err := contract.Parse(m.Properties, contract.SequenceProperty, contract.LastProperty)
							if err != nil {
								errs <- err
								return
							}
							mu.Lock()
							want := next[m.SessionID] + 1
							if seq == want {
								next[m.SessionID] = seq
								handled++
							}
							mu.Unlock()
							if seq != want {
								errs <- fmt.Errorf("group %s: got %d, want %d", m.SessionID, seq, want)
								return
							}
							if err := sess.Complete(ctx, m); err != nil {
								errs <- err
								return
							}
						}
					}
					_ = sess.Close(ctx)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.Equal(t, groups*perGroup, handled)
	for g := range groups {
		require.EqualValues(t, perGroup, next[fmt.Sprint("g", g)])
	}
}

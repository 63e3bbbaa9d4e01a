package testio_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/seqbus/seqbus/internal/testio"
)

func TestSyncBufferConcurrentWriters(t *testing.T) {
	t.Parallel()
	var b testio.SyncBuffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprintf(&b, "%d\n", i)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 800 {
		t.Fatalf("got %d lines, want 800", n)
	}
}

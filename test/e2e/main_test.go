package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/internal/workerbin"
)

// workerBin is the worker binary built by TestMain.
var workerBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "seqbus-e2e-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: temp dir: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	workerBin = filepath.Join(dir, "worker")
	if err := workerbin.Build(context.Background(), workerBin, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building the worker binary: %v\n", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: goroutines leaked: %v\n", err)
			return 1
		}
	}
	return code
}

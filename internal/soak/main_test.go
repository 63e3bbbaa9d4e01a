package soak_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/seqbus/seqbus/internal/workerbin"
)

// workerBin is the worker binary built by TestMain, which the soak's replicas run.
var workerBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "seqbus-soak-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: temp dir: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	workerBin = filepath.Join(dir, "worker")
	if err := workerbin.Build(context.Background(), workerBin, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "soak: building the worker binary: %v\n", err)
		return 1
	}
	return m.Run()
}

package soak_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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
	build := exec.Command("go", "build", "-o", workerBin, "github.com/seqbus/seqbus/cmd/worker")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "soak: building the worker binary: %v\n", err)
		return 1
	}
	return m.Run()
}

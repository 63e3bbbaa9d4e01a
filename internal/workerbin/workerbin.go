package workerbin

import (
	"context"
	"fmt"
	"io"
	"os/exec"
)

// Package is the import path of the worker command.
const Package = "github.com/seqbus/seqbus/cmd/worker"

// Build builds the worker binary at path with the go command, writing the compiler's output to
// out. It needs the module's source: run it from within the repository.
func Build(ctx context.Context, path string, out io.Writer) error {
	build := exec.CommandContext(ctx, "go", "build", "-o", path, Package)
	build.Stdout, build.Stderr = out, out
	if err := build.Run(); err != nil {
		return fmt.Errorf("workerbin: go build %s: %w", Package, err)
	}
	return nil
}

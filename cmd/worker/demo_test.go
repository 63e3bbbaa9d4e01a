package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWorkerDemoCompletesWithoutViolations(t *testing.T) {
	c, out, errOut := newTestCLI()
	code := c.run(context.Background(), []string{"demo", "-sessions", "4", "-messages", "25", "-timeout", "1m"})
	require.Equal(t, 0, code, "stderr: %s\nstdout: %s", errOut.String(), out.String())
	require.Contains(t, out.String(), "handled             100 of 100")
	require.Contains(t, out.String(), "order violations    0")
	require.Contains(t, out.String(), "OK:")
}

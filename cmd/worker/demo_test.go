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

func TestWorkerDemoWithoutDuplicates(t *testing.T) {
	c, out, errOut := newTestCLI()
	code := c.run(context.Background(), []string{"demo", "-sessions", "2", "-messages", "5", "-replicas", "1", "-duplicates", "0", "-timeout", "1m"})
	require.Equal(t, 0, code, "stderr: %s\nstdout: %s", errOut.String(), out.String())
	require.Contains(t, out.String(), "published           10 (0 duplicates, shuffled)")
	require.Contains(t, out.String(), "duplicates dropped  0")
}

package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBadFlags: a bad flag exits 2 with a message, and runs nothing.
func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-store", "redis"}, `unknown store "redis"`},
		{[]string{"-sessions", "0"}, "at least 1"},
		{[]string{"-sweep-interval", "0s"}, "positive"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-no-such-flag"}, "flag provided but not defined"},
		{[]string{"-idle", "-ended", "1000,many"}, `-ended: "many" is not a number`},
		{[]string{"-idle", "-ended", "-5"}, `-ended: "-5" is not a number`},
		{[]string{"-idle", "-catch-up", "-1s"}, "positive"},
		{[]string{"-idle", "-worker-env", "SEQBUS_SCALE_INTERVAL"}, "-worker-env"},
	} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, run(context.Background(), tc.args, &stdout, &stderr), "%v", tc.args)
		require.Contains(t, stderr.String(), tc.want, "%v", tc.args)
		require.Empty(t, stdout.String(), "%v", tc.args)
	}
}

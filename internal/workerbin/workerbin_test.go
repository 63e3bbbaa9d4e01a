package workerbin_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/workerbin"
)

func TestBuild(t *testing.T) {
	path := filepath.Join(t.TempDir(), "worker")
	var out bytes.Buffer
	require.NoError(t, workerbin.Build(context.Background(), path, &out), out.String())
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.NotZero(t, info.Mode()&0o111, "executable")
}

package main

import (
	"bufio"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/internal/testio"
)

// TestMain lets the test binary act as the emulator binary when asked to,
// so the process-level test needs no separate build.
func TestMain(m *testing.M) {
	if os.Getenv("SEQBUS_EMULATOR_RUN_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestProcessPrintsConnectionStringAndStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-amqp-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-key-name", "flagname")
	cmd.Env = append(os.Environ(), "SEQBUS_EMULATOR_RUN_MAIN=1", "SEQBUS_EMULATOR_KEY_NAME=envname", "SEQBUS_EMULATOR_KEY=envkey")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr testio.SyncBuffer
	cmd.Stderr = &stderr
	start := time.Now()
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Less(t, time.Since(start), 2*time.Second)
	require.Regexp(t, `^Endpoint=sb://127\.0\.0\.1:[1-9][0-9]*;SharedAccessKeyName=flagname;SharedAccessKey=envkey;UseDevelopmentEmulator=true\n$`, line,
		"the bound address; the flag wins over the environment, the environment over the default")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "exit status after SIGTERM")
		require.Contains(t, stderr.String(), "emulator: ready")
	case <-time.After(5 * time.Second):
		t.Fatal("emulator did not stop on SIGTERM")
	}
}

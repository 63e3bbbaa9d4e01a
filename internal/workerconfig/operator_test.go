package workerconfig

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLoadOperator(t *testing.T) {
	t.Setenv("SEQBUS_CONNECTION_STRING", testConn)
	t.Setenv("SEQBUS_QUEUE", "orders")
	t.Setenv("SEQBUS_STATE_STORE", "postgres")
	t.Setenv("SEQBUS_DATABASE_URL", "postgres://seqbus:pw@localhost/db")
	t.Setenv("SEQBUS_SEQUENCE_PROPERTY", "Seq")
	c, err := LoadOperator(handlers)
	require.NoError(t, err)
	require.Equal(t, "orders", c.Queue, "the worker's variables")
	require.Equal(t, "postgres", c.StateStore)
	require.Equal(t, "Seq", c.SequenceProperty)
	require.Zero(t, c.TestReplayCrashAfter, "the hook is off unless set")
	require.NotContains(t, c.String(), "pw@", "the password is redacted")

	t.Setenv("SEQBUS_TEST_REPLAY_CRASH_AFTER", "3")
	c, err = LoadOperator(handlers)
	require.NoError(t, err)
	require.Equal(t, 3, c.TestReplayCrashAfter)
	t.Setenv("SEQBUS_TEST_REPLAY_CRASH_AFTER", "-1")
	_, err = LoadOperator(handlers)
	require.ErrorContains(t, err, "SEQBUS_TEST_REPLAY_CRASH_AFTER")

	t.Setenv("SEQBUS_TEST_REPLAY_CRASH_AFTER", "0")
	t.Setenv("SEQBUS_STATE_STORE", "servicebus")
	t.Setenv("SEQBUS_DATABASE_URL", "")
	t.Setenv("SEQBUS_ORDERING", "none")
	_, err = LoadOperator(handlers)
	require.ErrorContains(t, err, "SEQBUS_ORDERING: the operator commands work on sessions")
	t.Setenv("SEQBUS_ORDERING", "session")
	t.Setenv("SEQBUS_QUEUE", "")
	_, err = LoadOperator(handlers)
	require.ErrorContains(t, err, "SEQBUS_QUEUE", "validated as the worker's configuration")
}

package workerconfig

import (
	"errors"
	"fmt"
)

// OperatorConfig is the configuration of the operator commands (`worker sessions …`, `worker
// dlq …`): the worker's own Config, read from the same variables and validated the same way, so
// that the commands run in a worker's environment as it is, plus the commands' test hook.
type OperatorConfig struct {
	Config
	// TestReplayCrashAfter is a test hook, ignored unless set (0): `worker dlq replay` exits
	// abruptly (exit code 137, no cleanup) once it has sent n copies, before it completes their
	// dead letters.
	TestReplayCrashAfter int `envconfig:"TEST_REPLAY_CRASH_AFTER"`
}

// LoadOperator reads the operator commands' configuration from the environment and validates
// it as Load does. handlers lists the handler names the binary knows (for SEQBUS_HANDLER).
func LoadOperator(handlers []string) (*OperatorConfig, error) {
	c, err := load(func(c *OperatorConfig) error { return c.Validate(handlers) })
	if err != nil {
		return nil, err
	}
	var errs []error
	if c.Ordering != OrderingSession {
		errs = append(errs, fmt.Errorf("%s_ORDERING: the operator commands work on sessions and their state; %q has neither", Prefix, c.Ordering))
	}
	if c.TestReplayCrashAfter < 0 {
		errs = append(errs, fmt.Errorf("%s_TEST_REPLAY_CRASH_AFTER: must not be negative, got %d", Prefix, c.TestReplayCrashAfter))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid configuration:\n%w", errors.Join(errs...))
	}
	return c, nil
}

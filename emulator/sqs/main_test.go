package sqs_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every long poll and connection ends with its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

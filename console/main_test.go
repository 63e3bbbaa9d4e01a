package console_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/internal/testio"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testio.IgnoreSDKClaimRenewer()) }

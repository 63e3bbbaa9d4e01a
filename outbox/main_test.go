package outbox_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/internal/testio"
)

func TestMain(m *testing.M) {
	skipExamplesWithoutPostgres()
	goleak.VerifyTestMain(m, testio.IgnoreSDKClaimRenewer())
}

// postgresExamples are the examples that run against the test database. An example cannot
// skip itself as a test does (pgtest.RequireServer): when Postgres is unreachable they are
// added to -test.skip here, unless CI=true, where they run and fail.
const postgresExamples = "^ExampleRelay_Run$"

func skipExamplesWithoutPostgres() {
	flag.Parse()
	err := pgtest.Reach()
	if err == nil || os.Getenv("CI") == "true" {
		return
	}
	skip := postgresExamples
	if prev := flag.Lookup("test.skip").Value.String(); prev != "" {
		skip = prev + "|" + skip
	}
	if err := flag.Set("test.skip", skip); err != nil {
		panic(err)
	}
	fmt.Fprintf(os.Stderr, "outbox: Postgres is unreachable (%v): skipping %s\n", err, postgresExamples)
}

package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/storetest"
)

// TestConformance_Container runs the store suite against a throwaway Postgres 16 container, the
// version docker-compose.yml deploys, next to the local server the other tests use. Without a
// Docker engine it skips and says so.
func TestConformance_Container(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the container test in -short mode")
	}
	testcontainers.SkipIfProviderIsNotHealthy(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	ctr, err := testcontainers.Run(ctx, "postgres:16",
		testcontainers.WithExposedPorts("5432/tcp"),
		testcontainers.WithEnv(map[string]string{"POSTGRES_PASSWORD": "seqbus", "POSTGRES_DB": "seqbus"}),
		testcontainers.WithWaitStrategy(
			wait.ForLog("database system is ready to accept connections").WithOccurrence(2).WithStartupTimeout(2*time.Minute)),
	)
	testcontainers.CleanupContainer(t, ctr)
	require.NoError(t, err)

	host, err := ctr.Host(ctx)
	require.NoError(t, err)
	port, err := ctr.MappedPort(ctx, "5432/tcp")
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, fmt.Sprintf("postgres://postgres:seqbus@%s:%s/seqbus?sslmode=disable", host, port.Port()))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, migrate(ctx, pool))

	storetest.Run(t,
		func(t *testing.T) sequencer.StateStore { return newStore(t, pool, "orders") },
		func(_ *testing.T, id string) sequencer.Session { return session(id) },
	)
}

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/seqbus/seqbus/internal/demo"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/worker"
)

// Microsoft's Service Bus emulator and the SQL Server it keeps its data in, as docker-compose.yml's
// "microsoft" profile runs them. SEQBUS_TEST_MS_EMULATOR_IMAGE and SEQBUS_TEST_MSSQL_IMAGE
// override the images.
const (
	msEmulatorImage = "mcr.microsoft.com/azure-messaging/servicebus-emulator:latest"
	msSQLImage      = "mcr.microsoft.com/mssql/server:2022-CU14-ubuntu-22.04"
	msSQLPassword   = "Seqbus-Emulator-1"
	// msEmulatorConfig is where the emulator reads its entities (Config.json).
	msEmulatorConfig = "/ServiceBus_Emulator/ConfigFiles/Config.json"
)

// requireDocker skips t, saying what cannot run, unless a Docker engine answers.
func requireDocker(t *testing.T) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Skipf("skipping: no Docker engine (testcontainers: %v); Microsoft's Service Bus emulator runs only in Docker", r)
		}
	}()
	provider, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		t.Skipf("skipping: no Docker engine (testcontainers: %v); Microsoft's Service Bus emulator runs only in Docker", err)
	}
	t.Cleanup(func() { _ = provider.Close() })
	if err := provider.Health(context.Background()); err != nil {
		t.Skipf("skipping: no Docker engine (testcontainers: %v); Microsoft's Service Bus emulator runs only in Docker", err)
	}
}

// startMicrosoftEmulator runs Microsoft's Service Bus emulator with deploy/emulator-config.json
// (the session-enabled queue "orders") and SQL Server on a network of their own, the way
// testcontainers-go's Azure Service Bus module does, and returns its connection string.
func startMicrosoftEmulator(ctx context.Context, t *testing.T) string {
	t.Helper()
	nw, err := network.New(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nw.Remove(context.Background()) })

	sql, err := testcontainers.Run(ctx, cmp.Or(os.Getenv("SEQBUS_TEST_MSSQL_IMAGE"), msSQLImage),
		testcontainers.WithEnv(map[string]string{"ACCEPT_EULA": "Y", "MSSQL_SA_PASSWORD": msSQLPassword}),
		network.WithNetwork([]string{"mssql"}, nw),
		testcontainers.WithWaitStrategy(wait.ForLog("SQL Server is now ready for client connections").WithStartupTimeout(3*time.Minute)),
	)
	testcontainers.CleanupContainer(t, sql)
	require.NoError(t, err, "start SQL Server for Microsoft's emulator")

	sb, err := testcontainers.Run(ctx, cmp.Or(os.Getenv("SEQBUS_TEST_MS_EMULATOR_IMAGE"), msEmulatorImage),
		testcontainers.WithEnv(map[string]string{
			"ACCEPT_EULA": "Y", "SQL_SERVER": "mssql", "MSSQL_SA_PASSWORD": msSQLPassword, "SQL_WAIT_INTERVAL": "0",
		}),
		testcontainers.WithFiles(testcontainers.ContainerFile{
			HostFilePath: filepath.Join(repoRoot, "deploy", "emulator-config.json"), ContainerFilePath: msEmulatorConfig, FileMode: 0o644,
		}),
		network.WithNetwork([]string{"servicebus"}, nw),
		testcontainers.WithExposedPorts("5672/tcp", "5300/tcp"),
		testcontainers.WithWaitStrategy(wait.ForAll(
			wait.ForListeningPort("5672/tcp"),
			wait.ForHTTP("/health").WithPort("5300/tcp"),
		).WithDeadline(3*time.Minute)),
	)
	testcontainers.CleanupContainer(t, sb)
	require.NoError(t, err, "start Microsoft's Service Bus emulator")
	hostPort, err := sb.PortEndpoint(ctx, "5672/tcp", "")
	require.NoError(t, err)
	return fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true", hostPort)
}

// TestWorkerOnMicrosoftEmulator runs the worker (in-process, Service Bus session state) against
// Microsoft's Service Bus emulator in Docker: shuffled sessions with duplicate copies are handled
// once each, in order. Without a Docker engine it skips and says so.
func TestWorkerOnMicrosoftEmulator(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the Docker test in -short mode")
	}
	requireDocker(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	conn := startMicrosoftEmulator(ctx, t)

	const sessions, messages = 4, 20
	plan := demo.Plan(sessions, messages, 2, 1)
	client, err := azservicebus.NewClientFromConnectionString(conn, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close(context.Background()) })
	sender, err := client.NewSender("orders", nil)
	require.NoError(t, err)
	for _, p := range plan {
		sid, mid := p.SessionID, p.SessionID+"/"+strconv.FormatInt(p.Sequence, 10)
		require.NoError(t, sender.SendMessage(ctx, &azservicebus.Message{
			SessionID: &sid, MessageID: &mid, Body: []byte("x"),
			ApplicationProperties: map[string]any{"Sequence": p.Sequence, "IsLast": p.Last},
		}, nil))
	}

	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = demo.SessionID(i)
	}
	cfg := worker.DefaultConfig()
	checker := demo.NewReplayChecker(ids, messages, cfg.EngineConfig().ReplayWindow())
	cfg.ConnectionString, cfg.Entity, cfg.Handler, cfg.HTTPAddr = conn, sbadapter.Entity{Queue: "orders"}, checker, worker.HTTPOff
	cfg.SessionIdleTimeout, cfg.MaxConcurrentSessions = 2*time.Second, 4
	w, err := worker.New(cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer stopCancel()
		require.NoError(t, w.Stop(stopCtx))
	})
	select {
	case <-checker.Done():
	case <-ctx.Done():
		t.Fatalf("not every session was handled on Microsoft's emulator: %v", checker.Incomplete())
	}
	require.Empty(t, checker.Violations())
	require.EqualValues(t, sessions*messages, checker.Handled()-checker.Redelivered())
}

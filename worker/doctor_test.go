package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/emulator"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/emulator/emulatortest"
	"github.com/seqbus/seqbus/internal/pgtest"
	"github.com/seqbus/seqbus/migrations"
	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/worker"
)

// doctorEmulator starts an emulator with the session queue "orders", a queue without sessions
// "plain", a topic with a session subscription, and the partitioned session queue "partitioned"
// (created with the admin client: partitioning is a property of the management API).
func doctorEmulator(t *testing.T) *emulatortest.Server {
	t.Helper()
	srv := emulatortest.Start(t, &emulatortest.Options{
		Queues: map[string]broker.EntityProperties{
			queue:     {RequiresSession: true, LockDuration: 10 * time.Second},
			"plain":   {},
			"fragile": {RequiresSession: true, MaxDeliveryCount: 2},
		},
		Topics: map[string]emulatortest.Topic{"events": {Subscriptions: map[string]emulatortest.Subscription{
			"billing": {Properties: broker.EntityProperties{RequiresSession: true}},
		}}},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	yes := true
	_, err := srv.NewAdminClient(t).CreateQueue(ctx, "partitioned", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
		RequiresSession: &yes, EnablePartitioning: &yes,
	}})
	require.NoError(t, err)
	return srv
}

// doctorConfig is the worker's configuration for entity, without a handler (the doctor needs
// none).
func doctorConfig(srv *emulatortest.Server, entity sbadapter.Entity) worker.Config {
	cfg := worker.DefaultConfig()
	cfg.ConnectionString = srv.ConnectionString()
	cfg.Entity = entity
	cfg.HTTPAddr = worker.HTTPOff
	return cfg
}

// line returns the report's line of check, failing t when there is none.
func line(t *testing.T, rep worker.DoctorReport, check string) worker.DoctorCheck {
	t.Helper()
	for _, c := range rep.Checks {
		if c.Check == check {
			return c
		}
	}
	t.Fatalf("no line %q in the report:\n%s", check, table(t, rep))
	return worker.DoctorCheck{}
}

func table(t *testing.T, rep worker.DoctorReport) string {
	t.Helper()
	var b strings.Builder
	require.NoError(t, rep.WriteTable(&b))
	return b.String()
}

var roundTripSteps = []string{
	"round trip: send", "round trip: accept a session", "round trip: receive", "round trip: defer",
	"round trip: receive deferred", "round trip: complete", "round trip: dead-letter",
	"round trip: set and get session state", "round trip: renew the lock",
}

func TestDoctor(t *testing.T) {
	t.Parallel()
	srv := doctorEmulator(t)
	wrongKey := strings.Replace(srv.ConnectionString(), emulator.DefaultKey, "bm90IHRoZSBrZXk=", 1)
	require.NotEqual(t, srv.ConnectionString(), wrongKey)

	tests := []struct {
		name      string
		entity    sbadapter.Entity
		configure func(cfg *worker.Config)
		failed    bool
		// noRoundTrip: the report has no round trip steps.
		noRoundTrip bool
		want        map[string]worker.DoctorResult // check → result
		contains    map[string]string              // check → text in its detail or action
	}{
		{name: "clean session queue", entity: sbadapter.Entity{Queue: queue},
			want: map[string]worker.DoctorResult{
				"connection and credentials": worker.DoctorPass, "right Listen": worker.DoctorPass, "right Send": worker.DoctorPass,
				"right Manage": worker.DoctorPass, "entity exists": worker.DoctorPass, "entity requires sessions": worker.DoctorPass,
				"entity lock duration": worker.DoctorPass, "entity max delivery count": worker.DoctorPass, "entity partitioning": worker.DoctorPass,
				"state store": worker.DoctorPass, "round trip: scratch queue": worker.DoctorPass, "round trip: delete the scratch queue": worker.DoctorPass,
			},
			contains: map[string]string{"entity lock duration": "10s", "round trip: scratch queue": "partitioned: false"},
		},
		{name: "session subscription", entity: sbadapter.Entity{Topic: "events", Subscription: "billing"},
			want: map[string]worker.DoctorResult{"entity exists": worker.DoctorPass, "round trip: scratch queue": worker.DoctorPass},
		},
		{name: "partitioned with defer", entity: sbadapter.Entity{Queue: "partitioned"}, failed: true,
			want:     map[string]worker.DoctorResult{"entity partitioning": worker.DoctorFail},
			contains: map[string]string{"entity partitioning": "SEQBUS_EARLY_MESSAGES", "round trip: scratch queue": "partitioned: true"},
		},
		{name: "partitioned with the override", entity: sbadapter.Entity{Queue: "partitioned"}, failed: true,
			configure: func(cfg *worker.Config) { cfg.DeferOnPartitioned = true },
			// The emulator refuses the SDK's receive of a deferred session message on a partitioned
			// entity, as the service does; the steps that do not need it still run.
			want: map[string]worker.DoctorResult{
				"entity partitioning": worker.DoctorWarn, "round trip: defer": worker.DoctorPass,
				"round trip: receive deferred": worker.DoctorFail, "round trip: complete": worker.DoctorSkip,
				"round trip: dead-letter": worker.DoctorPass, "round trip: set and get session state": worker.DoctorPass,
				"round trip: renew the lock": worker.DoctorPass, "state store": worker.DoctorPass,
				"round trip: delete the scratch queue": worker.DoctorPass,
			},
			contains: map[string]string{"round trip: scratch queue": "partitioned: true", "round trip: receive deferred": "partitioned"},
		},
		{name: "missing entity", entity: sbadapter.Entity{Queue: "nowhere"}, failed: true,
			want:     map[string]worker.DoctorResult{"entity exists": worker.DoctorFail, "round trip": worker.DoctorSkip},
			contains: map[string]string{"entity exists": "SEQBUS_QUEUE"},
		},
		{name: "wrong key", entity: sbadapter.Entity{Queue: queue}, failed: true,
			configure: func(cfg *worker.Config) { cfg.ConnectionString = wrongKey },
			want:      map[string]worker.DoctorResult{"connection and credentials": worker.DoctorFail},
			contains:  map[string]string{"connection and credentials": "SEQBUS_CONNECTION_STRING"},
		},
		{name: "unordered on an entity without sessions", entity: sbadapter.Entity{Queue: "plain"},
			configure: func(cfg *worker.Config) { cfg.Ordering = worker.OrderingNone },
			want: map[string]worker.DoctorResult{
				"right Listen": worker.DoctorPass, "entity requires sessions": worker.DoctorPass,
				"state store": worker.DoctorSkip, "round trip": worker.DoctorSkip,
			},
			noRoundTrip: true,
		},
		{name: "unordered on a session entity", entity: sbadapter.Entity{Queue: queue}, failed: true,
			configure: func(cfg *worker.Config) { cfg.Ordering = worker.OrderingNone },
			want:      map[string]worker.DoctorResult{"entity requires sessions": worker.DoctorFail},
		},
		{name: "entity without sessions", entity: sbadapter.Entity{Queue: "plain"}, failed: true,
			want: map[string]worker.DoctorResult{"entity requires sessions": worker.DoctorFail},
		},
		{name: "lock renewed after it expires", entity: sbadapter.Entity{Queue: queue}, failed: true,
			configure: func(cfg *worker.Config) { cfg.LockRenewInterval = 15 * time.Second },
			want:      map[string]worker.DoctorResult{"entity lock duration": worker.DoctorFail},
			contains:  map[string]string{"entity lock duration": "SEQBUS_LOCK_RENEW_INTERVAL"},
		},
		{name: "lock renewed late", entity: sbadapter.Entity{Queue: queue},
			configure: func(cfg *worker.Config) { cfg.LockRenewInterval = 8 * time.Second },
			want:      map[string]worker.DoctorResult{"entity lock duration": worker.DoctorWarn},
		},
		{name: "low max delivery count with defer", entity: sbadapter.Entity{Queue: "fragile"},
			want:     map[string]worker.DoctorResult{"entity max delivery count": worker.DoctorWarn},
			contains: map[string]string{"entity max delivery count": "at least 4"},
		},
		{name: "released retries need more deliveries", entity: sbadapter.Entity{Queue: queue},
			configure: func(cfg *worker.Config) { cfg.MaxHandlerAttempts, cfg.RetryReleaseAfter = 12, 2 },
			want:      map[string]worker.DoctorResult{"entity max delivery count": worker.DoctorWarn},
			contains:  map[string]string{"entity max delivery count": "at least 14"},
		},
		{name: "early messages in the store", entity: sbadapter.Entity{Queue: queue}, failed: true,
			configure: func(cfg *worker.Config) { cfg.EarlyMessages = worker.EarlyMessagesStore },
			want:      map[string]worker.DoctorResult{"settings": worker.DoctorFail},
			contains:  map[string]string{"settings": "SEQBUS_EARLY_MESSAGES"},
		},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				cfg := doctorConfig(srv, tt.entity)
				if tt.configure != nil {
					tt.configure(&cfg)
				}
				rep := worker.RunDoctor(ctx, worker.DoctorParams{Config: cfg, StepTimeout: 10 * time.Second})
				out := table(t, rep)
				require.Equal(t, tt.failed, rep.Failed(), out)
				for check, result := range tt.want {
					require.Equal(t, result, line(t, rep, check).Result, "%s\n%s", check, out)
				}
				for check, text := range tt.contains {
					l := line(t, rep, check)
					require.Contains(t, l.Detail+" "+l.Action, text, out)
				}
				if !tt.failed && !tt.noRoundTrip {
					for _, step := range roundTripSteps {
						require.Equal(t, worker.DoctorPass, line(t, rep, step).Result, "%s\n%s", step, out)
					}
				}
			})
		}
	})

	// Every scratch queue was deleted.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	pager := srv.NewAdminClient(t).NewListQueuesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		require.NoError(t, err)
		for _, q := range page.Queues {
			require.False(t, strings.HasPrefix(q.QueueName, worker.DoctorScratchPrefix), "scratch queue %s left behind", q.QueueName)
		}
	}
}

// A worker that defers early messages refuses to start on a partitioned entity whose properties
// it can read, naming the setting and the doctor; the override lets it start.
func TestStartRefusesDeferralOnPartitionedEntity(t *testing.T) {
	t.Parallel()
	srv := doctorEmulator(t)
	tests := []struct {
		name      string
		entity    string
		configure func(cfg *worker.Config)
		wantErr   []string
	}{
		{name: "partitioned with defer", entity: "partitioned", wantErr: []string{"SEQBUS_EARLY_MESSAGES", "partitioned", "`worker doctor`", "SEQBUS_DEFER_ON_PARTITIONED=true"}},
		{name: "partitioned with the override", entity: "partitioned", configure: func(cfg *worker.Config) { cfg.DeferOnPartitioned = true }},
		{name: "not partitioned", entity: queue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := doctorConfig(srv, sbadapter.Entity{Queue: tt.entity})
			cfg.Handler = sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil })
			if tt.configure != nil {
				tt.configure(&cfg)
			}
			w, err := worker.New(cfg)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			err = w.Start(ctx)
			if tt.wantErr == nil {
				require.NoError(t, err)
				require.NoError(t, w.Stop(ctx))
				return
			}
			require.Error(t, err)
			var ce *worker.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, "EarlyMessages", ce.Field)
			for _, s := range tt.wantErr {
				require.Contains(t, err.Error(), s)
			}
			<-w.Stopped()
		})
	}
}

// With Postgres the doctor checks that the database answers and that every migration the binary
// knows is applied.
func TestDoctorPostgresStore(t *testing.T) {
	t.Parallel()
	srv := doctorEmulator(t)
	pool, schema := pgtest.NewPoolWithSchema(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	run := func(configure func(cfg *worker.Config)) worker.DoctorReport {
		cfg := doctorConfig(srv, sbadapter.Entity{Queue: queue})
		cfg.StateStore, cfg.DatabaseURL = worker.StateStorePostgres, pgtest.SchemaDSN(schema)
		if configure != nil {
			configure(&cfg)
		}
		return worker.RunDoctor(ctx, worker.DoctorParams{Config: cfg, StepTimeout: 10 * time.Second})
	}

	rep := run(nil)
	require.True(t, rep.Failed(), table(t, rep))
	require.Equal(t, worker.DoctorPass, line(t, rep, "state store: database reachable").Result)
	m := line(t, rep, "state store: migrations applied")
	require.Equal(t, worker.DoctorFail, m.Result, table(t, rep))
	require.Contains(t, m.Detail, "001_")
	require.Contains(t, m.Action, "worker migrate up")

	rep = run(func(cfg *worker.Config) { cfg.MigrateOnStart = true })
	require.False(t, rep.Failed(), table(t, rep))
	require.Equal(t, worker.DoctorWarn, line(t, rep, "state store: migrations applied").Result)

	_, err := migrations.New(pool, nil).Up(ctx, migrations.UpOptions{})
	require.NoError(t, err)
	rep = run(nil)
	require.False(t, rep.Failed(), table(t, rep))
	require.Equal(t, worker.DoctorPass, line(t, rep, "state store: migrations applied").Result, table(t, rep))
	for _, step := range roundTripSteps {
		want := worker.DoctorPass
		if step == "round trip: set and get session state" {
			want = worker.DoctorSkip // the states are in Postgres
		}
		require.Equal(t, want, line(t, rep, step).Result, step)
	}

	// Early messages held in the store on a partitioned queue: nothing to refuse, and the round
	// trip makes no defer (the worker makes none).
	rep = run(func(cfg *worker.Config) {
		cfg.Entity, cfg.EarlyMessages = sbadapter.Entity{Queue: "partitioned"}, worker.EarlyMessagesStore
	})
	require.False(t, rep.Failed(), table(t, rep))
	require.Equal(t, worker.DoctorPass, line(t, rep, "entity partitioning").Result, table(t, rep))
	require.Contains(t, line(t, rep, "round trip: scratch queue").Detail, "partitioned: true")
	for _, step := range roundTripSteps {
		want := worker.DoctorPass
		switch step {
		case "round trip: set and get session state", "round trip: defer", "round trip: receive deferred":
			want = worker.DoctorSkip
		}
		require.Equal(t, want, line(t, rep, step).Result, step)
	}
	require.Contains(t, line(t, rep, "round trip: defer").Detail, "SEQBUS_EARLY_MESSAGES=store")

	rep = run(func(cfg *worker.Config) { cfg.DatabaseURL = "postgres://seqbus@127.0.0.1:1/nowhere" })
	require.True(t, rep.Failed(), table(t, rep))
	r := line(t, rep, "state store: database reachable")
	require.Equal(t, worker.DoctorFail, r.Result)
	require.Contains(t, r.Detail, "SEQBUS_DATABASE_URL")
	require.Equal(t, worker.DoctorSkip, line(t, rep, "state store: migrations applied").Result)
}

// tokenRefused is an Entra ID credential that gets no token.
type tokenRefused struct{}

func (tokenRefused) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{}, &azidentity.AuthenticationFailedError{}
}

// With Entra ID, a credential that gets no token fails the connection line, saying so.
func TestDoctorEntraIDWithoutToken(t *testing.T) {
	t.Parallel()
	cfg := worker.DefaultConfig()
	cfg.Namespace, cfg.Credential = "seqbus-doctor-test.invalid", tokenRefused{}
	cfg.Entity, cfg.HTTPAddr = sbadapter.Entity{Queue: queue}, worker.HTTPOff
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rep := worker.RunDoctor(ctx, worker.DoctorParams{Config: cfg, StepTimeout: 10 * time.Second})
	require.True(t, rep.Failed(), table(t, rep))
	c := line(t, rep, "connection and credentials")
	require.Equal(t, worker.DoctorFail, c.Result)
	require.Contains(t, c.Detail, "no Entra ID token")
	require.Contains(t, c.Action, "DefaultAzureCredential")
}

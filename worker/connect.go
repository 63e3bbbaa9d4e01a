package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/sbadapter"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
	"github.com/seqbus/seqbus/sessionstate/postgres"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
	"github.com/seqbus/seqbus/sqsadapter"
	"github.com/seqbus/seqbus/topology/sbadmin"
)

// The knobs of every connection a seqbus process opens: one set, for the worker, the relay and
// the operator commands alike.
var (
	// managementRetries are the SDK retries of the client for what holds no session lock
	// (probes, session listings, the dead-letter queue, sends): a few, so that it reconnects.
	managementRetries = azservicebus.RetryOptions{MaxRetries: 3, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: 2 * time.Second}
)

// scanConcurrency is how many sessions are read at once when listing sessions with their
// Service Bus session state, where reading one is a lock, a read and a release.
const scanConcurrency = 16

// Connections are the clients, the pool and the stores of one entity, built by Connect.
type Connections struct {
	// Sessions locks and runs sessions, with the SDK's retries off (sbadapter, "Lock tenure"),
	// with SessionConnections - 1 further clients of the same kind (accepts).
	Sessions *azservicebus.Client
	// Management serves what holds no session lock, with a few SDK retries.
	Management *azservicebus.Client
	// Source hands out the entity's sessions on Sessions; ManagementSource probes and lists on
	// Management; ScanSource (Service Bus session state only) locks sessions to read their
	// state, and the sweeper's lease, on a client of its own.
	Source, ManagementSource, ScanSource *sbadapter.Source
	// SQS is the client of an SQS worker (ProviderSQS), SQSSource the source of its queue's
	// message groups; the Service Bus fields are nil then.
	SQS       *sqs.Client
	SQSSource *sqsadapter.Source
	// Admin reads the entity's runtime properties (its message counts) over the ATOM
	// management API; it needs Manage rights, which a worker may not have.
	Admin *admin.Client
	// Pool is the database (StateStorePostgres); Postgres its state store.
	Pool     *pgxpool.Pool
	Postgres *postgres.Store
	// Store keeps the session states (nil with OrderingNone): Postgres, or the Service Bus
	// session state.
	Store sequencer.StateStore
	// Lister lists the sessions with stored state: a query with Postgres; with Service Bus a
	// scan that locks each session to read its state on a client of its own (scan), so that its
	// accepts never queue in front of the runner's (the SDK negotiates a claim for every
	// accepted session under one lock per connection).
	Lister sessionstate.Lister

	scan *azservicebus.Client
	// accepts are the further connections Source locks sessions on (SessionConnections).
	accepts []*azservicebus.Client
	ownPool bool
}

// Connect builds the connections of cfg: the Service Bus clients (the SQS client with
// ProviderSQS), the database pool (with StateStorePostgres; cfg.Pool when given) and the state
// store and lister of cfg.Entity. With Service Bus it does not reach the network yet (the first
// call does); with SQS the source reads the queue's attributes (FIFO, its dead-letter queue)
// and receives once sessions are asked for. It checks nothing Validate checks.
// Close closes what it opened.
func Connect(ctx context.Context, cfg Config) (_ *Connections, err error) {
	c := &Connections{}
	defer func() {
		if err != nil {
			c.Close(ctx)
		}
	}()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Provider == ProviderSQS {
		if err := connectSQS(ctx, cfg, c, log); err != nil {
			return nil, err
		}
		return c, nil
	}
	if c.Sessions, err = newServiceBusClient(cfg.ServiceBus, sbadapter.ClientOptions(nil)); err != nil {
		return nil, err
	}
	if c.Management, err = newServiceBusClient(cfg.ServiceBus, &azservicebus.ClientOptions{RetryOptions: managementRetries}); err != nil {
		return nil, err
	}
	for range cfg.SessionConnections - 1 {
		client, err := newServiceBusClient(cfg.ServiceBus, sbadapter.ClientOptions(nil))
		if err != nil {
			return nil, err
		}
		c.accepts = append(c.accepts, client)
	}
	if c.Source, err = sbadapter.NewSource(c.Sessions, sbadapter.Config{Entity: cfg.Entity, AcceptClients: c.accepts, ReceiveWait: cfg.ReceiveWait, Logger: log}); err != nil {
		return nil, configError("Entity", err)
	}
	if c.ManagementSource, err = sbadapter.NewSource(c.Management, sbadapter.Config{Entity: cfg.Entity, Logger: log}); err != nil {
		return nil, configError("Entity", err)
	}
	if c.Admin, err = sbadmin.Connect(sbadmin.Config{ConnectionString: cfg.ConnectionString, Namespace: cfg.Namespace, Credential: cfg.Credential}); err != nil {
		field := "Namespace"
		if cfg.ConnectionString != "" {
			field = "ConnectionString"
		}
		return nil, configError(field, fmt.Errorf("%s", RedactConnectionString(err.Error())))
	}
	switch {
	case cfg.Ordering == OrderingNone:
		// No state.
	case cfg.StateStore == StateStorePostgres:
		if c.Pool, c.ownPool, err = openPool(ctx, cfg.Database); err != nil {
			return nil, err
		}
		if c.Postgres, err = postgres.New(c.Pool, &postgres.Config{Entity: cfg.EntityName()}); err != nil {
			return nil, err
		}
		c.Store, c.Lister = c.Postgres, c.Postgres
	default:
		sb := sbstate.New(&sbstate.Config{MaxStateSize: int(cfg.StateMaxBytes)})
		c.Store = sb
		if c.scan, err = newServiceBusClient(cfg.ServiceBus, sbadapter.ClientOptions(nil)); err != nil {
			return nil, err
		}
		if c.ScanSource, err = sbadapter.NewSource(c.scan, sbadapter.Config{Entity: cfg.Entity, Logger: log}); err != nil {
			return nil, configError("Entity", err)
		}
		c.Lister = sessionstate.NewScanLister(sessionstate.ScanConfig{
			IDs: c.ManagementSource.ListSessionsWithState, Source: c.ScanSource, Store: sb,
			Concurrency: scanConcurrency, // reading a session's state is a few round trips: overlap them
		})
	}
	return c, nil
}

// SessionSource is the source the runner accepts sessions from: the SQS queue's message
// groups, or the Service Bus entity's sessions.
func (c *Connections) SessionSource() sequencer.SessionSource {
	if c.SQSSource != nil {
		return c.SQSSource
	}
	return c.Source
}

// Ping checks that the database answers (within 30s), when there is one.
func (c *Connections) Ping(ctx context.Context) error {
	if c.Pool == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.Pool.Ping(pctx); err != nil {
		return configError("DatabaseURL", fmt.Errorf("%s: cannot reach the database: %w", RedactDatabaseURL(c.Pool.Config().ConnString()), err))
	}
	return nil
}

// Close closes the Service Bus clients (the SQS source), and a pool Connect opened itself,
// within 10s.
func (c *Connections) Close(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if c.SQSSource != nil {
		_ = c.SQSSource.Close(cctx) // releases the messages it holds back to the queue
	}
	for _, sb := range append([]*azservicebus.Client{c.Sessions, c.Management, c.scan}, c.accepts...) {
		if sb != nil {
			_ = sb.Close(cctx)
		}
	}
	if c.ownPool && c.Pool != nil {
		c.Pool.Close()
	}
}

// openPool returns db.Pool, or a pool on db.DatabaseURL that the caller owns (own).
func openPool(ctx context.Context, db Database) (pool *pgxpool.Pool, own bool, err error) {
	if db.Pool != nil {
		return db.Pool, false, nil
	}
	pool, err = pgxpool.New(context.WithoutCancel(ctx), db.DatabaseURL)
	if err != nil {
		return nil, false, configError("DatabaseURL", fmt.Errorf("%s: %w", RedactDatabaseURL(db.DatabaseURL), err))
	}
	return pool, true, nil
}

// newServiceBusClient connects with the connection string or with Entra ID on the namespace.
func newServiceBusClient(sb ServiceBus, opts *azservicebus.ClientOptions) (*azservicebus.Client, error) {
	if sb.ConnectionString != "" {
		c, err := azservicebus.NewClientFromConnectionString(sb.ConnectionString, opts)
		if err != nil {
			return nil, configError("ConnectionString", fmt.Errorf("%s", RedactConnectionString(err.Error())))
		}
		return c, nil
	}
	cred := sb.Credential
	if cred == nil {
		var err error
		if cred, err = azidentity.NewDefaultAzureCredential(nil); err != nil {
			return nil, configError("Namespace", fmt.Errorf("Entra ID credential: %w", err))
		}
	}
	c, err := azservicebus.NewClient(sb.Namespace, cred, opts)
	if err != nil {
		return nil, configError("Namespace", err)
	}
	return c, nil
}

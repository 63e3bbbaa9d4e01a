package soak

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/clock"
	"github.com/seqbus/seqbus/emulator/broker"
	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sequencer/sequencertest"
	"github.com/seqbus/seqbus/sessionstate"
	"github.com/seqbus/seqbus/sessionstate/postgres"
	sbstate "github.com/seqbus/seqbus/sessionstate/servicebus"
	"github.com/seqbus/seqbus/worker"
)

// Seeding ended sessions: the idle measurement starts from n sessions that ran to their end, as
// a soak leaves them, without the hour the broker round trips of n real runs would take. Each
// session's messages run through the worker's own engine (worker.DefaultConfig's policy) with
// the worker's own state store, in this process: the messages come from sequencertest's fake
// broker, the state goes where the worker keeps it (the emulator's session state, or the
// Postgres table). So each session's state is the tombstone the worker writes when a session
// ends, written by the same code.

// seedConcurrency is how many sessions are seeded at once.
const seedConcurrency = 8

// stateTarget gives a fake-broker session the state of the seeded session: the emulator's
// session state (Service Bus store), or nothing (Postgres: the store keys the state by id).
type stateTarget func(sess sequencer.Session) (sequencer.Session, func(), error)

// seedEnded runs n sessions of messages in-order messages each through the worker's engine with
// store, each session's state kept through target.
func seedEnded(ctx context.Context, n, messages int, store sequencer.StateStore, target stateTarget) error {
	engine, err := sequencer.NewEngine(worker.DefaultConfig().EngineConfig(), sequencer.EngineDeps{
		Store:   store,
		Handler: sequencer.HandlerFunc(func(context.Context, *sequencer.Message) error { return nil }),
	})
	if err != nil {
		return fmt.Errorf("soak: seed: %w", err)
	}
	// Blocking off: an empty receive ends the session's run at once (as an idle timeout would).
	fake := sequencertest.NewBroker(&sequencertest.BrokerOptions{Clock: clock.Real(), LockDuration: time.Hour})
	client := fake.NewClient(nil)
	ids := make(chan string)
	errs := make(chan error, seedConcurrency)
	var wg sync.WaitGroup
	for range seedConcurrency {
		wg.Go(func() {
			for id := range ids {
				if err := seedOne(ctx, engine, client, target, id); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var sendErr error
	for i := range n {
		id := SessionID(i)
		for seq := 1; seq <= messages; seq++ {
			fake.PublishSeq(id, int64(seq), seq == messages)
		}
		select {
		case ids <- id:
		case err := <-errs:
			sendErr = err
		case <-ctx.Done():
			sendErr = ctx.Err()
		}
		if sendErr != nil {
			break
		}
	}
	close(ids)
	wg.Wait()
	close(errs)
	if sendErr != nil {
		return fmt.Errorf("soak: seed: %w", sendErr)
	}
	if err := <-errs; err != nil {
		return fmt.Errorf("soak: seed: %w", err)
	}
	return nil
}

func seedOne(ctx context.Context, engine *sequencer.Engine, client *sequencertest.Client, target stateTarget, id string) error {
	sess, err := client.Accept(ctx, id)
	if err != nil {
		return err
	}
	s, release, err := target(sess)
	if err != nil {
		_ = sess.Close(ctx)
		return err
	}
	defer release()
	out, err := engine.RunSession(ctx, s, nil)
	if err != nil {
		return fmt.Errorf("session %s: %w", id, err)
	}
	if out != sequencer.OutcomeEnded {
		return fmt.Errorf("session %s: the engine left it %s, not ended", id, out)
	}
	return nil
}

// emulatorState is a fake-broker session whose state is the emulator's session of the same id:
// the store reads and writes it there.
type emulatorState struct {
	sequencer.Session
	lock *broker.SessionLock
}

func (s emulatorState) GetState(context.Context) ([]byte, error)   { return s.lock.State() }
func (s emulatorState) SetState(_ context.Context, b []byte) error { return s.lock.SetState(b) }

var _ sbstate.StateAccessor = emulatorState{}

// emulatorTarget locks each seeded session in the emulator's entity for the time of its run.
func emulatorTarget(e *broker.Entity) stateTarget {
	return func(sess sequencer.Session) (sequencer.Session, func(), error) {
		lock, err := e.AcceptNamedSession(sess.ID(), "soak-seed")
		if err != nil {
			return nil, nil, fmt.Errorf("lock session %s in the emulator: %w", sess.ID(), err)
		}
		return emulatorState{Session: sess, lock: lock}, lock.Release, nil
	}
}

// seedServiceBus seeds n ended sessions in the emulator's entity e, in the Service Bus session
// state, and, when snapshot and n > 0, leaves in the sweeper lease session the snapshot a
// sweeper leaves once it has read every session's last change (see caughtUpSnapshot). With no
// session ever handled there is no snapshot either.
func seedServiceBus(ctx context.Context, e *broker.Entity, n, messages int, snapshot bool) error {
	store := sbstate.New(nil)
	if err := seedEnded(ctx, n, messages, store, emulatorTarget(e)); err != nil {
		return err
	}
	if !snapshot || n == 0 {
		return nil
	}
	// The sessions changed until now: a sweeper lists back a margin before its cursor (5s), and
	// one that is caught up has its cursor past that.
	if err := sleep(ctx, 6*time.Second); err != nil {
		return err
	}
	b, err := caughtUpSnapshot(ctx, time.Now(), store)
	if err != nil {
		return err
	}
	lock, err := e.AcceptNamedSession(sessionstate.LeaseSessionID, "soak-seed")
	if err != nil {
		return fmt.Errorf("soak: seed: lock the lease session: %w", err)
	}
	defer lock.Release()
	if err := lock.SetState(b); err != nil {
		return fmt.Errorf("soak: seed: write the lease snapshot: %w", err)
	}
	return nil
}

// caughtUpSnapshot is the snapshot a worker's sweeper keeps in the lease session once it has
// read every session's last change, before now, and found none it must keep (every session
// ended): a Watch with the worker's tombstone TTL that swept at now with nothing changed since.
// The worker taking the lease goes on from it (sweep_servicebus.go) instead of rescanning.
func caughtUpSnapshot(ctx context.Context, now time.Time, store sequencer.StateStore) ([]byte, error) {
	w := sessionstate.NewWatch(sessionstate.WatchConfig{
		ChangedIDs: func(context.Context, time.Time) ([]string, error) { return nil, nil },
		// Never used: nothing is listed, so nothing is read.
		Source:       sequencertest.NewBroker(nil).NewClient(nil),
		Store:        store,
		TombstoneTTL: worker.DefaultConfig().TombstoneTTL,
	})
	if _, _, err := w.Sweep(ctx, now); err != nil {
		return nil, fmt.Errorf("soak: seed: the lease snapshot: %w", err)
	}
	b := w.Snapshot(0)
	if b == nil {
		return nil, fmt.Errorf("soak: seed: the lease snapshot is empty")
	}
	return b, nil
}

// seedPostgres seeds n ended sessions in the Postgres store of entity queue in the database
// url (the schema the worker is given).
func seedPostgres(ctx context.Context, url string, n, messages int) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("soak: seed: connect to postgres: %w", err)
	}
	defer pool.Close()
	store, err := postgres.New(pool, &postgres.Config{Entity: queue})
	if err != nil {
		return fmt.Errorf("soak: seed: %w", err)
	}
	return seedEnded(ctx, n, messages, store, func(sess sequencer.Session) (sequencer.Session, func(), error) {
		return sess, func() {}, nil
	})
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
)

// A lease makes one replica per entity the sweeper: every replica tries to take it each sweep
// interval, the one that holds it sweeps, and when its holder dies (its connection closes, so the
// broker or the database lets go at once) or loses it, another takes it at its next try. Only the
// holder's session gauges are set; the others report 0, so that a sum or a max across replicas
// reads the entity's value.
type lease interface {
	// Hold takes the lease if it is free and keeps it if held (renewing it), and reports whether
	// this replica holds it now. An error means it does not.
	Hold(ctx context.Context) (bool, error)
	// Release lets go of the lease if held.
	Release(ctx context.Context)
}

// sessionLease is a lease on the lock of sessionstate.LeaseSessionID, whose session state keeps
// the Watch snapshot for the next holder.
type sessionLease struct {
	source sequencer.SessionSource
	// maxState bounds the snapshot kept in the lease session's state.
	maxState int

	mu   sync.Mutex
	sess sequencer.Session
}

func (l *sessionLease) Hold(ctx context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sess != nil {
		if _, err := l.sess.RenewLock(ctx); err == nil {
			return true, nil
		}
		// Lost (an interval longer than the entity's lock duration, a cut connection): try to
		// take it again at once; another replica may have it by now.
		l.closeLocked(ctx)
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sess, err := l.source.Accept(actx, sessionstate.LeaseSessionID)
	switch {
	case errors.Is(err, sequencer.ErrSessionLocked):
		return false, nil // another replica holds it
	case err != nil:
		return false, fmt.Errorf("take the sweeper lease (session %q): %w", sessionstate.LeaseSessionID, err)
	}
	l.sess = sess
	return true, nil
}

func (l *sessionLease) Release(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closeLocked(ctx)
}

func (l *sessionLease) closeLocked(ctx context.Context) {
	if l.sess == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = l.sess.Close(cctx)
	l.sess = nil
}

// advisoryLease is a lease on a Postgres session-level advisory lock, keyed by the entity and
// the schema (the database's locks span its schemas), held on one connection of the pool: the
// database frees it when that connection ends.
type advisoryLease struct {
	pool   *pgxpool.Pool
	entity string

	mu   sync.Mutex
	conn *pgxpool.Conn
}

// advisoryKey is the SQL of the lease's advisory lock key, from the entity ($1) and the schema.
const advisoryKey = `hashtextextended('seqbus sweeper lease:' || current_schema() || ':' || $1, 0)`

func (l *advisoryLease) Hold(ctx context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		// The lock lives as long as its connection: a connection that still answers still holds it.
		if err := l.conn.Ping(ctx); err == nil {
			return true, nil
		}
		// Its connection is gone, and the lock with it: try to take it again at once.
		l.dropLocked()
	}
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("take the sweeper lease: acquire a connection: %w", err)
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+advisoryKey+`)`, l.entity).Scan(&got); err != nil {
		conn.Release()
		return false, fmt.Errorf("take the sweeper lease (advisory lock): %w", err)
	}
	if !got {
		conn.Release()
		return false, nil
	}
	l.conn = conn
	return true, nil
}

func (l *advisoryLease) Release(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := l.conn.Exec(cctx, `SELECT pg_advisory_unlock(`+advisoryKey+`)`, l.entity); err != nil {
		l.dropLocked() // the lock goes with the connection
		return
	}
	l.conn.Release()
	l.conn = nil
}

// dropLocked closes the lease's connection instead of returning it to the pool, so that a lock
// it may still hold goes with it.
func (l *advisoryLease) dropLocked() {
	_ = l.conn.Hijack().Close(context.Background())
	l.conn = nil
}

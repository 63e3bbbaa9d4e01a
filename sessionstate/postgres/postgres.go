package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate"
)

// Config configures a Store.
type Config struct {
	// Entity names the queue or subscription whose sessions the store keeps, such as
	// "orders" or "topic/subscriptions/sub" (required).
	Entity string
}

// Store is a sequencer.StateStore in Postgres. Safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	entity string
}

var (
	_ sequencer.StateStore = (*Store)(nil)
	_ sessionstate.Lister  = (*Store)(nil)
)

// New returns a Store on pool for cfg.Entity.
func New(pool *pgxpool.Pool, cfg *Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres state store: pool is nil")
	}
	if cfg == nil || cfg.Entity == "" {
		return nil, errors.New("postgres state store: Config.Entity is required")
	}
	return &Store{pool: pool, entity: cfg.Entity}, nil
}

// Entity returns the entity the store keeps sessions of.
func (s *Store) Entity() string { return s.entity }

// dbtx is what the store runs queries on: the pool or a transaction.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Load implements sequencer.StateStore.
func (s *Store) Load(ctx context.Context, p sequencer.LoadParams) (*sequencer.State, int64, error) {
	id := p.Session.ID()
	var (
		version int64
		blob    []byte
	)
	err := s.pool.QueryRow(ctx, sqlLoad, s.entity, id).Scan(&version, &blob)
	if errors.Is(err, pgx.ErrNoRows) {
		return sequencer.NewState(), 0, nil
	}
	if err != nil {
		return nil, 0, interpretError(fmt.Sprintf("load session %q", id), err)
	}
	st := &sequencer.State{}
	if err := st.UnmarshalBinary(blob); err != nil {
		return nil, 0, fmt.Errorf("postgres state store: load session %q: %w", id, err)
	}
	return st, version, nil
}

// Save implements sequencer.StateStore.
func (s *Store) Save(ctx context.Context, p sequencer.SaveParams) (int64, error) {
	return s.save(ctx, s.pool, p)
}

func (s *Store) save(ctx context.Context, db dbtx, p sequencer.SaveParams) (int64, error) {
	op := fmt.Sprintf("save session %q", p.Session.ID())
	args, err := s.stateArgs(p)
	if err != nil {
		return 0, fmt.Errorf("postgres state store: %s: %w", op, err)
	}
	stmt := sqlUpdate
	if p.ExpectedVersion == 0 {
		stmt = sqlInsert
	}
	var version, next int64 // both statements return the saved next_seq too
	err = db.QueryRow(ctx, stmt, args...).Scan(&version, &next)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, conflict(op, p.ExpectedVersion)
	}
	if err != nil {
		return 0, interpretError(op, err)
	}
	return version, nil
}

// stateArgs returns the arguments of the statement that saves p: sqlInsertState's for a first
// save (expected version 0), sqlUpdateState's otherwise.
func (s *Store) stateArgs(p sequencer.SaveParams) ([]any, error) {
	if p.State == nil {
		return nil, errors.New("no state given")
	}
	blob, err := p.State.MarshalBinary()
	if err != nil {
		return nil, err
	}
	st := p.State
	endedAt, gapSince := nullTime(st.EndedAt), nullTime(st.GapSince)
	var retryAt *time.Time
	if st.Retrying != nil {
		retryAt = nullTime(st.Retrying.At)
	}
	id := p.Session.ID()
	if p.ExpectedVersion == 0 {
		return []any{s.entity, id, blob, st.Next, st.Last, st.Parked != nil,
			st.NeedsWake(), endedAt, gapSince, st.Blocked != nil, retryAt}, nil
	}
	return []any{s.entity, id, p.ExpectedVersion, blob, st.Next, st.Last,
		st.Parked != nil, st.NeedsWake(), endedAt, gapSince, st.Blocked != nil, retryAt}, nil
}

// conflict is the error of a save whose expected version is not stored.
func conflict(op string, expected int64) error {
	return fmt.Errorf("postgres state store: %s: expected version %d is not stored: %w",
		op, expected, sequencer.ErrVersionConflict)
}

// nullTime is t, or NULL when t is zero.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Delete implements sequencer.StateStore.
func (s *Store) Delete(ctx context.Context, p sequencer.DeleteParams) error {
	id := p.Session.ID()
	var (
		deleted bool
		stored  *int64
	)
	if err := s.pool.QueryRow(ctx, sqlDelete, s.entity, id, p.ExpectedVersion).Scan(&deleted, &stored); err != nil {
		return interpretError(fmt.Sprintf("delete session %q", id), err)
	}
	if deleted || stored == nil {
		return nil
	}
	return fmt.Errorf("postgres state store: delete session %q: expected version %d, stored %d: %w",
		id, p.ExpectedVersion, *stored, sequencer.ErrVersionConflict)
}

// List implements sessionstate.Lister with one query on the mirrored columns.
func (s *Store) List(ctx context.Context, p sessionstate.ListParams) ([]sessionstate.Entry, error) {
	f := p.Filter
	limit := int64(p.Limit)
	if limit <= 0 {
		limit = math.MaxInt64
	}
	rows, err := s.pool.Query(ctx, sqlList, s.entity, p.After, f.Ended, f.Parked || f.Gap || f.Stranded || f.Blocked || f.Retrying,
		f.Parked, f.Gap, f.Stranded, limit, f.Blocked, f.Retrying)
	if err != nil {
		return nil, interpretError("list sessions", err)
	}
	var out []sessionstate.Entry
	for rows.Next() {
		var (
			e    sessionstate.Entry
			blob []byte
		)
		if err := rows.Scan(&e.SessionID, &e.Version, &blob); err != nil {
			rows.Close()
			return nil, interpretError("list sessions", err)
		}
		e.State = &sequencer.State{}
		if err := e.State.UnmarshalBinary(blob); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres state store: list sessions: session %q: %w", e.SessionID, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list sessions", err)
	}
	return out, nil
}

// ListStranded returns up to limit sessions of entity whose state needs a run the broker will
// not start (ended or not): a due deferred message (State.DueDeferred) or a parked
// message still deferred (a crash came between parking and dead-lettering), least recently
// updated first. The broker does not offer a session that holds only deferred messages to
// accept-next, so a sweeper accepts these by id. A parked session is not listed otherwise: it
// waits for an operator, and waking it would only hold a runner slot for an idle timeout.
func (s *Store) ListStranded(ctx context.Context, entity string, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("postgres state store: list stranded: limit must be positive, got %d", limit)
	}
	rows, err := s.pool.Query(ctx, sqlListStranded, entity, limit)
	if err != nil {
		return nil, interpretError("list stranded", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, interpretError("list stranded", err)
	}
	return ids, nil
}

// PurgeTombstones deletes the states of entity's sessions that ended before olderThan (a cutoff on
// the engine clock that wrote State.EndedAt) and returns how many it deleted. A tombstone that
// still indexes a deferred message to settle (due_deferred) is kept. Unlike
// State.TombstoneClearable it does not see a SkippedPoison marker, which no column mirrors.
func (s *Store) PurgeTombstones(ctx context.Context, entity string, olderThan time.Time) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, sqlPurgeTombstones, entity, olderThan).Scan(&n); err != nil {
		return 0, interpretError("purge tombstones", err)
	}
	return n, nil
}

// Transactional returns the store in transactional mode: a sequencer.AtomicStore whose SaveWith
// runs the handler and the state save in one transaction.
func (s *Store) Transactional() *TxStore { return &TxStore{Store: s} }

// TxStore is a Store whose SaveWith commits the handler's writes and the state advance together.
type TxStore struct {
	*Store
}

var _ sequencer.AtomicStore = (*TxStore)(nil)

type txKey struct{}

// TxFromContext returns the transaction SaveWith runs fn in. Handlers write through it to commit
// their effects together with the state.
func TxFromContext(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// rollbackTimeout bounds the rollback after a failure, which runs even when ctx has ended.
const rollbackTimeout = 5 * time.Second

// SaveWith implements sequencer.AtomicStore. fn's error is returned as it is; nothing is committed
// unless fn succeeds, the version check passes and the commit succeeds. A panic in fn rolls the
// transaction back and propagates.
func (s *TxStore) SaveWith(ctx context.Context, p sequencer.SaveParams, fn func(ctx context.Context) error) (version int64, err error) {
	id := p.Session.ID()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, interpretError(fmt.Sprintf("begin transaction for session %q", id), err)
	}
	committed := false
	defer func() {
		if committed {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_ = tx.Rollback(rctx) // on failure pgx closes the connection, which also rolls back
	}()

	if err := fn(context.WithValue(ctx, txKey{}, tx)); err != nil {
		return 0, err
	}
	version, err = s.save(ctx, tx, p)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, interpretError(fmt.Sprintf("commit session %q", id), err)
	}
	committed = true
	return version, nil
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seqbus/seqbus/sequencer"
)

var _ sequencer.HeldStore = (*Store)(nil)

// holdSQL returns the statement of a hold: the state saved by stateStmt (whose arguments are
// $1..$n, $1 the entity and $2 the session), the held messages below its next_seq removed, the
// messages in the arrays from $n+1 on inserted (a sequence already held keeps its row), and
// the session's count and bytes after it. Every part joins st, so nothing happens when the
// version check fails. The sub-statements share one snapshot: cur sees the rows from before
// the statement, from which gone removes those below next_seq and to which ins adds.
func holdSQL(stateStmt string, n int) string {
	p := func(i int) string { return fmt.Sprintf("$%d", n+i) }
	return `WITH st AS (` + stateStmt + `), ` + heldGone + `, ins AS (
    INSERT INTO seqbus_held_message (entity, session_id, sequence, is_last, message_id, broker_sequence,
        enqueued_at, content_type, properties, body, size, held_at)
    SELECT $1, $2, m.sequence, m.is_last, m.message_id, m.broker_sequence, m.enqueued_at, m.content_type,
        m.properties::jsonb, m.body, m.size, m.held_at
    FROM st, unnest(` + p(1) + `::bigint[], ` + p(2) + `::boolean[], ` + p(3) + `::text[], ` + p(4) + `::bigint[], ` +
		p(5) + `::timestamptz[], ` + p(6) + `::text[], ` + p(7) + `::text[], ` + p(8) + `::bytea[], ` + p(9) + `::bigint[], ` +
		p(10) + `::timestamptz[])
        AS m(sequence, is_last, message_id, broker_sequence, enqueued_at, content_type, properties, body, size, held_at)
    ON CONFLICT (entity, session_id, sequence) DO NOTHING
    RETURNING size
), cur AS (
    SELECT count(*) AS n, coalesce(sum(h.size), 0) AS b
    FROM seqbus_held_message h, st
    WHERE h.entity = $1 AND h.session_id = $2 AND h.sequence >= st.next_seq
)
SELECT st.version, (SELECT count(*) FROM ins), cur.n + (SELECT count(*) FROM ins),
    cur.b + (SELECT coalesce(sum(size), 0) FROM ins)
FROM st, cur`
}

var (
	sqlHoldInsert = holdSQL(sqlInsertState, 11)
	sqlHoldUpdate = holdSQL(sqlUpdateState, 12)
)

const (
	heldColumns = `sequence, is_last, message_id, broker_sequence, enqueued_at, content_type, properties::text,
    CASE WHEN $5 THEN NULL ELSE body END, size, held_at`

	sqlHeld = `SELECT ` + heldColumns + `
FROM seqbus_held_message
WHERE entity = $1 AND session_id = $2 AND sequence >= $3
ORDER BY sequence
LIMIT $4`

	sqlHeldStats = `SELECT count(*), coalesce(sum(size), 0) FROM seqbus_held_message WHERE entity = $1 AND session_id = $2`

	sqlHeldTotals = `SELECT
    (SELECT count(*) FROM seqbus_held_message WHERE entity = $1),
    (SELECT coalesce(sum(size), 0) FROM seqbus_held_message WHERE entity = $1),
    (SELECT count(*) FROM seqbus_held_dead_letter WHERE entity = $1),
    (SELECT coalesce(sum(size), 0) FROM seqbus_held_dead_letter WHERE entity = $1)`

	// sqlLockVersion locks the state row of a dead-lettering if it still has the expected
	// version, so that the move and the save that follow cannot meet a concurrent save.
	sqlLockVersion = `SELECT 1 FROM seqbus_session_state WHERE entity = $1 AND session_id = $2 AND version = $3 FOR UPDATE`

	// sqlMoveToDead moves one held message to the dead letters.
	sqlMoveToDead = `WITH moved AS (
    DELETE FROM seqbus_held_message WHERE entity = $1 AND session_id = $2 AND sequence = $3
    RETURNING *
)
INSERT INTO seqbus_held_dead_letter (entity, session_id, sequence, is_last, message_id, broker_sequence, enqueued_at,
    content_type, properties, body, size, held_at, reason, description, dead_at)
SELECT entity, session_id, sequence, is_last, message_id, broker_sequence, enqueued_at,
    content_type, properties, body, size, held_at, $4, $5, $6
FROM moved
RETURNING id`

	sqlHeldDeadLetters = `SELECT id, session_id, ` + heldColumns + `, reason, description, dead_at
FROM seqbus_held_dead_letter
WHERE entity = $1 AND ($2 = '' OR session_id = $2) AND id > $3
ORDER BY id
LIMIT $4`

	sqlRemoveHeldDeadLetter = `DELETE FROM seqbus_held_dead_letter WHERE entity = $1 AND id = $2`
)

// Hold implements sequencer.HeldStore in one statement.
func (s *Store) Hold(ctx context.Context, p sequencer.HoldParams) (sequencer.HoldResult, error) {
	op := fmt.Sprintf("hold messages of session %q", p.Session.ID())
	msgs, err := sequencer.CheckHold(p)
	if err != nil {
		return sequencer.HoldResult{}, fmt.Errorf("postgres state store: %s: %w", op, err)
	}
	args, err := s.stateArgs(sequencer.SaveParams{Session: p.Session, State: p.State, ExpectedVersion: p.ExpectedVersion})
	if err != nil {
		return sequencer.HoldResult{}, fmt.Errorf("postgres state store: %s: %w", op, err)
	}
	hold := sqlHoldUpdate
	if p.ExpectedVersion == 0 {
		hold = sqlHoldInsert
	}
	var (
		seqs, brokerSeqs, sizes  = make([]int64, len(msgs)), make([]int64, len(msgs)), make([]int64, len(msgs))
		last                     = make([]bool, len(msgs))
		ids, contentTypes, props = make([]string, len(msgs)), make([]string, len(msgs)), make([]string, len(msgs))
		enqueued, heldAt         = make([]time.Time, len(msgs)), make([]time.Time, len(msgs))
		bodies                   = make([][]byte, len(msgs))
		now                      = time.Now()
	)
	for i, m := range msgs {
		pj, err := sequencer.MarshalProperties(m.Properties)
		if err != nil {
			return sequencer.HoldResult{}, fmt.Errorf("postgres state store: %s: sequence %d: %w", op, m.Sequence, err)
		}
		seqs[i], last[i], ids[i], brokerSeqs[i] = m.Sequence, m.IsLast, m.MessageID, m.BrokerSequence
		enqueued[i], contentTypes[i], props[i], sizes[i] = m.EnqueuedTime, m.ContentType, string(pj), sequencer.HeldSize(m)
		bodies[i] = m.Body
		if bodies[i] == nil {
			bodies[i] = []byte{}
		}
		heldAt[i] = m.HeldAt
		if heldAt[i].IsZero() {
			heldAt[i] = now
		}
	}
	args = append(args, seqs, last, ids, brokerSeqs, enqueued, contentTypes, props, bodies, sizes, heldAt)
	var res sequencer.HoldResult
	err = s.pool.QueryRow(ctx, hold, args...).Scan(&res.Version, &res.Stored, &res.Stats.Messages, &res.Stats.Bytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return sequencer.HoldResult{}, conflict(op, p.ExpectedVersion)
	}
	if err != nil {
		return sequencer.HoldResult{}, interpretError(op, err)
	}
	return res, nil
}

// Held implements sequencer.HeldStore.
func (s *Store) Held(ctx context.Context, p sequencer.HeldParams) ([]*sequencer.HeldMessage, error) {
	id := p.Session.ID()
	op := fmt.Sprintf("list held messages of session %q", id)
	limit := int64(p.Limit)
	if limit <= 0 {
		limit = math.MaxInt64
	}
	rows, err := s.pool.Query(ctx, sqlHeld, s.entity, id, p.From, limit, p.OmitBody)
	if err != nil {
		return nil, interpretError(op, err)
	}
	var out []*sequencer.HeldMessage
	for rows.Next() {
		var r heldRow
		if err := rows.Scan(r.dest()...); err != nil {
			rows.Close()
			return nil, interpretError(op, err)
		}
		m, err := r.message()
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres state store: %s: %w", op, err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(op, err)
	}
	return out, nil
}

// HeldStats implements sequencer.HeldStore.
func (s *Store) HeldStats(ctx context.Context, p sequencer.HeldStatsParams) (sequencer.HeldStats, error) {
	var st sequencer.HeldStats
	if err := s.pool.QueryRow(ctx, sqlHeldStats, s.entity, p.Session.ID()).Scan(&st.Messages, &st.Bytes); err != nil {
		return sequencer.HeldStats{}, interpretError(fmt.Sprintf("count held messages of session %q", p.Session.ID()), err)
	}
	return st, nil
}

// HeldTotals implements sequencer.HeldStore.
func (s *Store) HeldTotals(ctx context.Context, _ sequencer.HeldTotalsParams) (sequencer.HeldTotals, error) {
	var t sequencer.HeldTotals
	if err := s.pool.QueryRow(ctx, sqlHeldTotals, s.entity).Scan(&t.Held.Messages, &t.Held.Bytes,
		&t.DeadLetters.Messages, &t.DeadLetters.Bytes); err != nil {
		return sequencer.HeldTotals{}, interpretError("count held messages", err)
	}
	return t, nil
}

// DeadLetterHeld implements sequencer.HeldStore in one transaction: the state row is locked
// with the version check, the message moved, then the state saved.
func (s *Store) DeadLetterHeld(ctx context.Context, p sequencer.DeadLetterHeldParams) (version int64, err error) {
	id := p.Session.ID()
	op := fmt.Sprintf("dead-letter held message %d of session %q", p.Sequence, id)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, interpretError(op, err)
	}
	committed := false
	defer func() {
		if !committed {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			defer cancel()
			_ = tx.Rollback(rctx)
		}
	}()
	var one int
	err = tx.QueryRow(ctx, sqlLockVersion, s.entity, id, p.ExpectedVersion).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, conflict(op, p.ExpectedVersion)
	}
	if err != nil {
		return 0, interpretError(op, err)
	}
	at := p.At
	if at.IsZero() {
		at = time.Now()
	}
	var deadID int64
	err = tx.QueryRow(ctx, sqlMoveToDead, s.entity, id, p.Sequence, p.Reason, p.Description, at).Scan(&deadID)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("postgres state store: %s: %w: the sequence is not held", op, sequencer.ErrNotFound)
	}
	if err != nil {
		return 0, interpretError(op, err)
	}
	version, err = s.save(ctx, tx, sequencer.SaveParams{Session: p.Session, State: p.State, ExpectedVersion: p.ExpectedVersion})
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, interpretError(op, err)
	}
	committed = true
	return version, nil
}

// HeldDeadLetters implements sequencer.HeldStore.
func (s *Store) HeldDeadLetters(ctx context.Context, p sequencer.HeldDeadLettersParams) ([]*sequencer.HeldDeadLetter, error) {
	const op = "list held dead letters"
	limit := int64(p.Limit)
	if limit <= 0 {
		limit = math.MaxInt64
	}
	rows, err := s.pool.Query(ctx, sqlHeldDeadLetters, s.entity, p.SessionID, p.AfterID, limit, p.OmitBody)
	if err != nil {
		return nil, interpretError(op, err)
	}
	var out []*sequencer.HeldDeadLetter
	for rows.Next() {
		d := &sequencer.HeldDeadLetter{}
		var r heldRow
		dest := append([]any{&d.ID, &d.SessionID}, r.dest()...)
		if err := rows.Scan(append(dest, &d.Reason, &d.Description, &d.DeadAt)...); err != nil {
			rows.Close()
			return nil, interpretError(op, err)
		}
		m, err := r.message()
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres state store: %s: dead letter %d: %w", op, d.ID, err)
		}
		d.HeldMessage, d.DeadAt = *m, d.DeadAt.UTC()
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(op, err)
	}
	return out, nil
}

// RemoveHeldDeadLetter implements sequencer.HeldStore.
func (s *Store) RemoveHeldDeadLetter(ctx context.Context, p sequencer.RemoveHeldDeadLetterParams) error {
	if _, err := s.pool.Exec(ctx, sqlRemoveHeldDeadLetter, s.entity, p.ID); err != nil {
		return interpretError(fmt.Sprintf("remove held dead letter %d", p.ID), err)
	}
	return nil
}

// heldRow receives one row of heldColumns.
type heldRow struct {
	m     sequencer.HeldMessage
	props string
}

// dest returns the scan destinations of heldColumns.
func (r *heldRow) dest() []any {
	m := &r.m
	return []any{&m.Sequence, &m.IsLast, &m.MessageID, &m.BrokerSequence, &m.EnqueuedTime, &m.ContentType,
		&r.props, &m.Body, &m.Size, &m.HeldAt}
}

// message decodes the properties and returns the message, its times in UTC.
func (r *heldRow) message() (*sequencer.HeldMessage, error) {
	m := r.m
	var err error
	if m.Properties, err = sequencer.UnmarshalProperties([]byte(r.props)); err != nil {
		return nil, fmt.Errorf("held message %d: %w", m.Sequence, err)
	}
	m.EnqueuedTime, m.HeldAt = m.EnqueuedTime.UTC(), m.HeldAt.UTC()
	return &m, nil
}

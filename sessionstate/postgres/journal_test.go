package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqbus/seqbus/sequencer"
	"github.com/seqbus/seqbus/sessionstate/postgres"
)

func TestJournal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	store := newStore(t, pool, "orders").Transactional()
	journal := store.Journal()
	sess := session("s-1")

	msg := func(seq int64) *sequencer.Message {
		return &sequencer.Message{SessionID: "s-1", Sequence: seq, MessageID: "m", Body: []byte(`{"n":1}`)}
	}
	rows := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM seqbus_journal").Scan(&n))
		return n
	}

	tests := []struct {
		name     string
		run      func(version int64) (int64, error)
		wantErr  error
		wantRows int
	}{
		{
			name: "committed with the state",
			run: func(v int64) (int64, error) {
				st := sequencer.NewState()
				st.Next = 2
				return store.SaveWith(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: v},
					func(ctx context.Context) error { return journal.Handle(ctx, msg(1)) })
			},
			wantRows: 1,
		},
		{
			name: "rolled back on a version conflict",
			run: func(int64) (int64, error) {
				st := sequencer.NewState()
				st.Next = 3
				return store.SaveWith(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: 999_999},
					func(ctx context.Context) error { return journal.Handle(ctx, msg(2)) })
			},
			wantErr:  sequencer.ErrVersionConflict,
			wantRows: 1,
		},
		{
			name: "outside a transaction",
			run: func(int64) (int64, error) {
				return 0, journal.Handle(ctx, msg(2))
			},
			wantErr:  postgres.ErrNoTransaction,
			wantRows: 1,
		},
	}
	var version int64
	for _, tt := range tests { // sequential: each step builds on the stored state
		v, err := tt.run(version)
		if tt.wantErr != nil {
			require.True(t, errors.Is(err, tt.wantErr), "%s: got %v", tt.name, err)
		} else {
			require.NoError(t, err, tt.name)
			version = v
		}
		require.Equal(t, tt.wantRows, rows(), tt.name)
	}

	// The same sequence twice is refused by the primary key: the journal never hides a repeat.
	st := sequencer.NewState()
	st.Next = 3
	_, err := store.SaveWith(ctx, sequencer.SaveParams{Session: sess, State: st, ExpectedVersion: version},
		func(ctx context.Context) error { return journal.Handle(ctx, msg(1)) })
	var pgErr *postgres.Error
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23505", pgErr.SQLState)

	var entity, sid, mid string
	var seq int64
	var body []byte
	require.NoError(t, pool.QueryRow(ctx, "SELECT entity, session_id, sequence, message_id, body FROM seqbus_journal").
		Scan(&entity, &sid, &seq, &mid, &body))
	require.Equal(t, []any{"orders", "s-1", int64(1), "m", `{"n":1}`}, []any{entity, sid, seq, mid, string(body)})
}

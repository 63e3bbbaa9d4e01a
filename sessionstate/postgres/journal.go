package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/seqbus/seqbus/sequencer"
)

// ErrNoTransaction is returned by the journal handler when it is called outside
// [TxStore.SaveWith], where no transaction is reachable from the context.
var ErrNoTransaction = errors.New("postgres: no transaction in context (the journal handler needs the transactional store)")

// Journal returns a handler that inserts each message (entity, session_id, sequence, message_id,
// body, handled_at) into seqbus_journal (migration 002) through the transaction of SaveWith, so
// the row commits together with the state advance: every sequence is journaled exactly once,
// crashes included. Outside SaveWith it fails with ErrNoTransaction.
func (s *TxStore) Journal() sequencer.Handler {
	return sequencer.HandlerFunc(func(ctx context.Context, m *sequencer.Message) error {
		tx, ok := TxFromContext(ctx)
		if !ok {
			return fmt.Errorf("journal session %q sequence %d: %w", m.SessionID, m.Sequence, ErrNoTransaction)
		}
		body := m.Body
		if body == nil {
			body = []byte{}
		}
		if _, err := tx.Exec(ctx, sqlJournalInsert, s.entity, m.SessionID, m.Sequence, m.MessageID, body); err != nil {
			return interpretError(fmt.Sprintf("journal session %q sequence %d", m.SessionID, m.Sequence), err)
		}
		return nil
	})
}

-- The postgres state store mirrors State.GapSince, so that sweepers and operators find the
-- sessions waiting for a missing sequence (and for how long) without decoding every state.
-- Rows written before this migration get the column on their next save.
ALTER TABLE seqbus_session_state ADD COLUMN gap_since timestamptz;

-- Sessions waiting on a gap, oldest first.
CREATE INDEX seqbus_session_state_gap_idx
    ON seqbus_session_state (entity, gap_since)
    WHERE gap_since IS NOT NULL AND ended_at IS NULL;

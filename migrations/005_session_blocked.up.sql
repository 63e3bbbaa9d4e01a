-- The postgres state store mirrors State.Blocked (the poison policy block holds the session on a
-- failing message), so that sweepers and operators find blocked sessions without decoding every
-- state. Rows written before this migration cannot be blocked: no earlier worker stored the mark.
ALTER TABLE seqbus_session_state ADD COLUMN blocked boolean NOT NULL DEFAULT false;

CREATE INDEX seqbus_session_state_blocked_idx
    ON seqbus_session_state (entity, session_id)
    WHERE blocked AND ended_at IS NULL;

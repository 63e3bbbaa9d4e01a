ALTER TABLE seqbus_session_state RESET (fillfactor);

DROP INDEX IF EXISTS seqbus_session_state_stranded_idx;

CREATE INDEX seqbus_session_state_stranded_idx
    ON seqbus_session_state (entity, updated_at)
    WHERE due_deferred OR parked;

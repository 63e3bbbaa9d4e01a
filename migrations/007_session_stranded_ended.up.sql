-- A tombstone can be stranded too: its index still lists a handled message that is deferred at
-- the broker (its completion was refused as busy, or a crash cut it short), and one run settles
-- it. The sweeper's index now covers such rows; they are few, as are the stranded and parked
-- sessions that have not ended.
DROP INDEX IF EXISTS seqbus_session_state_stranded_idx;

CREATE INDEX seqbus_session_state_stranded_idx
    ON seqbus_session_state (entity, updated_at)
    WHERE due_deferred OR parked;

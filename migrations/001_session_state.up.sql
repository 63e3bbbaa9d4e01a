-- One row per (entity, session): the sequencer's state for the postgres state store.
-- state holds the engine's compact encoding (State.MarshalBinary); the other columns mirror the
-- parts of it that the sweeper and the tombstone purge query.
-- Versions come from one sequence, so a version is never reused, not even after a row was deleted
-- and the session started over.
CREATE SEQUENCE seqbus_session_state_version_seq;

CREATE TABLE seqbus_session_state (
    entity       text        NOT NULL,
    session_id   text        NOT NULL,
    version      bigint      NOT NULL CHECK (version > 0),
    state        bytea       NOT NULL,
    next_seq     bigint      NOT NULL,
    last_seq     bigint      NOT NULL DEFAULT 0,
    parked       boolean     NOT NULL DEFAULT false,
    due_deferred boolean     NOT NULL DEFAULT false,
    ended_at     timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (entity, session_id)
);

-- The sweeper: sessions with a due deferred message or a parked mark that have not ended.
CREATE INDEX seqbus_session_state_stranded_idx
    ON seqbus_session_state (entity, updated_at)
    WHERE (due_deferred OR parked) AND ended_at IS NULL;

-- The tombstone purge: ended sessions by end time.
CREATE INDEX seqbus_session_state_ended_idx
    ON seqbus_session_state (entity, ended_at)
    WHERE ended_at IS NOT NULL;

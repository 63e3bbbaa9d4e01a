-- Early messages held in the state store (sequencer.HeldStore, the postgres store): one row per
-- (entity, session, sequence), keyed as seqbus_session_state keys a session. A row is written in
-- the same statement as the session's state (with its version check) and removed in the same
-- statement as the save that moves the state's next_seq past it, so the rows of a session are
-- always the messages from its next_seq on that it holds. properties holds the application
-- properties as typed values (sequencer.MarshalProperties); size is what the message counts
-- against the limits (sequencer.HeldSize).
CREATE TABLE seqbus_held_message (
    entity          text        NOT NULL,
    session_id      text        NOT NULL,
    sequence        bigint      NOT NULL CHECK (sequence > 0),
    is_last         boolean     NOT NULL DEFAULT false,
    message_id      text        NOT NULL DEFAULT '',
    broker_sequence bigint      NOT NULL DEFAULT 0,
    enqueued_at     timestamptz NOT NULL,
    content_type    text        NOT NULL DEFAULT '',
    properties      jsonb       NOT NULL DEFAULT '{}',
    body            bytea       NOT NULL,
    size            bigint      NOT NULL CHECK (size >= 0),
    held_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (entity, session_id, sequence)
);

-- Held messages that turned poison, moved here in the same transaction as the state that records
-- them; each stays until an operator replays it (its copy sent to the entity, then the row
-- deleted). id orders them as they were dead-lettered. A session's state may be gone (ended and
-- purged) while its dead letters stay.
CREATE TABLE seqbus_held_dead_letter (
    id              bigint      GENERATED ALWAYS AS IDENTITY,
    entity          text        NOT NULL,
    session_id      text        NOT NULL,
    sequence        bigint      NOT NULL CHECK (sequence > 0),
    is_last         boolean     NOT NULL DEFAULT false,
    message_id      text        NOT NULL DEFAULT '',
    broker_sequence bigint      NOT NULL DEFAULT 0,
    enqueued_at     timestamptz NOT NULL,
    content_type    text        NOT NULL DEFAULT '',
    properties      jsonb       NOT NULL DEFAULT '{}',
    body            bytea       NOT NULL,
    size            bigint      NOT NULL CHECK (size >= 0),
    held_at         timestamptz NOT NULL,
    reason          text        NOT NULL,
    description     text        NOT NULL DEFAULT '',
    dead_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (entity, id)
);

CREATE INDEX seqbus_held_dead_letter_session_idx
    ON seqbus_held_dead_letter (entity, session_id, id);

-- The journal handler's table (SEQBUS_HANDLER=journal): one row per handled message, written in
-- the same transaction as the state advance, so each (entity, session, sequence) is recorded
-- exactly once. handled_at is the wall clock at insert (clock_timestamp, not the transaction
-- start), so ordering by it follows the order the messages were handled in.
CREATE TABLE seqbus_journal (
    entity     text        NOT NULL,
    session_id text        NOT NULL,
    sequence   bigint      NOT NULL,
    message_id text        NOT NULL DEFAULT '',
    body       bytea       NOT NULL,
    handled_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (entity, session_id, sequence)
);

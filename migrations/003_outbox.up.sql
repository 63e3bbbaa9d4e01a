-- The transactional outbox (package outbox). An application calls seqbus_outbox_enqueue inside
-- its own transaction; the relay (outbox.Relay) sends the committed rows to Service Bus in
-- (session, sequence) order and deletes them.
--
-- Service Bus compares entity names and session ids case-insensitively, so entities are stored
-- lower-cased and sessions are keyed by session_key = lower(session_id): "Order-1" and "order-1"
-- share one sequence, as they share one session at the broker. session_id keeps the casing each
-- message was enqueued with.

-- One row per (entity, session): the last sequence handed out. Enqueueing updates the row in the
-- caller's transaction, so a rollback gives the number back and sequences have no gaps. ended_at is
-- set when the last message (is_last) is enqueued: the session then refuses further messages
-- until the relay's purge deletes the row (outbox.RelayConfig.EndedRetention), after which the
-- session id starts again at 1.
CREATE TABLE seqbus_outbox_counter (
    entity      text        NOT NULL,
    session_key text        NOT NULL,
    session_id  text        NOT NULL,
    last_seq    bigint      NOT NULL CHECK (last_seq > 0),
    ended_at    timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (entity, session_key)
);

CREATE INDEX seqbus_outbox_counter_ended_idx
    ON seqbus_outbox_counter (ended_at)
    WHERE ended_at IS NOT NULL;

-- Messages waiting for the relay. A sent message is deleted, except a session's last one, which
-- is kept (without its body) with sent_at set until the purge, so that the counter row of an ended
-- session is purged only EndedRetention after its last message went out. id orders the relay's
-- scan oldest first.
CREATE TABLE seqbus_outbox (
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    entity      text        NOT NULL,
    session_key text        NOT NULL,
    session_id  text        NOT NULL,
    sequence    bigint      NOT NULL CHECK (sequence > 0),
    body        bytea       NOT NULL,
    properties  jsonb       NOT NULL DEFAULT '{}',
    is_last     boolean     NOT NULL DEFAULT false,
    traceparent text,
    enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    sent_at     timestamptz,
    PRIMARY KEY (entity, session_key, sequence)
);

CREATE INDEX seqbus_outbox_pending_idx
    ON seqbus_outbox (id)
    WHERE sent_at IS NULL;

CREATE INDEX seqbus_outbox_sent_idx
    ON seqbus_outbox (sent_at)
    WHERE sent_at IS NOT NULL;

-- Sessions whose last send failed: no relay sends them before next_attempt_at (the backoff). The
-- relay deletes the row when a send of the session succeeds. Only relays write this table, so a
-- paused session never blocks an enqueue.
CREATE TABLE seqbus_outbox_paused (
    entity          text        NOT NULL,
    session_key     text        NOT NULL,
    session_id      text        NOT NULL,
    attempts        integer     NOT NULL CHECK (attempts > 0),
    next_attempt_at timestamptz NOT NULL,
    last_error      text        NOT NULL,
    paused_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (entity, session_key)
);

-- NULL when session_id is a valid session id, otherwise why not. The rule is
-- publisher.ValidateSessionID's: not empty, at most 128 characters, no control characters
-- (U+0001-U+001F, U+007F-U+009F; text cannot hold U+0000).
CREATE FUNCTION seqbus_outbox_session_id_problem(session_id text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN session_id IS NULL OR session_id = '' THEN 'it is empty'
        WHEN session_id ~ '[\u0001-\u001f\u007f-\u009f]' THEN format('control character U+%s at position %s',
            upper(lpad(to_hex(ascii(substring(session_id FROM '[\u0001-\u001f\u007f-\u009f]'))), 4, '0')),
            strpos(session_id, substring(session_id FROM '[\u0001-\u001f\u007f-\u009f]')))
        WHEN char_length(session_id) > 128 THEN format('it is %s characters, Service Bus allows 128', char_length(session_id))
    END
$$;

-- Allocates the next sequence of (entity, session_id) in the caller's transaction and returns it;
-- with is_last the session ends (later calls fail with SQLSTATE SQ002 until the purge). Errors:
-- SQ001 invalid session id, SQ002 session ended, SQ006 invalid entity. outbox.Counter and
-- seqbus_outbox_enqueue use it.
CREATE FUNCTION seqbus_outbox_next_sequence(entity text, session_id text, is_last boolean DEFAULT false)
    RETURNS bigint
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_entity  text := lower(seqbus_outbox_next_sequence.entity);
    v_session text := seqbus_outbox_next_sequence.session_id;
    v_last    boolean := coalesce(seqbus_outbox_next_sequence.is_last, false);
    v_problem text;
    v_seq     bigint;
    v_ended   timestamptz;
BEGIN
    -- Checked before lower-casing, which maps a few non-ASCII letters (the Kelvin sign) to ASCII.
    IF v_entity IS NULL OR seqbus_outbox_next_sequence.entity !~ '^[A-Za-z0-9._/-]+$' OR char_length(v_entity) > 260 THEN
        RAISE EXCEPTION USING ERRCODE = 'SQ006',
            MESSAGE = format('seqbus outbox: invalid entity %L', seqbus_outbox_next_sequence.entity),
            HINT = 'An entity is the name of a queue or topic: 1 to 260 letters, digits, ''.'', ''-'', ''_'' or ''/''.';
    END IF;
    v_problem := seqbus_outbox_session_id_problem(v_session);
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SQ001',
            MESSAGE = format('seqbus outbox: invalid session id %L: %s', v_session, v_problem);
    END IF;

    INSERT INTO seqbus_outbox_counter AS c (entity, session_key, session_id, last_seq, ended_at)
    VALUES (v_entity, lower(v_session), v_session, 1, CASE WHEN v_last THEN now() END)
    ON CONFLICT (entity, session_key) DO UPDATE
        SET last_seq = c.last_seq + 1,
            ended_at = CASE WHEN v_last THEN now() END,
            updated_at = now()
        WHERE c.ended_at IS NULL
    RETURNING c.last_seq INTO v_seq;
    IF v_seq IS NULL THEN
        SELECT c.last_seq, c.ended_at INTO v_seq, v_ended
        FROM seqbus_outbox_counter c
        WHERE c.entity = v_entity AND c.session_key = lower(v_session);
        RAISE EXCEPTION USING ERRCODE = 'SQ002',
            MESSAGE = format('seqbus outbox: session %L of entity %L ended with sequence %s at %s',
                v_session, v_entity, v_seq, v_ended),
            HINT = 'The worker treats later messages of an ended session as duplicates. Use a new session id; this one can start again once the relay purges it (EndedRetention after its last message was sent).';
    END IF;
    RETURN v_seq;
END
$$;

-- Enqueues one message: validates it, allocates the session's next sequence and stores the
-- message, all in the caller's transaction, and returns the sequence; the relay is told on commit
-- (NOTIFY seqbus_outbox, payload: the entity) unless the setting seqbus.outbox_notify is 'off'.
-- properties are the message's application properties: a JSON object of strings, numbers and
-- booleans. traceparent, a W3C trace context, is sent as the Diagnostic-Id property.
--
-- A message is refused (SQ003) when its estimated size exceeds seqbus.outbox_max_message_bytes
-- (default 262144, Service Bus Standard; set it for Premium, e.g. ALTER DATABASE ... SET
-- seqbus.outbox_max_message_bytes = '1048576'), or its properties exceed 64 KiB (Service Bus's
-- header limit). The estimate bounds the AMQP encoding the SDK's batch measures: the body, the
-- properties as JSON text plus 16 bytes each, the session id four times (SessionId, MessageId, and
-- both again in the batch envelope) and 1 KiB for the rest (sequence, last mark, Diagnostic-Id,
-- headers).
--
-- Errors: SQ001 invalid session id, SQ002 session ended, SQ003 message too large, SQ004 invalid
-- properties or body, SQ005 invalid traceparent, SQ006 invalid entity. Nothing is stored then (and
-- the caller's transaction is aborted, as by any error).
CREATE FUNCTION seqbus_outbox_enqueue(
    entity      text,
    session_id  text,
    body        bytea,
    properties  jsonb DEFAULT '{}',
    is_last     boolean DEFAULT false,
    traceparent text DEFAULT NULL
) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_entity   text := lower(seqbus_outbox_enqueue.entity);
    v_session  text := seqbus_outbox_enqueue.session_id;
    v_body     bytea := seqbus_outbox_enqueue.body;
    v_props    jsonb := coalesce(seqbus_outbox_enqueue.properties, '{}');
    v_last     boolean := coalesce(seqbus_outbox_enqueue.is_last, false);
    v_trace    text := nullif(seqbus_outbox_enqueue.traceparent, '');
    v_bad      text;
    v_nprops   bigint;
    v_propsize bigint;
    v_size     bigint;
    v_max      bigint;
    v_seq      bigint;
BEGIN
    IF v_body IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SQ004', MESSAGE = 'seqbus outbox: body must not be NULL (use an empty bytea)';
    END IF;
    IF jsonb_typeof(v_props) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'SQ004',
            MESSAGE = format('seqbus outbox: properties must be a JSON object, not %s', jsonb_typeof(v_props));
    END IF;
    SELECT min(key) FILTER (WHERE jsonb_typeof(value) NOT IN ('string', 'number', 'boolean')), count(*)
    INTO v_bad, v_nprops
    FROM jsonb_each(v_props);
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SQ004',
            MESSAGE = format('seqbus outbox: property %L is a JSON %s; application properties are strings, numbers and booleans',
                v_bad, jsonb_typeof(v_props -> v_bad));
    END IF;
    IF v_trace IS NOT NULL AND (v_trace !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
            OR v_trace ~ '^ff-' OR v_trace ~ '^..-0{32}-' OR v_trace ~ '-0{16}-..$') THEN
        RAISE EXCEPTION USING ERRCODE = 'SQ005',
            MESSAGE = format('seqbus outbox: invalid traceparent %L', v_trace),
            HINT = 'A W3C trace context looks like 00-<32 hex digits trace id>-<16 hex digits parent id>-<2 hex digits flags>, ids not all zero.';
    END IF;

    v_max := coalesce(nullif(current_setting('seqbus.outbox_max_message_bytes', true), '')::bigint, 262144);
    v_propsize := octet_length(v_props::text) + 16 * v_nprops;
    v_size := octet_length(v_body) + v_propsize + 4 * coalesce(octet_length(v_session), 0) + 1024;
    IF v_propsize > 65536 THEN
        RAISE EXCEPTION USING ERRCODE = 'SQ003',
            MESSAGE = format('seqbus outbox: message for session %L of entity %L has %s bytes of properties, Service Bus allows 65536',
                v_session, v_entity, v_propsize);
    END IF;
    IF v_size > v_max THEN
        RAISE EXCEPTION USING ERRCODE = 'SQ003',
            MESSAGE = format('seqbus outbox: message for session %L of entity %L is about %s bytes (body %s), the limit is %s',
                v_session, v_entity, v_size, octet_length(v_body), v_max),
            HINT = 'The limit is the setting seqbus.outbox_max_message_bytes (default 262144, Service Bus Standard).';
    END IF;

    v_seq := seqbus_outbox_next_sequence(v_entity, v_session, v_last);

    INSERT INTO seqbus_outbox (entity, session_key, session_id, sequence, body, properties, is_last, traceparent)
    VALUES (v_entity, lower(v_session), v_session, v_seq, v_body, v_props, v_last, v_trace);

    IF coalesce(current_setting('seqbus.outbox_notify', true), '') <> 'off' THEN
        PERFORM pg_notify('seqbus_outbox', v_entity);
    END IF;
    RETURN v_seq;
END
$$;

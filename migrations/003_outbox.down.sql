DROP FUNCTION seqbus_outbox_enqueue(text, text, bytea, jsonb, boolean, text);
DROP FUNCTION seqbus_outbox_next_sequence(text, text, boolean);
DROP FUNCTION seqbus_outbox_session_id_problem(text);
DROP TABLE seqbus_outbox_paused;
DROP TABLE seqbus_outbox;
DROP TABLE seqbus_outbox_counter;

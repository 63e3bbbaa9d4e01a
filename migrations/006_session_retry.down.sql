DROP INDEX IF EXISTS seqbus_session_state_retry_idx;
ALTER TABLE seqbus_session_state DROP COLUMN IF EXISTS retry_at;

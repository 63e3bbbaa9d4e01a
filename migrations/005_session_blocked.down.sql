DROP INDEX IF EXISTS seqbus_session_state_blocked_idx;
ALTER TABLE seqbus_session_state DROP COLUMN IF EXISTS blocked;

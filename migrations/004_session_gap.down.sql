DROP INDEX IF EXISTS seqbus_session_state_gap_idx;
ALTER TABLE seqbus_session_state DROP COLUMN IF EXISTS gap_since;

-- The postgres state store mirrors State.Retrying.At (a failing message's next attempt, waited
-- for with the session released: SEQBUS_RETRY_RELEASE_AFTER), so that sweepers find the sessions
-- to wake, and operators the sessions that retry, without decoding every state. Rows written
-- before this migration cannot be retrying: no earlier worker stored the plan.
ALTER TABLE seqbus_session_state ADD COLUMN retry_at timestamptz;

-- Sessions waiting for a released retry, soonest first.
CREATE INDEX seqbus_session_state_retry_idx
    ON seqbus_session_state (entity, retry_at)
    WHERE retry_at IS NOT NULL AND ended_at IS NULL;

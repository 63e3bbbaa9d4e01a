-- Every save of the postgres state store sets updated_at. With updated_at a key of the sweeper's
-- index no save could be a heap-only (HOT) update: each wrote a new entry into every index of
-- the table, in its WAL too. Keyed by entity alone, the index leaves updated_at out; the sweeper
-- sorts the rows it finds by updated_at, and they are few (stranded and parked sessions). Only a
-- save that changes an indexed column (a session parks, ends, opens a gap, blocks or plans a
-- released retry) still touches the indexes. Free room in each page lets a HOT update keep the
-- new row version on the page of the old one (pages written from now on).
DROP INDEX IF EXISTS seqbus_session_state_stranded_idx;

CREATE INDEX seqbus_session_state_stranded_idx
    ON seqbus_session_state (entity)
    WHERE due_deferred OR parked;

ALTER TABLE seqbus_session_state SET (fillfactor = 80);

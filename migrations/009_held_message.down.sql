-- Held messages exist nowhere else: the broker's copies were completed once they were held. The
-- down migration refuses while any is held or dead-lettered; let the workers hand them over
-- (or replay the dead letters) first.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM seqbus_held_message) OR EXISTS (SELECT 1 FROM seqbus_held_dead_letter) THEN
        RAISE EXCEPTION 'seqbus: messages are held in seqbus_held_message or seqbus_held_dead_letter; they exist nowhere else'
            USING HINT = 'Let the workers hand the held messages over and replay the dead letters (worker dlq replay) before rolling back 009.';
    END IF;
END
$$;

DROP TABLE seqbus_held_dead_letter;
DROP TABLE seqbus_held_message;

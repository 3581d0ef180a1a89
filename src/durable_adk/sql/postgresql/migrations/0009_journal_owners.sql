-- Journal entries are owned: an INTENT names the attempt acting on it
-- (holder, a token per Journal.execute call) besides its run and epoch. An
-- intent is abandoned only when its run is no longer RUNNING at that epoch,
-- when its holder released it (the act raised), or, for an attempt outside any
-- run, when its hold (held_until, database clock, renewed while acting) ran
-- out. Rows written before this migration have no holder: they read as
-- released, which is how every INTENT was read until now.

ALTER TABLE journal ADD COLUMN holder text;
ALTER TABLE journal ADD COLUMN held_until double precision;

INSERT INTO schema_version (version, name, applied_at)
VALUES (9, 'journal_owners', extract(epoch FROM clock_timestamp()));

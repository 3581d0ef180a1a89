-- Journal entries are owned: an INTENT names the attempt acting on it
-- (holder, a token per Journal.execute call) besides its run and epoch. An
-- intent is abandoned only when its run is no longer RUNNING at that epoch,
-- when its holder released it (the act raised), or, for an attempt outside any
-- run, when its hold (held_until, database clock, renewed while acting) ran
-- out. Rows written before this migration have no holder: they read as
-- released, which is how every INTENT was read until now.

ALTER TABLE journal ADD COLUMN holder TEXT;
ALTER TABLE journal ADD COLUMN held_until REAL;

INSERT INTO schema_version (version, name, applied_at)
VALUES (9, 'journal_owners', (julianday('now') - 2440587.5) * 86400.0);

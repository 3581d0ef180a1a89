-- Drift of compensators (issue 25): each saga step records whether the code
-- that began it could undo it (1: it had a compensator; 0: the stage was
-- uncompensatable). A worker whose code lacks the compensator of a step
-- recorded 1 and not yet undone parks the run or leaves the saga for code that
-- has it, before it undoes anything. NULL: recorded before this migration
-- (not compared).

ALTER TABLE saga_steps ADD COLUMN compensatable boolean;

INSERT INTO schema_version (version, name, applied_at)
VALUES (17, 'saga_compensators', extract(epoch FROM clock_timestamp()));

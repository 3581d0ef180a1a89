-- Saga writes fenced like session appends (issue 15). A step remembers the run
-- and epoch that recorded it, so a compensation can tell whether a step that
-- died PENDING may still act (a zombie mid-call); a saga finished by the saga
-- sweeper is 'unrecorded' until its outcome event is in the session.
-- (Assigned number: 0009; numbered here after the last migration of this branch.)

-- The run that recorded a step, and its epoch then.
ALTER TABLE saga_steps ADD COLUMN run_id text;
ALTER TABLE saga_steps ADD COLUMN run_epoch bigint;
-- 1: a saga sweeper finished the saga and still owes its outcome event.
ALTER TABLE sagas ADD COLUMN unrecorded integer NOT NULL DEFAULT 0;

INSERT INTO schema_version (version, name, applied_at)
VALUES (8, 'saga_fences', extract(epoch FROM clock_timestamp()));

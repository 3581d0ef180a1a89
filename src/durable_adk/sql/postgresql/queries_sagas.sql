-- Saga ledger queries for PostgreSQL (same names in the other dialect).

-- name: saga_begin
WITH ins AS (
    INSERT INTO sagas (saga_id, name, app_name, user_id, session_id, invocation_id, status,
                       created_at, updated_at)
    VALUES (:saga_id::text, :name::text, :app_name::text, :user_id::text, :session_id::text,
            :invocation_id::text, 'RUNNING',
            extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp()))
    ON CONFLICT (saga_id) DO NOTHING
    RETURNING *
)
SELECT * FROM ins
UNION ALL
SELECT * FROM sagas WHERE saga_id = :saga_id::text AND NOT EXISTS (SELECT 1 FROM ins);

-- name: saga_get
SELECT * FROM sagas WHERE saga_id = :saga_id::text;

-- name: saga_list
SELECT * FROM sagas
 WHERE (:status::text IS NULL OR status = :status::text)
 ORDER BY created_at DESC LIMIT :limit::int;

-- name: saga_steps
-- Newest first: the order compensations run in.
SELECT * FROM saga_steps WHERE saga_id = :saga_id::text ORDER BY pk DESC;

-- name: saga_step_pending
-- Before the outside call: the step may now have happened, so it is on record.
WITH ins AS (
    INSERT INTO saga_steps (saga_id, step, status, action_key, comp_key, created_at, updated_at)
    VALUES (:saga_id::text, :step::text, 'PENDING', :action_key::text, :comp_key::text,
            extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp()))
    ON CONFLICT (saga_id, step) DO NOTHING
    RETURNING 1
)
UPDATE sagas SET updated_at = extract(epoch FROM clock_timestamp())
 WHERE saga_id = :saga_id::text;

-- name: saga_step_done
-- After the outside call, before the event: what the compensator will need.
WITH upd AS (
    UPDATE saga_steps
       SET status = 'DONE', record = :record::text, updated_at = extract(epoch FROM clock_timestamp())
     WHERE saga_id = :saga_id::text AND step = :step::text AND status IN ('PENDING', 'DONE')
    RETURNING 1
)
UPDATE sagas SET updated_at = extract(epoch FROM clock_timestamp())
 WHERE saga_id = :saga_id::text;

-- name: saga_step_undone
-- The step's compensation ended: COMPENSATED, or COMPENSATION_FAILED with the error.
WITH upd AS (
    UPDATE saga_steps
       SET status = :status::text, attempts = attempts + :attempts::int, last_error = :error::text,
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE saga_id = :saga_id::text AND step = :step::text AND status <> 'COMPENSATED'
    RETURNING 1
)
UPDATE sagas SET updated_at = extract(epoch FROM clock_timestamp())
 WHERE saga_id = :saga_id::text;

-- name: saga_compensating
UPDATE sagas
   SET status = 'COMPENSATING', reason = COALESCE(reason, :reason::text),
       failed_at = COALESCE(failed_at, extract(epoch FROM clock_timestamp())),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE saga_id = :saga_id::text AND status IN ('RUNNING', 'COMPENSATING')
RETURNING *;

-- name: saga_finish
UPDATE sagas
   SET status = :status::text, reason = COALESCE(:reason::text, reason), owner = NULL,
       finished_at = extract(epoch FROM clock_timestamp()),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE saga_id = :saga_id::text AND status IN ('RUNNING', 'COMPENSATING')
RETURNING *;

-- name: saga_claim_stuck
-- Sagas of one name and app with no final status, quiet for :timeout seconds,
-- whose run (if any) is not live or waiting on a long-running call (PAUSED),
-- and that no other sweeper holds. SKIP LOCKED: two sweepers
-- never take the same saga.
-- Evaluated once (MATERIALIZED): inside IN (...) the planner may re-run a
-- LIMIT ... SKIP LOCKED subquery per row and claim more than :limit.
WITH picked AS MATERIALIZED (
    SELECT s.saga_id FROM sagas s
     WHERE s.status IN ('RUNNING', 'COMPENSATING')
       AND s.name = :name::text AND s.app_name = :app_name::text
       AND s.updated_at < extract(epoch FROM clock_timestamp()) - :timeout::float8
       AND s.lease_until < extract(epoch FROM clock_timestamp())
       AND NOT EXISTS (SELECT 1 FROM runs r
                        WHERE r.invocation_id = s.invocation_id
                          AND r.status IN ('RUNNING', 'QUEUED', 'PAUSED'))
     ORDER BY s.updated_at
     LIMIT :limit::int
     FOR UPDATE SKIP LOCKED
)
UPDATE sagas
   SET owner = :owner::text,
       lease_until = extract(epoch FROM clock_timestamp()) + :lease::float8,
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE saga_id IN (SELECT saga_id FROM picked)
   AND lease_until < extract(epoch FROM clock_timestamp())
RETURNING *;

-- name: saga_backdate
-- Moves a saga's quiet time and lease into the past (tests, operators).
UPDATE sagas
   SET updated_at = updated_at - :seconds::float8, lease_until = lease_until - :seconds::float8
 WHERE saga_id = :saga_id::text
RETURNING saga_id;

-- name: dead_letter_add
INSERT INTO dead_letters (kind, run_id, request, classification, last_events, error, created_at)
VALUES (:kind::text, :run_id::text, :request::text, :classification::text, :last_events::text,
        :error::text, extract(epoch FROM clock_timestamp()))
RETURNING pk;

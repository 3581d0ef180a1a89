-- Saga ledger queries for PostgreSQL (same names in the other dialect).

-- name: saga_begin
WITH ins AS (
    INSERT INTO sagas (saga_id, name, app_name, user_id, session_id, invocation_id, status,
                       created_at, updated_at, app_version, app_fingerprint)
    VALUES (:saga_id::text, :name::text, :app_name::text, :user_id::text, :session_id::text,
            :invocation_id::text, 'RUNNING',
            extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp()),
            (SELECT r.app_version FROM runs r WHERE r.app_name = :app_name::text AND r.invocation_id = :invocation_id::text ORDER BY r.pk DESC LIMIT 1),
            (SELECT r.app_fingerprint FROM runs r WHERE r.app_name = :app_name::text AND r.invocation_id = :invocation_id::text ORDER BY r.pk DESC LIMIT 1))
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

-- Fences. A write made from inside a run names (:run_id, :run_epoch): refused
-- ('fenced') unless that run is RUNNING at that epoch, the rule of the run's
-- session appends (a takeover bumps the epoch). A write made by a saga sweeper
-- names its :owner: refused once another sweeper claimed the saga.
-- A write with neither (a saga on plain ADK) is not fenced.

-- name: saga_step_pending inline
-- Before the outside call: the step may now have happened, so it is on record,
-- with the run and epoch that may act on it (a re-drive that records the step
-- again while it is still PENDING becomes its writer).
WITH verdict AS (
    SELECT CASE
             WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING'
                      ) THEN 'fenced'
             WHEN :owner::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM sagas WHERE saga_id = :saga_id::text
                       AND owner = :owner::text) THEN 'fenced'
             ELSE 'ok'
           END AS fence
), ins AS (
    INSERT INTO saga_steps (saga_id, step, status, action_key, comp_key, run_id, run_epoch,
                            compensatable, created_at, updated_at)
    SELECT :saga_id::text, :step::text, 'PENDING', :action_key::text, :comp_key::text,
           :run_id::text, :run_epoch::bigint, :compensatable::boolean, extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp())
      FROM verdict WHERE fence = 'ok'
    ON CONFLICT (saga_id, step) DO UPDATE
       SET run_id = EXCLUDED.run_id, run_epoch = EXCLUDED.run_epoch,
           updated_at = EXCLUDED.updated_at
     WHERE saga_steps.status = 'PENDING'
    RETURNING 1
), touch AS (
    UPDATE sagas SET updated_at = extract(epoch FROM clock_timestamp())
     WHERE saga_id = :saga_id::text AND (SELECT fence FROM verdict) = 'ok'
    RETURNING 1
)
SELECT fence AS status FROM verdict;

-- name: saga_step_done inline
-- After the outside call, before the event: what the compensator will need.
WITH verdict AS (
    SELECT CASE
             WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING'
                      ) THEN 'fenced'
             WHEN :owner::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM sagas WHERE saga_id = :saga_id::text
                       AND owner = :owner::text) THEN 'fenced'
             ELSE 'ok'
           END AS fence
), upd AS (
    UPDATE saga_steps
       SET status = 'DONE', record = :record::text, updated_at = extract(epoch FROM clock_timestamp())
     WHERE saga_id = :saga_id::text AND step = :step::text AND status IN ('PENDING', 'DONE')
       AND (SELECT fence FROM verdict) = 'ok'
    RETURNING 1
), touch AS (
    UPDATE sagas SET updated_at = extract(epoch FROM clock_timestamp())
     WHERE saga_id = :saga_id::text AND (SELECT fence FROM verdict) = 'ok'
    RETURNING 1
)
SELECT fence AS status FROM verdict;

-- name: saga_step_undone
-- The step's compensation ended: COMPENSATED, or COMPENSATION_FAILED with the error.
WITH verdict AS (
    SELECT CASE
             WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING'
                      ) THEN 'fenced'
             WHEN :owner::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM sagas WHERE saga_id = :saga_id::text
                       AND owner = :owner::text) THEN 'fenced'
             ELSE 'ok'
           END AS fence
), upd AS (
    UPDATE saga_steps
       SET status = :status::text, attempts = attempts + :attempts::int,
           last_error = :error::text, updated_at = extract(epoch FROM clock_timestamp())
     WHERE saga_id = :saga_id::text AND step = :step::text AND status <> 'COMPENSATED'
       AND (SELECT fence FROM verdict) = 'ok'
    RETURNING 1
), touch AS (
    UPDATE sagas SET updated_at = extract(epoch FROM clock_timestamp())
     WHERE saga_id = :saga_id::text AND (SELECT fence FROM verdict) = 'ok'
    RETURNING 1
)
SELECT fence AS status FROM verdict;

-- name: saga_step_can_act
-- Whether the run and epoch that recorded a step may still act on it: that run
-- is RUNNING at that epoch and its lease has not expired (database clock). A
-- superseded epoch was taken over only after its lease expired; a finished run
-- acts no more; a step recorded outside any run has no one to wait for.
SELECT EXISTS (SELECT 1 FROM saga_steps st
                 JOIN runs r ON r.run_id = st.run_id AND r.epoch = st.run_epoch
                WHERE st.saga_id = :saga_id::text AND st.step = :step::text
                  AND r.status = 'RUNNING' AND r.lease_until >= extract(epoch FROM clock_timestamp())) AS can_act;

-- name: saga_compensating
WITH verdict AS (
    SELECT CASE
             WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING'
                      ) THEN 'fenced'
             WHEN :owner::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM sagas WHERE saga_id = :saga_id::text
                       AND owner = :owner::text) THEN 'fenced'
             ELSE 'ok'
           END AS fence
), upd AS (
    UPDATE sagas
       SET status = 'COMPENSATING', reason = COALESCE(reason, :reason::text),
           failed_at = COALESCE(failed_at, extract(epoch FROM clock_timestamp())),
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE saga_id = :saga_id::text AND status IN ('RUNNING', 'COMPENSATING')
       AND (SELECT fence FROM verdict) = 'ok'
    RETURNING *
)
SELECT v.fence, u.* FROM verdict v LEFT JOIN upd u ON true;

-- name: saga_finish
-- A saga sweeper (:owner) keeps its claim and owes the outcome event
-- ('unrecorded') until saga_recorded; a run's own finish yields that event itself.
WITH verdict AS (
    SELECT CASE
             WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING'
                      ) THEN 'fenced'
             WHEN :owner::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM sagas WHERE saga_id = :saga_id::text
                       AND owner = :owner::text) THEN 'fenced'
             ELSE 'ok'
           END AS fence
), upd AS (
    UPDATE sagas
       SET status = :status::text, reason = COALESCE(:reason::text, reason),
           owner = CASE WHEN :owner::text IS NULL THEN NULL ELSE owner END,
           unrecorded = CASE WHEN :owner::text IS NULL THEN unrecorded ELSE 1 END,
           finished_at = extract(epoch FROM clock_timestamp()),
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE saga_id = :saga_id::text AND status IN ('RUNNING', 'COMPENSATING')
       AND (SELECT fence FROM verdict) = 'ok'
    RETURNING *
)
SELECT v.fence, u.* FROM verdict v LEFT JOIN upd u ON true;

-- name: saga_recorded
-- The saga sweeper stored the outcome event: nothing is owed, the claim ends.
UPDATE sagas SET unrecorded = 0, owner = NULL, lease_until = 0
 WHERE saga_id = :saga_id::text AND owner = :owner::text
RETURNING saga_id;

-- name: saga_release
-- The saga sweeper leaves a saga for a later pass (a step may still act).
UPDATE sagas SET owner = NULL, lease_until = 0
 WHERE saga_id = :saga_id::text AND owner = :owner::text
RETURNING saga_id;

-- name: saga_renew
-- The saga sweeper's heartbeat: extends a claim it still holds, while the saga
-- needs compensating or its outcome event is owed.
UPDATE sagas SET lease_until = extract(epoch FROM clock_timestamp()) + :lease::float8
 WHERE saga_id = :saga_id::text AND owner = :owner::text
   AND (status IN ('RUNNING', 'COMPENSATING') OR unrecorded = 1)
RETURNING lease_until;

-- name: saga_claim_stuck
-- Sagas of one name and app that no other sweeper holds and that need one:
-- no final status, quiet for :timeout seconds, whose run (if any) is not live
-- or waiting on a long-running call (PAUSED); or finished by a sweeper that
-- died before it stored the outcome event. Only sagas of a version the
-- sweeper's worker serves (:serves, a JSON array), as for runs. SKIP LOCKED:
-- two sweepers never take the same saga.
-- Evaluated once (MATERIALIZED): inside IN (...) the planner may re-run a
-- LIMIT ... SKIP LOCKED subquery per row and claim more than :limit.
WITH picked AS MATERIALIZED (
    SELECT s.saga_id FROM sagas s
     WHERE s.name = :name::text AND s.app_name = :app_name::text
       -- only versions this worker serves (NULL: recorded before versions)
       AND (s.app_version IS NULL OR s.app_version IN (SELECT jsonb_array_elements_text(:serves::jsonb)))
       AND s.lease_until < extract(epoch FROM clock_timestamp())
       AND (s.unrecorded = 1
            OR (s.status IN ('RUNNING', 'COMPENSATING')
                AND s.updated_at < extract(epoch FROM clock_timestamp()) - :timeout::float8
                AND NOT EXISTS (SELECT 1 FROM runs r
                                 WHERE r.invocation_id = s.invocation_id
                                   AND r.status IN ('RUNNING', 'QUEUED', 'PAUSED'))))
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

-- name: dead_letter_add_once
-- The same dead letter at most once (a saga left for other code is met again
-- by every sweep until that code comes).
INSERT INTO dead_letters (kind, run_id, request, classification, last_events, error, created_at)
SELECT :kind::text, :run_id::text, :request::text, :classification::text, :last_events::text,
       :error::text, extract(epoch FROM clock_timestamp())
 WHERE NOT EXISTS (SELECT 1 FROM dead_letters
                    WHERE kind = :kind::text AND request = :request::text
                      AND error = :error::text)
RETURNING pk;

-- name: saga_steps_of_invocation
-- The sagas an invocation recorded, with their steps (drift detection).
SELECT s.name, s.status AS saga_status, st.step, st.status, st.compensatable
  FROM sagas s JOIN saga_steps st ON st.saga_id = s.saga_id
 WHERE s.app_name = :app_name AND s.invocation_id = :invocation_id
 ORDER BY st.pk;

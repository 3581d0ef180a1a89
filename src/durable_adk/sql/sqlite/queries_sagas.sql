-- Saga ledger queries for SQLite (same names in the other dialect).

-- name: saga_begin
INSERT INTO sagas (saga_id, name, app_name, user_id, session_id, invocation_id, status,
                   created_at, updated_at, app_version, app_fingerprint)
VALUES (:saga_id, :name, :app_name, :user_id, :session_id, :invocation_id, 'RUNNING',
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0,
        (SELECT r.app_version FROM runs r WHERE r.app_name = :app_name AND r.invocation_id = :invocation_id ORDER BY r.pk DESC LIMIT 1),
        (SELECT r.app_fingerprint FROM runs r WHERE r.app_name = :app_name AND r.invocation_id = :invocation_id ORDER BY r.pk DESC LIMIT 1))
ON CONFLICT (saga_id) DO NOTHING;
SELECT * FROM sagas WHERE saga_id = :saga_id;

-- name: saga_get
SELECT * FROM sagas WHERE saga_id = :saga_id;

-- name: saga_list
SELECT * FROM sagas
 WHERE (:status IS NULL OR status = :status)
 ORDER BY created_at DESC LIMIT :limit;

-- name: saga_steps
-- Newest first: the order compensations run in.
SELECT * FROM saga_steps WHERE saga_id = :saga_id ORDER BY pk DESC;

-- Fences. A write made from inside a run names (:run_id, :run_epoch): refused
-- ('fenced') unless that run is RUNNING at that epoch, the rule of the run's
-- session appends (a takeover bumps the epoch). A write made by a saga sweeper
-- names its :owner: refused once another sweeper claimed the saga.
-- A write with neither (a saga on plain ADK) is not fenced.

-- name: saga_step_pending guarded inline
-- Before the outside call: the step may now have happened, so it is on record,
-- with the run and epoch that may act on it (a re-drive that records the step
-- again while it is still PENDING becomes its writer).
SELECT CASE
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING')
              THEN 'fenced'
         WHEN :owner IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM sagas WHERE saga_id = :saga_id AND owner = :owner)
              THEN 'fenced'
         ELSE 'ok'
       END AS status;
INSERT INTO saga_steps (saga_id, step, status, action_key, comp_key, run_id, run_epoch,
                        compensatable, created_at, updated_at)
VALUES (:saga_id, :step, 'PENDING', :action_key, :comp_key, :run_id, :run_epoch, :compensatable,
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (saga_id, step) DO UPDATE
   SET run_id = excluded.run_id, run_epoch = excluded.run_epoch, updated_at = excluded.updated_at
 WHERE saga_steps.status = 'PENDING';
UPDATE sagas SET updated_at = (julianday('now') - 2440587.5) * 86400.0 WHERE saga_id = :saga_id;
SELECT 'ok' AS status;

-- name: saga_step_done guarded inline
-- After the outside call, before the event: what the compensator will need.
SELECT CASE
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING')
              THEN 'fenced'
         WHEN :owner IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM sagas WHERE saga_id = :saga_id AND owner = :owner)
              THEN 'fenced'
         ELSE 'ok'
       END AS status;
UPDATE saga_steps
   SET status = 'DONE', record = :record, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE saga_id = :saga_id AND step = :step AND status IN ('PENDING', 'DONE');
UPDATE sagas SET updated_at = (julianday('now') - 2440587.5) * 86400.0 WHERE saga_id = :saga_id;
SELECT 'ok' AS status;

-- name: saga_step_undone guarded
-- The step's compensation ended: COMPENSATED, or COMPENSATION_FAILED with the error.
SELECT CASE
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING')
              THEN 'fenced'
         WHEN :owner IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM sagas WHERE saga_id = :saga_id AND owner = :owner)
              THEN 'fenced'
         ELSE 'ok'
       END AS status;
UPDATE saga_steps
   SET status = :status, attempts = attempts + :attempts, last_error = :error,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE saga_id = :saga_id AND step = :step AND status <> 'COMPENSATED';
UPDATE sagas SET updated_at = (julianday('now') - 2440587.5) * 86400.0 WHERE saga_id = :saga_id;
SELECT 'ok' AS status;

-- name: saga_step_can_act
-- Whether the run and epoch that recorded a step may still act on it: that run
-- is RUNNING at that epoch and its lease has not expired (database clock). A
-- superseded epoch was taken over only after its lease expired; a finished run
-- acts no more; a step recorded outside any run has no one to wait for.
SELECT EXISTS (SELECT 1 FROM saga_steps st
                 JOIN runs r ON r.run_id = st.run_id AND r.epoch = st.run_epoch
                WHERE st.saga_id = :saga_id AND st.step = :step
                  AND r.status = 'RUNNING' AND r.lease_until >= (julianday('now') - 2440587.5) * 86400.0) AS can_act;

-- name: saga_compensating guarded
SELECT v AS status, v AS fence FROM (SELECT CASE
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING')
              THEN 'fenced'
         WHEN :owner IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM sagas WHERE saga_id = :saga_id AND owner = :owner)
              THEN 'fenced'
         ELSE 'ok'
       END AS v);
UPDATE sagas
   SET status = 'COMPENSATING', reason = COALESCE(reason, :reason),
       failed_at = COALESCE(failed_at, (julianday('now') - 2440587.5) * 86400.0),
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE saga_id = :saga_id AND status IN ('RUNNING', 'COMPENSATING');
SELECT 'ok' AS fence, s.* FROM sagas s WHERE s.saga_id = :saga_id AND changes() > 0;

-- name: saga_finish guarded
-- A saga sweeper (:owner) keeps its claim and owes the outcome event
-- ('unrecorded') until saga_recorded; a run's own finish yields that event itself.
SELECT v AS status, v AS fence FROM (SELECT CASE
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING')
              THEN 'fenced'
         WHEN :owner IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM sagas WHERE saga_id = :saga_id AND owner = :owner)
              THEN 'fenced'
         ELSE 'ok'
       END AS v);
UPDATE sagas
   SET status = :status, reason = COALESCE(:reason, reason),
       owner = CASE WHEN :owner IS NULL THEN NULL ELSE owner END,
       unrecorded = CASE WHEN :owner IS NULL THEN unrecorded ELSE 1 END,
       finished_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE saga_id = :saga_id AND status IN ('RUNNING', 'COMPENSATING');
SELECT 'ok' AS fence, s.* FROM sagas s WHERE s.saga_id = :saga_id AND changes() > 0;

-- name: saga_recorded
-- The saga sweeper stored the outcome event: nothing is owed, the claim ends.
UPDATE sagas SET unrecorded = 0, owner = NULL, lease_until = 0
 WHERE saga_id = :saga_id AND owner = :owner
RETURNING saga_id;

-- name: saga_release
-- The saga sweeper leaves a saga for a later pass (a step may still act).
UPDATE sagas SET owner = NULL, lease_until = 0
 WHERE saga_id = :saga_id AND owner = :owner
RETURNING saga_id;

-- name: saga_renew
-- The saga sweeper's heartbeat: extends a claim it still holds, while the saga
-- needs compensating or its outcome event is owed.
UPDATE sagas SET lease_until = (julianday('now') - 2440587.5) * 86400.0 + :lease
 WHERE saga_id = :saga_id AND owner = :owner
   AND (status IN ('RUNNING', 'COMPENSATING') OR unrecorded = 1)
RETURNING lease_until;

-- name: saga_claim_stuck
-- Sagas of one name and app that no other sweeper holds and that need one:
-- no final status, quiet for :timeout seconds, whose run (if any) is not live
-- or waiting on a long-running call (PAUSED); or finished by a sweeper that
-- died before it stored the outcome event. Only sagas of a version the
-- sweeper's worker serves (:serves, a JSON array), as for runs.
UPDATE sagas
   SET owner = :owner, lease_until = (julianday('now') - 2440587.5) * 86400.0 + :lease,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE saga_id IN (
        SELECT s.saga_id FROM sagas s
         WHERE s.name = :name AND s.app_name = :app_name
           -- only versions this worker serves (NULL: recorded before versions)
           AND (s.app_version IS NULL OR s.app_version IN (SELECT value FROM json_each(:serves)))
           AND s.lease_until < (julianday('now') - 2440587.5) * 86400.0
           AND (s.unrecorded = 1
                OR (s.status IN ('RUNNING', 'COMPENSATING')
                    AND s.updated_at < (julianday('now') - 2440587.5) * 86400.0 - :timeout
                    AND NOT EXISTS (SELECT 1 FROM runs r
                                     WHERE r.invocation_id = s.invocation_id
                                       AND r.status IN ('RUNNING', 'QUEUED', 'PAUSED'))))
         ORDER BY s.updated_at
         LIMIT :limit)
RETURNING *;

-- name: saga_backdate
-- Moves a saga's quiet time and lease into the past (tests, operators).
UPDATE sagas
   SET updated_at = updated_at - :seconds, lease_until = lease_until - :seconds
 WHERE saga_id = :saga_id
RETURNING saga_id;

-- name: dead_letter_add
INSERT INTO dead_letters (kind, run_id, request, classification, last_events, error, created_at)
VALUES (:kind, :run_id, :request, :classification, :last_events, :error,
        (julianday('now') - 2440587.5) * 86400.0)
RETURNING pk;

-- name: dead_letter_add_once
-- The same dead letter at most once (a saga left for other code is met again
-- by every sweep until that code comes).
INSERT INTO dead_letters (kind, run_id, request, classification, last_events, error, created_at)
SELECT :kind, :run_id, :request, :classification, :last_events, :error,
       (julianday('now') - 2440587.5) * 86400.0
 WHERE NOT EXISTS (SELECT 1 FROM dead_letters
                    WHERE kind = :kind AND request = :request AND error = :error)
RETURNING pk;

-- name: saga_steps_of_invocation
-- The sagas an invocation recorded, with their steps (drift detection).
SELECT s.name, s.status AS saga_status, st.step, st.status, st.compensatable
  FROM sagas s JOIN saga_steps st ON st.saga_id = s.saga_id
 WHERE s.app_name = :app_name AND s.invocation_id = :invocation_id
 ORDER BY st.pk;

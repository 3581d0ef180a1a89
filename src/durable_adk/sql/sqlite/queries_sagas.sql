-- Saga ledger queries for SQLite (same names in the other dialect).

-- name: saga_begin
INSERT INTO sagas (saga_id, name, app_name, user_id, session_id, invocation_id, status,
                   created_at, updated_at)
VALUES (:saga_id, :name, :app_name, :user_id, :session_id, :invocation_id, 'RUNNING',
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0)
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

-- name: saga_step_pending
-- Before the outside call: the step may now have happened, so it is on record.
INSERT INTO saga_steps (saga_id, step, status, action_key, comp_key, created_at, updated_at)
VALUES (:saga_id, :step, 'PENDING', :action_key, :comp_key,
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (saga_id, step) DO NOTHING;
UPDATE sagas SET updated_at = (julianday('now') - 2440587.5) * 86400.0 WHERE saga_id = :saga_id;

-- name: saga_step_done
-- After the outside call, before the event: what the compensator will need.
UPDATE saga_steps
   SET status = 'DONE', record = :record, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE saga_id = :saga_id AND step = :step AND status IN ('PENDING', 'DONE');
UPDATE sagas SET updated_at = (julianday('now') - 2440587.5) * 86400.0 WHERE saga_id = :saga_id;

-- name: saga_step_undone
-- The step's compensation ended: COMPENSATED, or COMPENSATION_FAILED with the error.
UPDATE saga_steps
   SET status = :status, attempts = attempts + :attempts, last_error = :error,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE saga_id = :saga_id AND step = :step AND status <> 'COMPENSATED';
UPDATE sagas SET updated_at = (julianday('now') - 2440587.5) * 86400.0 WHERE saga_id = :saga_id;

-- name: saga_compensating
UPDATE sagas
   SET status = 'COMPENSATING', reason = COALESCE(reason, :reason),
       failed_at = COALESCE(failed_at, (julianday('now') - 2440587.5) * 86400.0),
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE saga_id = :saga_id AND status IN ('RUNNING', 'COMPENSATING')
RETURNING *;

-- name: saga_finish
UPDATE sagas
   SET status = :status, reason = COALESCE(:reason, reason), owner = NULL,
       finished_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE saga_id = :saga_id AND status IN ('RUNNING', 'COMPENSATING')
RETURNING *;

-- name: saga_claim_stuck
-- Sagas of one name and app with no final status, quiet for :timeout seconds,
-- whose run (if any) is not live or waiting on a long-running call (PAUSED),
-- and that no other sweeper holds.
UPDATE sagas
   SET owner = :owner, lease_until = (julianday('now') - 2440587.5) * 86400.0 + :lease,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE saga_id IN (
        SELECT s.saga_id FROM sagas s
         WHERE s.status IN ('RUNNING', 'COMPENSATING')
           AND s.name = :name AND s.app_name = :app_name
           AND s.updated_at < (julianday('now') - 2440587.5) * 86400.0 - :timeout
           AND s.lease_until < (julianday('now') - 2440587.5) * 86400.0
           AND NOT EXISTS (SELECT 1 FROM runs r
                            WHERE r.invocation_id = s.invocation_id
                              AND r.status IN ('RUNNING', 'QUEUED', 'PAUSED'))
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

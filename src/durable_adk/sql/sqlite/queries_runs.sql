-- Run ledger queries for SQLite (same names in the other dialect).

-- ---------------------------------------------------------------- run ledger
-- Times come from the database clock. A claim bumps 'epoch' (the fencing
-- token) and 'attempts', and sets the earliest next recovery:
-- next_attempt_at = now + lease + backoff * 2^(attempts before this claim).

-- name: run_submit inline intake
-- A run continuing an invocation (a resume, an answer) keeps the app version
-- of the invocation's newest run, whoever submits it; a new invocation takes
-- the submitting worker's.
INSERT INTO runs (run_id, app_name, user_id, session_id, invocation_id, request, status,
                  owner, lease_until, created_at, updated_at, app_version, app_fingerprint)
SELECT :run_id, :app_name, :user_id, :session_id, :invocation_id, :request, 'QUEUED',
       :owner, (julianday('now') - 2440587.5) * 86400.0 + :lease,
       (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0,
       CASE WHEN prev.pk IS NULL THEN :app_version ELSE prev.app_version END,
       CASE WHEN prev.pk IS NULL THEN :app_fingerprint ELSE prev.app_fingerprint END
  FROM (SELECT 1) AS one
  LEFT JOIN (SELECT pk, app_version, app_fingerprint FROM runs
              WHERE app_name = :app_name AND invocation_id = :invocation_id
              ORDER BY pk DESC LIMIT 1) AS prev ON 1 = 1
RETURNING *;

-- name: run_submit_answer inline intake
-- A run carrying answers to paused calls, in one unit: a claim per pause it
-- answers (:claims, JSON [[call_id, ask], ...]), then the run. A claim already
-- taken fails the unit on the claims' key: nothing is written.
INSERT INTO answer_claims (app_name, user_id, session_id, invocation_id, call_id, ask, run_id,
                           created_at)
SELECT :app_name, :user_id, :session_id, :invocation_id, json_extract(c.value, '$[0]'),
       json_extract(c.value, '$[1]'), :run_id, (julianday('now') - 2440587.5) * 86400.0
  FROM json_each(:claims) AS c;
INSERT INTO runs (run_id, app_name, user_id, session_id, invocation_id, request, status,
                  owner, lease_until, created_at, updated_at, app_version, app_fingerprint)
SELECT :run_id, :app_name, :user_id, :session_id, :invocation_id, :request, 'QUEUED',
       :owner, (julianday('now') - 2440587.5) * 86400.0 + :lease,
       (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0,
       CASE WHEN prev.pk IS NULL THEN :app_version ELSE prev.app_version END,
       CASE WHEN prev.pk IS NULL THEN :app_fingerprint ELSE prev.app_fingerprint END
  FROM (SELECT 1) AS one
  LEFT JOIN (SELECT pk, app_version, app_fingerprint FROM runs
              WHERE app_name = :app_name AND invocation_id = :invocation_id
              ORDER BY pk DESC LIMIT 1) AS prev ON 1 = 1
RETURNING *;

-- name: answer_claim_of
-- Who holds the claim on one pause: the run carrying its answer, and where it stands.
SELECT c.run_id, r.status
  FROM answer_claims c LEFT JOIN runs r ON r.run_id = c.run_id
 WHERE c.app_name = :app_name AND c.user_id = :user_id AND c.session_id = :session_id
   AND c.invocation_id = :invocation_id AND c.call_id = :call_id AND c.ask = :ask;

-- name: answer_claim_release
-- Frees the claim of a run that ended without delivering its answer (cancelled
-- or failed before the answer was stored), so the pause can be answered again.
DELETE FROM answer_claims
 WHERE app_name = :app_name AND user_id = :user_id AND session_id = :session_id
   AND invocation_id = :invocation_id AND call_id = :call_id AND ask = :ask
   AND run_id = :run_id;

-- name: run_start_busy fragment
-- Whether the session has a run RUNNING or QUEUED (run_start's question, in
-- each column its answer decides).
(SELECT EXISTS (SELECT 1 FROM runs
                 WHERE app_name = :app_name AND user_id = :user_id
                   AND session_id = :session_id AND status IN ('RUNNING', 'QUEUED')))

-- name: run_start inline intake
-- A new run in one unit of work, for the common case: the session row is made if
-- missing, and the run is recorded RUNNING (claimed: epoch 1, attempt 1) when its
-- session has no run RUNNING or QUEUED, else QUEUED behind them. The run goes in
-- first so that changes() in the last statement tells whether the session was
-- made here; the caller then knows its (empty) state without reading it.
-- One row of VALUES, not INSERT ... SELECT: a SELECT that reads the table it
-- inserts into is first copied into a temporary table (SQLite opens one per
-- run of the statement). Each run_start_busy is the same question, asked of
-- the runs as they were before this row (each is evaluated once, before the
-- row goes in).
INSERT INTO runs (run_id, app_name, user_id, session_id, invocation_id, request, status,
                  owner, lease_until, epoch, attempts, next_attempt_at, created_at, updated_at,
                  app_version, app_fingerprint)
VALUES (:run_id, :app_name, :user_id, :session_id, :invocation_id, :request,
        CASE WHEN
-- use: run_start_busy
             THEN 'QUEUED' ELSE 'RUNNING' END,
        :owner, (julianday('now') - 2440587.5) * 86400.0 + :lease,
        CASE WHEN
-- use: run_start_busy
             THEN 0 ELSE 1 END,
        CASE WHEN
-- use: run_start_busy
             THEN 0 ELSE 1 END,
        CASE WHEN
-- use: run_start_busy
             THEN 0 ELSE (julianday('now') - 2440587.5) * 86400.0 + :lease + :backoff END,
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0,
        :app_version, :app_fingerprint);
INSERT INTO sessions (app_name, user_id, session_id, initial_state, create_time, update_time)
VALUES (:app_name, :user_id, :session_id, :initial_state, :now, :now)
ON CONFLICT (app_name, user_id, session_id) DO NOTHING;
SELECT r.*, CASE WHEN changes() > 0 THEN s.pk END AS created_session_pk,
       (SELECT state FROM app_state WHERE app_name = :app_name) AS app_state,
       (SELECT state FROM user_state WHERE app_name = :app_name AND user_id = :user_id) AS user_state
  FROM runs r
  JOIN sessions s ON s.app_name = r.app_name AND s.user_id = r.user_id AND s.session_id = r.session_id
 WHERE r.run_id = :run_id;

-- name: run_claim_queued inline lease claim
-- Starts our own queued run when it heads its session's queue and the session is
-- free, if its app version is one this worker serves (:serves, a JSON array).
UPDATE runs
   SET status = 'RUNNING', epoch = epoch + 1, attempts = attempts + 1,
       lease_until = (julianday('now') - 2440587.5) * 86400.0 + :lease,
       next_attempt_at = (julianday('now') - 2440587.5) * 86400.0 + :lease
                         + :backoff * (1 << MIN(attempts, 20)),
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND status = 'QUEUED' AND owner = :owner
   AND (app_version IS NULL OR app_version IN (SELECT value FROM json_each(:serves)))
   AND NOT EXISTS (SELECT 1 FROM runs r
                    WHERE r.app_name = runs.app_name AND r.user_id = runs.user_id
                      AND r.session_id = runs.session_id AND r.status = 'RUNNING')
   AND NOT EXISTS (SELECT 1 FROM runs r
                    WHERE r.app_name = runs.app_name AND r.user_id = runs.user_id
                      AND r.session_id = runs.session_id AND r.status = 'QUEUED' AND r.pk < runs.pk)
RETURNING *;

-- name: run_renew inline lease
UPDATE runs
   SET lease_until = (julianday('now') - 2440587.5) * 86400.0 + :lease,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND owner = :owner AND epoch = :epoch AND status IN ('QUEUED', 'RUNNING')
RETURNING lease_until, cancel_requested_at, cancel_requested_by;

-- name: run_finish inline
-- A run's end, and with it the inbox of its invocation (:inbox, NULL for most runs:
-- see inbox_at_finish). The epoch is :run_epoch, as in append_events_finish, whose
-- inbox statements these are too.
UPDATE runs
   SET status = :status, last_error = :error, classification = COALESCE(:classification, classification),
       finished_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND owner = :owner AND epoch = :run_epoch AND status = 'RUNNING'
RETURNING status, app_name, user_id, session_id,
          -- whether a run of the session waits its turn (the ledger then wakes it)
          EXISTS (SELECT 1 FROM runs q
                   WHERE q.app_name = runs.app_name AND q.user_id = runs.user_id
                     AND q.session_id = runs.session_id AND q.status = 'QUEUED') AS queued_behind;
-- use: inbox_at_finish

-- name: run_release inline
-- A drive met a transient fault and hands the run back: it stays RUNNING with its
-- lease expired now and its next recovery after a back-off of
-- backoff * 2^(attempts - 1); the sweeper's run_claim_expired then takes it (and
-- counts the attempt; past max_attempts the sweeper parks it).
UPDATE runs
   SET lease_until = (julianday('now') - 2440587.5) * 86400.0,
       next_attempt_at = (julianday('now') - 2440587.5) * 86400.0
                         + :backoff * (1 << MIN(MAX(attempts - 1, 0), 20)),
       last_error = :error,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND owner = :owner AND epoch = :epoch AND status = 'RUNNING'
RETURNING status;

-- name: claim_expired_update fragment
-- The claim of recovery (used by run_claim_expired and run_claim_expired_read,
-- each with its RETURNING): RUNNING rows whose owner stopped renewing, past their
-- back-off, and QUEUED rows whose waiting caller died and whose turn has come.
UPDATE runs
   SET status = 'RUNNING', owner = :owner, epoch = epoch + 1, attempts = attempts + 1,
       lease_until = (julianday('now') - 2440587.5) * 86400.0 + :lease,
       next_attempt_at = (julianday('now') - 2440587.5) * 86400.0 + :lease
                         + :backoff * (1 << MIN(attempts, 20)),
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE pk IN (
        SELECT q.pk FROM runs q
         WHERE q.lease_until < (julianday('now') - 2440587.5) * 86400.0
           AND q.next_attempt_at <= (julianday('now') - 2440587.5) * 86400.0
           AND (:app_name IS NULL OR q.app_name = :app_name)
           AND q.cancel_requested_at IS NULL  -- asked to stop: cancel_expired ends it
           -- only versions this worker serves (NULL: recorded before versions)
           AND (q.app_version IS NULL OR q.app_version IN (SELECT value FROM json_each(:serves)))
           AND (q.status = 'RUNNING'
                OR (q.status = 'QUEUED'
                    AND NOT EXISTS (SELECT 1 FROM runs r
                                     WHERE r.app_name = q.app_name AND r.user_id = q.user_id
                                       AND r.session_id = q.session_id AND r.status = 'RUNNING')
                    AND NOT EXISTS (SELECT 1 FROM runs r
                                     WHERE r.app_name = q.app_name AND r.user_id = q.user_id
                                       AND r.session_id = q.session_id AND r.status = 'QUEUED'
                                       AND r.pk < q.pk)))
         ORDER BY q.pk
         LIMIT :limit)

-- name: run_claim_expired lease claim
-- Recovery: RUNNING rows whose owner stopped renewing, past their back-off,
-- and QUEUED rows whose waiting caller died and whose turn has come.
-- use: claim_expired_update
RETURNING *;

-- name: run_claim_expired_read lease claim
-- run_claim_expired, and in the same statement each claimed run's session as
-- load_session_tail reads it from its first event: the recovery classifies from
-- it and ADK's re-drive is served from it (docs/runs.md, "Recovery"). One
-- statement in a transaction that holds the write lock: no append commits
-- between the claim and the read, so the read is always settled (see the
-- PostgreSQL file for when it is not). session_log is JSON text, so no sealed
-- value of it is opened by the store:
-- {"initial_state", "app_state", "user_state", "events": [[seq, data], ...]}.
-- use: claim_expired_update
RETURNING *,
       (SELECT s.pk FROM sessions s
         WHERE s.app_name = runs.app_name AND s.user_id = runs.user_id
           AND s.session_id = runs.session_id AND s.purging_at IS NULL) AS session_pk,
       (SELECT s.last_seq FROM sessions s
         WHERE s.app_name = runs.app_name AND s.user_id = runs.user_id
           AND s.session_id = runs.session_id AND s.purging_at IS NULL) AS session_last_seq,
       (SELECT s.update_time FROM sessions s
         WHERE s.app_name = runs.app_name AND s.user_id = runs.user_id
           AND s.session_id = runs.session_id AND s.purging_at IS NULL) AS session_update_time,
       (SELECT s.repairs FROM sessions s
         WHERE s.app_name = runs.app_name AND s.user_id = runs.user_id
           AND s.session_id = runs.session_id AND s.purging_at IS NULL) AS session_repairs,
       1 AS session_settled,
       (SELECT json_object(
                 'initial_state', s.initial_state,
                 'app_state', (SELECT state FROM app_state WHERE app_name = runs.app_name),
                 'user_state', (SELECT state FROM user_state
                                 WHERE app_name = runs.app_name AND user_id = runs.user_id),
                 -- json(): a subquery's array would be embedded as a string
                 'events', json((SELECT json_group_array(json_array(e.seq, e.data))
                                   FROM events e WHERE e.session_pk = s.pk)))
          FROM sessions s
         WHERE s.app_name = runs.app_name AND s.user_id = runs.user_id
           AND s.session_id = runs.session_id AND s.purging_at IS NULL) AS session_log;

-- name: run_park guarded
SELECT CASE WHEN EXISTS (SELECT 1 FROM runs WHERE run_id = :run_id AND owner = :owner
                           AND epoch = :epoch AND status = 'RUNNING')
            THEN 'ok' ELSE 'fenced' END AS status;
UPDATE runs
   SET status = 'PARKED', last_error = :error, classification = :classification,
       finished_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id;
INSERT INTO dead_letters (kind, run_id, request, classification, last_events, error, created_at)
SELECT 'run', run_id, request, :classification, :last_events, :error,
       (julianday('now') - 2440587.5) * 86400.0
  FROM runs WHERE run_id = :run_id;
SELECT 'ok' AS status;

-- name: run_retry
-- An operator tries a parked or failed run again: it re-enters its session's
-- queue with an expired lease and fresh attempts, so the next sweep recovers it.
-- A run that is neither PARKED nor FAILED, or was abandoned (final), is left as it is
-- (calling twice is harmless).
UPDATE runs
   SET status = 'QUEUED', owner = NULL, attempts = 0, next_attempt_at = 0,
       lease_until = 0, last_error = NULL, finished_at = NULL,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND status IN ('PARKED', 'FAILED')
  AND NOT EXISTS (SELECT 1 FROM operator_actions a WHERE a.run_id = :run_id AND a.action = 'abandon')
RETURNING *;

-- name: run_get
SELECT * FROM runs WHERE run_id = :run_id;

-- name: run_list
SELECT * FROM runs
 WHERE (:status IS NULL OR status = :status)
 ORDER BY pk DESC LIMIT :limit;

-- name: run_backdate
-- Moves a run's lease and back-off into the past: how tests (and an operator
-- who knows a worker is gone) expire a lease without waiting.
UPDATE runs
   SET lease_until = lease_until - :seconds, next_attempt_at = next_attempt_at - :seconds
 WHERE run_id = :run_id
RETURNING lease_until;

-- name: dead_letter_list
SELECT * FROM dead_letters
 WHERE (:run_id IS NULL OR run_id = :run_id)
 ORDER BY pk DESC LIMIT :limit;

-- ------------------------------------------------------- operator control
-- What people do to runs (issue 14). Each action changes the run and writes
-- its line in operator_actions in one unit of work, so the audit trail holds
-- every change made and nothing else. A refused action changes nothing.

-- name: run_cancel guarded
-- Cancels a run: QUEUED, PAUSED and PARKED runs, and RUNNING runs whose owner
-- stopped renewing, become CANCELLED at once; a RUNNING run with a live lease
-- gets cancel_requested_at, and its owner stops at its next heartbeat. A run
-- already ended, or already asked, is left as it is ('unchanged').
SELECT CASE WHEN EXISTS (SELECT 1 FROM runs WHERE run_id = :run_id
                           AND (status IN ('QUEUED', 'PAUSED', 'PARKED')
                                OR (status = 'RUNNING' AND cancel_requested_at IS NULL)))
            THEN 'ok' ELSE 'unchanged' END AS status;
INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                              status_after, epoch, detail, created_at)
SELECT run_id, app_name, 'cancel', :actor, :reason, status,
       CASE WHEN status = 'RUNNING' AND lease_until >= (julianday('now') - 2440587.5) * 86400.0
            THEN 'RUNNING' ELSE 'CANCELLED' END,
       epoch,
       CASE WHEN status = 'RUNNING' AND lease_until >= (julianday('now') - 2440587.5) * 86400.0
            THEN '{"outcome": "requested"}' ELSE '{"outcome": "cancelled"}' END,
       (julianday('now') - 2440587.5) * 86400.0
  FROM runs WHERE run_id = :run_id;
UPDATE runs
   SET status = (SELECT status_after FROM operator_actions WHERE pk = last_insert_rowid()),
       cancel_requested_at = (julianday('now') - 2440587.5) * 86400.0,
       cancel_requested_by = :actor,
       last_error = CASE WHEN (SELECT status_after FROM operator_actions
                                WHERE pk = last_insert_rowid()) = 'CANCELLED'
                         THEN 'cancelled by ' || :actor || COALESCE(': ' || :reason, '')
                         ELSE last_error END,
       finished_at = CASE WHEN (SELECT status_after FROM operator_actions
                                 WHERE pk = last_insert_rowid()) = 'CANCELLED'
                          THEN (julianday('now') - 2440587.5) * 86400.0 ELSE finished_at END,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id;
SELECT * FROM runs WHERE run_id = :run_id;

-- name: run_cancel_requested
-- The owner's check at each heartbeat: has an operator asked it to stop?
SELECT cancel_requested_at, cancel_requested_by FROM runs
 WHERE run_id = :run_id AND owner = :owner AND epoch = :epoch AND status = 'RUNNING';

-- name: run_finish_cancelled inline
-- The owner stopped a run whose cancellation was asked for.
UPDATE runs
   SET status = 'CANCELLED',
       last_error = 'cancelled by ' || COALESCE(cancel_requested_by, 'an operator'),
       finished_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND owner = :owner AND epoch = :epoch AND status = 'RUNNING'
RETURNING status;

-- name: run_cancel_expired
-- Recovery's side of a cancel: a RUNNING run asked to stop whose owner died
-- (its lease ran out) is CANCELLED, never re-driven.
UPDATE runs
   SET status = 'CANCELLED',
       last_error = 'cancelled by ' || COALESCE(cancel_requested_by, 'an operator'),
       finished_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE status = 'RUNNING' AND cancel_requested_at IS NOT NULL
   AND lease_until < (julianday('now') - 2440587.5) * 86400.0
   AND (:app_name IS NULL OR app_name = :app_name)
RETURNING run_id;

-- name: run_operator_claim
-- An operator takes a PARKED or FAILED run (as it was read, at :epoch; never
-- an abandoned one) to write for it: RUNNING, held by the operator, a new epoch. Unique violation
-- when another run of the session is RUNNING.
UPDATE runs
   SET status = 'RUNNING', owner = :owner, epoch = epoch + 1,
       lease_until = (julianday('now') - 2440587.5) * 86400.0 + :lease,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND epoch = :epoch AND status IN ('PARKED', 'FAILED')
   AND NOT EXISTS (SELECT 1 FROM operator_actions a
                    WHERE a.run_id = :run_id AND a.action = 'abandon')
RETURNING *;

-- name: run_operator_release
-- An operator's claim given back unchanged (the resolution could not be written).
UPDATE runs
   SET status = :status, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND owner = :owner AND epoch = :epoch AND status = 'RUNNING'
RETURNING *;

-- name: run_operator_requeue guarded
-- After a resolution was written: the run goes back in its session's queue
-- (expired lease, fresh attempts) for the next sweep to drive on, and the
-- action is recorded.
SELECT CASE WHEN EXISTS (SELECT 1 FROM runs WHERE run_id = :run_id AND owner = :owner
                           AND epoch = :epoch AND status = 'RUNNING')
            THEN 'ok' ELSE 'fenced' END AS status;
INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                              status_after, epoch, detail, created_at)
SELECT run_id, app_name, :action, :actor, :reason, :status_before, 'QUEUED', epoch, :detail,
       (julianday('now') - 2440587.5) * 86400.0
  FROM runs WHERE run_id = :run_id;
UPDATE runs
   SET status = 'QUEUED', owner = NULL, attempts = 0, next_attempt_at = 0,
       lease_until = 0, last_error = NULL, finished_at = NULL,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id;
SELECT * FROM runs WHERE run_id = :run_id;

-- name: run_abandon guarded
-- An operator closes a PARKED run (or a FAILED one not yet abandoned) as
-- FAILED with their reason; the error it had is kept in the action's detail.
SELECT CASE WHEN EXISTS (SELECT 1 FROM runs WHERE run_id = :run_id
                           AND (status = 'PARKED'
                                OR (status = 'FAILED'
                                    AND NOT EXISTS (SELECT 1 FROM operator_actions a
                                                     WHERE a.run_id = :run_id
                                                       AND a.action = 'abandon'))))
            THEN 'ok' ELSE 'unchanged' END AS status;
INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                              status_after, epoch, detail, created_at)
SELECT run_id, app_name, 'abandon', :actor, :reason, status, 'FAILED', epoch,
       json_object('previous_error', last_error), (julianday('now') - 2440587.5) * 86400.0
  FROM runs WHERE run_id = :run_id;
UPDATE runs
   SET status = 'FAILED', last_error = 'abandoned by ' || :actor || ': ' || :reason,
       abandoned_at = (julianday('now') - 2440587.5) * 86400.0,
       finished_at = COALESCE(finished_at, (julianday('now') - 2440587.5) * 86400.0),
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id;
SELECT * FROM runs WHERE run_id = :run_id;

-- name: run_retry_recorded guarded
-- run_retry with its line in the audit trail: a PARKED or FAILED run re-enters
-- its session's queue; any other run is left as it is.
SELECT CASE WHEN EXISTS (SELECT 1 FROM runs WHERE run_id = :run_id
                                              AND status IN ('PARKED', 'FAILED')
                                              AND NOT EXISTS (SELECT 1 FROM operator_actions a WHERE a.run_id = :run_id AND a.action = 'abandon'))
            THEN 'ok' ELSE 'unchanged' END AS status;
INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                              status_after, epoch, detail, created_at)
SELECT run_id, app_name, 'retry', :actor, :reason, status, 'QUEUED', epoch,
       json_object('previous_error', last_error), (julianday('now') - 2440587.5) * 86400.0
  FROM runs WHERE run_id = :run_id;
UPDATE runs
   SET status = 'QUEUED', owner = NULL, attempts = 0, next_attempt_at = 0,
       lease_until = 0, last_error = NULL, finished_at = NULL,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id;
SELECT * FROM runs WHERE run_id = :run_id;

-- name: operator_action_record
-- An action that changed no run row itself (an answer given through the
-- session, say), written against the run's current row.
INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                              status_after, epoch, detail, created_at)
SELECT run_id, app_name, :action, :actor, :reason, status, status, epoch, :detail,
       (julianday('now') - 2440587.5) * 86400.0
  FROM runs WHERE run_id = :run_id
RETURNING *;

-- name: operator_action_list
SELECT * FROM operator_actions
 WHERE (:run_id IS NULL OR run_id = :run_id)
   AND (:app_name IS NULL OR app_name = :app_name)
 ORDER BY pk DESC LIMIT :limit;

-- name: run_list_of_app
SELECT * FROM runs
 WHERE (:status IS NULL OR status = :status)
   AND (:app_name IS NULL OR app_name = :app_name)
 ORDER BY pk DESC LIMIT :limit;

-- name: dead_letter_list_of_app
SELECT d.* FROM dead_letters d
 WHERE (:run_id IS NULL OR d.run_id = :run_id)
   AND (:app_name IS NULL
        OR EXISTS (SELECT 1 FROM runs r WHERE r.run_id = d.run_id AND r.app_name = :app_name))
 ORDER BY d.pk DESC LIMIT :limit;

-- name: run_renew_many inline lease
-- One worker's heartbeat: renews every lease it holds in one statement, whatever
-- their number. :leases is a JSON object {run_id: epoch}; a run missing from the
-- result is no longer ours (taken over or ended). The first IN finds the rows by
-- run_id's index, the second checks the epoch of each (SQLite builds each IN's
-- list once).
UPDATE runs
   SET lease_until = (julianday('now') - 2440587.5) * 86400.0 + :lease,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id IN (SELECT key FROM json_each(:leases))
   AND (run_id, epoch) IN (SELECT key, value FROM json_each(:leases))
   AND owner = :owner AND status IN ('QUEUED', 'RUNNING')
RETURNING run_id, epoch, cancel_requested_at, cancel_requested_by;

-- name: run_renew_owned inline lease
-- The lease watchdog's renewal while the event loop is blocked: every live lease
-- the worker holds, whether its keeper knows it or not. A claim that committed
-- but whose answer waits for the loop leases a run no keeper holds yet; this keeps
-- it, and the keeper credits the renewal when it takes the lease. Only leases not
-- yet expired: a run handed back (its lease ended at once) stays handed back.
-- Found through runs_by_lease: the live leases are the runs in flight.
UPDATE runs
   SET lease_until = (julianday('now') - 2440587.5) * 86400.0 + :lease,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE status IN ('QUEUED', 'RUNNING')
   AND lease_until > (julianday('now') - 2440587.5) * 86400.0
   AND owner = :owner
RETURNING run_id, epoch, cancel_requested_at, cancel_requested_by;

-- name: turn_notify
-- PostgreSQL's cross-process wake-up; SQLite wakes waiting runs in-process (the
-- store's notifier) and by polling at a back-off across processes, so this is
-- never sent. Kept so both dialects hold the same names.
SELECT :session AS session;

-- name: run_invocation_cancelled
-- Whether the invocation was cancelled: a run of it that drove it, or paused
-- or parked on it, was cancelled (a QUEUED answer run cancelled before it
-- drove leaves the invocation open). Its run id and who cancelled it.
SELECT r.run_id, COALESCE(r.cancel_requested_by, 'an operator') AS cancelled_by
  FROM runs r
 WHERE r.invocation_id = :invocation_id AND r.app_name = :app_name
   AND r.user_id = :user_id AND r.session_id = :session_id AND r.status = 'CANCELLED'
   AND EXISTS (SELECT 1 FROM operator_actions a
                WHERE a.run_id = r.run_id AND a.action = 'cancel'
                  AND a.status_before <> 'QUEUED')
 LIMIT 1;

-- name: run_cancel_paused_of_invocation
-- The invocation was cancelled: the runs that paused on it are CANCELLED too.
UPDATE runs
   SET status = 'CANCELLED', last_error = :reason,
       finished_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE app_name = :app_name AND user_id = :user_id AND session_id = :session_id
   AND invocation_id = :invocation_id AND status IN ('PAUSED', 'QUEUED') AND run_id <> :run_id
RETURNING run_id;

-- name: run_park_paused_of_invocation
-- A continuation of the invocation was parked for drift before it acted (the
-- code of this worker lacks what the invocation's log refers to): the runs
-- that paused on it end PARKED with it, naming it, so none is left PAUSED with
-- its answer taken. The continuation's dead letter is the one record to act on.
UPDATE runs
   SET status = 'PARKED', last_error = :reason, classification = 'CONTINUATION_PARKED',
       finished_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE app_name = :app_name AND user_id = :user_id AND session_id = :session_id
   AND invocation_id = :invocation_id AND status = 'PAUSED' AND run_id <> :run_id
RETURNING run_id;

-- name: run_version_of_invocation
-- The version an invocation's continuations are recorded under: its newest
-- run's (run_submit_answer takes the same), so a worker can tell a caller
-- whose answer waits for a worker of another version.
SELECT app_version FROM runs
 WHERE app_name = :app_name AND invocation_id = :invocation_id
 ORDER BY pk DESC LIMIT 1;

-- name: answer_claims_release_of_run
-- Gives back every answer claim of a run that ended without storing its answer.
DELETE FROM answer_claims WHERE run_id = :run_id;

-- name: run_request_cancel_of_invocation
-- The invocation was cancelled: a continuation of it still RUNNING is asked to
-- stop (its owner sees the request at its next heartbeat, as an operator's).
UPDATE runs
   SET cancel_requested_at = (julianday('now') - 2440587.5) * 86400.0,
       cancel_requested_by = :by,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE app_name = :app_name AND user_id = :user_id AND session_id = :session_id
   AND invocation_id = :invocation_id AND status = 'RUNNING' AND run_id <> :run_id
   AND cancel_requested_at IS NULL
RETURNING run_id;

-- name: run_hand_over inline
-- A queued run this worker submitted but does not serve (a continuation of an
-- invocation of another app version): its lease ends now, so the recovery of
-- a worker of its version takes it when its turn comes. Ended a millisecond
-- back: the clock's resolution, so a claim in the same millisecond (which
-- wants lease_until < now) takes it too.
UPDATE runs
   SET lease_until = (julianday('now') - 2440587.5) * 86400.0 - 0.001,
       next_attempt_at = (julianday('now') - 2440587.5) * 86400.0 - 0.001,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND owner = :owner AND epoch = :epoch AND status = 'QUEUED'
RETURNING *;

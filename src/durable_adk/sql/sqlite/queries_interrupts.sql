-- The interrupts inbox (issue 14): the human-input and long-running calls runs
-- paused on, indexed when a run pauses, answered at most once.

-- name: interrupt_open
-- Indexes an open call of a paused invocation; a call already indexed is left as it is,
-- but for its kind (an open row indexed before a kind rule changed takes the new kind).
INSERT INTO interrupts (call_id, app_name, user_id, session_id, invocation_id, run_id, kind,
                        name, args, status, deadline_at, created_at, app_version,
                        app_fingerprint)
VALUES (:call_id, :app_name, :user_id, :session_id, :invocation_id, :run_id, :kind, :name,
        :args, 'OPEN',
        CASE WHEN :deadline IS NULL THEN NULL
             ELSE (julianday('now') - 2440587.5) * 86400.0 + :deadline END,
        (julianday('now') - 2440587.5) * 86400.0,
        (SELECT r.app_version FROM runs r WHERE r.run_id = :run_id ORDER BY r.pk DESC LIMIT 1),
        (SELECT r.app_fingerprint FROM runs r WHERE r.run_id = :run_id ORDER BY r.pk DESC LIMIT 1))
ON CONFLICT (app_name, user_id, session_id, invocation_id, call_id) DO UPDATE
   SET kind = excluded.kind
 WHERE interrupts.status = 'OPEN' AND interrupts.kind <> excluded.kind;

-- name: inbox_at_finish fragment
-- The inbox of a run's invocation, brought in line with its session in the unit
-- that finishes the run (run_finish, append_events_finish), so that a run is never
-- PAUSED without its open calls in the inbox, nor DONE with its pause still open.
-- :inbox (NULL for a run whose invocation made no call that waits on a person) is
-- JSON: the invocation's keys, done (1: the run ended it DONE, so the runs that
-- paused on it end DONE too, and those parked with a continuation parked for
-- drift: CONTINUATION_PARKED), pending (the ids of its calls still open) and open
-- (those calls to index: call_id, kind, name, args as JSON text, deadline in
-- seconds or null). An indexed call the session shows answered leaves the inbox;
-- one already indexed stays as it is, but for its kind (interrupt_open). Each
-- statement comes after the finish and writes only when the finish was written.
-- skip when :inbox IS NULL
UPDATE runs
   SET status = 'DONE', finished_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE :inbox IS NOT NULL AND app_name = json_extract(:inbox, '$.app_name')
   AND user_id = json_extract(:inbox, '$.user_id')
   AND session_id = json_extract(:inbox, '$.session_id')
   AND invocation_id = json_extract(:inbox, '$.invocation_id')
   AND (status = 'PAUSED' OR (status = 'PARKED' AND classification = 'CONTINUATION_PARKED'))
   AND run_id <> :run_id AND json_extract(:inbox, '$.done') = 1
   AND EXISTS (SELECT 1 FROM runs f WHERE f.run_id = :run_id AND f.owner = :owner
                                      AND f.epoch = :run_epoch AND f.status = :status);
-- skip when :inbox IS NULL
INSERT INTO interrupts (call_id, app_name, user_id, session_id, invocation_id, run_id, kind,
                        name, args, status, deadline_at, created_at, app_version,
                        app_fingerprint)
SELECT json_extract(o.value, '$.call_id'), json_extract(:inbox, '$.app_name'),
       json_extract(:inbox, '$.user_id'), json_extract(:inbox, '$.session_id'),
       json_extract(:inbox, '$.invocation_id'), :run_id, json_extract(o.value, '$.kind'),
       json_extract(o.value, '$.name'), json_extract(o.value, '$.args'), 'OPEN',
       (julianday('now') - 2440587.5) * 86400.0 + json_extract(o.value, '$.deadline'),
       (julianday('now') - 2440587.5) * 86400.0,
       (SELECT r.app_version FROM runs r WHERE r.run_id = :run_id ORDER BY r.pk DESC LIMIT 1),
       (SELECT r.app_fingerprint FROM runs r WHERE r.run_id = :run_id ORDER BY r.pk DESC LIMIT 1)
  FROM json_each(:inbox, '$.open') AS o
 WHERE :inbox IS NOT NULL AND EXISTS (SELECT 1 FROM runs f WHERE f.run_id = :run_id AND f.owner = :owner
                                      AND f.epoch = :run_epoch AND f.status = :status)
ON CONFLICT (app_name, user_id, session_id, invocation_id, call_id) DO UPDATE
   SET kind = excluded.kind
 WHERE interrupts.status = 'OPEN' AND interrupts.kind <> excluded.kind;
-- skip when :inbox IS NULL
UPDATE interrupts
   SET status = 'ANSWERED', answered_by = COALESCE(answered_by, 'session'),
       answered_at = COALESCE(answered_at, (julianday('now') - 2440587.5) * 86400.0)
 WHERE :inbox IS NOT NULL AND app_name = json_extract(:inbox, '$.app_name')
   AND user_id = json_extract(:inbox, '$.user_id')
   AND session_id = json_extract(:inbox, '$.session_id')
   AND invocation_id = json_extract(:inbox, '$.invocation_id')
   AND status = 'OPEN'
   AND call_id NOT IN (SELECT value FROM json_each(:inbox, '$.pending'))
   AND EXISTS (SELECT 1 FROM runs f WHERE f.run_id = :run_id AND f.owner = :owner
                                      AND f.epoch = :run_epoch AND f.status = :status);

-- name: interrupt_list
SELECT * FROM interrupts
 WHERE (:status IS NULL OR status = :status)
   AND (:app_name IS NULL OR app_name = :app_name)
   AND (:session_id IS NULL OR session_id = :session_id)
   AND (:kind IS NULL OR kind = :kind)
 ORDER BY pk LIMIT :limit;

-- name: interrupt_by_call
SELECT *, (julianday('now') - 2440587.5) * 86400.0 AS db_now FROM interrupts
 WHERE call_id = :call_id
   AND (:app_name IS NULL OR app_name = :app_name)
   AND (:session_id IS NULL OR session_id = :session_id)
 ORDER BY pk DESC LIMIT 50;

-- name: interrupt_settle
-- A call the session shows answered (by any path) leaves the inbox.
UPDATE interrupts
   SET status = 'ANSWERED', answered_by = COALESCE(answered_by, 'session'),
       answered_at = COALESCE(answered_at, (julianday('now') - 2440587.5) * 86400.0)
 WHERE pk = :pk AND status = 'OPEN';

-- name: interrupt_close_of_run
-- The run that paused on them was cancelled: its open calls leave the inbox.
UPDATE interrupts SET status = 'CLOSED', answered_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND status = 'OPEN';

-- name: interrupt_due
SELECT * FROM interrupts
 WHERE status = 'OPEN' AND deadline_at IS NOT NULL
   AND deadline_at <= (julianday('now') - 2440587.5) * 86400.0
   AND (:app_name IS NULL OR app_name = :app_name)
 ORDER BY deadline_at LIMIT :limit;

-- name: interrupt_answer guarded
-- Answers one OPEN interrupt, exactly once: the interrupt is marked (ANSWERED
-- by a person before its deadline; EXPIRED by the deadline sweeper after it),
-- a run carrying the answer goes in the session's queue, and the answer is
-- recorded in the audit trail of the run that paused, all in one unit. The
-- pause's answer claim (answer_claims) is taken too: an answer sent through the
-- run API at the same instant fails the unit on the claims' key.
SELECT CASE WHEN EXISTS (
         SELECT 1 FROM interrupts
          WHERE pk = :pk AND status = 'OPEN'
            AND CASE WHEN :by_deadline = 1
                     THEN deadline_at <= (julianday('now') - 2440587.5) * 86400.0
                     ELSE deadline_at IS NULL
                          OR deadline_at > (julianday('now') - 2440587.5) * 86400.0 END)
       THEN 'ok' ELSE 'refused' END AS status;
UPDATE interrupts
   SET status = CASE WHEN :by_deadline = 1 THEN 'EXPIRED' ELSE 'ANSWERED' END,
       answered_by = :actor, answer = :answer, answer_run_id = :new_run_id,
       answered_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE pk = :pk;
-- The answer's run takes its invocation's version (the newest run's: a moved
-- run's continuation keeps the version it was moved to) and fingerprint, so it
-- is claimed, handed over and checked for drift as its invocation is.
INSERT INTO runs (run_id, app_name, user_id, session_id, invocation_id, request, status,
                  owner, lease_until, created_at, updated_at, app_version, app_fingerprint)
SELECT :new_run_id, i.app_name, i.user_id, i.session_id, i.invocation_id, :request, 'QUEUED',
       :owner, (julianday('now') - 2440587.5) * 86400.0 + :lease,
       (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0,
       prev.app_version, prev.app_fingerprint
  FROM interrupts i
  LEFT JOIN (SELECT app_version, app_fingerprint FROM runs
              WHERE invocation_id = (SELECT invocation_id FROM interrupts WHERE pk = :pk)
                AND app_name = (SELECT app_name FROM interrupts WHERE pk = :pk)
              ORDER BY pk DESC LIMIT 1) prev ON 1 = 1
 WHERE i.pk = :pk;
INSERT INTO answer_claims (app_name, user_id, session_id, invocation_id, call_id, ask, run_id,
                           created_at)
SELECT app_name, user_id, session_id, invocation_id, call_id, :ask, :new_run_id,
       (julianday('now') - 2440587.5) * 86400.0
  FROM interrupts WHERE pk = :pk;
INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                              status_after, epoch, detail, created_at)
SELECT run_id, app_name, 'answer', :actor, :reason, status, status, epoch, :detail,
       (julianday('now') - 2440587.5) * 86400.0
  FROM runs WHERE run_id = (SELECT run_id FROM interrupts WHERE pk = :pk);
SELECT * FROM runs WHERE run_id = :new_run_id;

-- name: interrupt_backdate
-- Moves an interrupt's deadline into the past (tests, operators).
UPDATE interrupts SET deadline_at = (julianday('now') - 2440587.5) * 86400.0 - :seconds
 WHERE call_id = :call_id AND status = 'OPEN';

-- name: interrupt_close_of_invocation
-- The invocation was cancelled: every open call of it leaves the inbox,
-- whichever of its runs paused on it.
UPDATE interrupts SET status = 'CLOSED', answered_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE app_name = :app_name AND user_id = :user_id AND session_id = :session_id
   AND invocation_id = :invocation_id AND status = 'OPEN';

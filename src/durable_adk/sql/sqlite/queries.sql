-- Named queries for SQLite. The same names exist in ../postgresql/queries.sql.
-- Parameters are :name. A 'guarded' unit's first statement decides (status = 'ok')
-- whether the rest run; see durable_adk/store/queries.py.

-- name: db_now
SELECT (julianday('now') - 2440587.5) * 86400.0 AS now;

-- ---------------------------------------------------------------- sessions

-- name: create_session guarded
SELECT CASE WHEN EXISTS (
           SELECT 1 FROM sessions
            WHERE app_name = :app_name AND user_id = :user_id AND session_id = :session_id)
       THEN 'exists' ELSE 'ok' END AS status;
INSERT INTO sessions (app_name, user_id, session_id, initial_state, create_time, update_time)
VALUES (:app_name, :user_id, :session_id, :initial_state, :now, :now);
INSERT INTO app_state (app_name, state, update_time)
SELECT :app_name, :app_delta, :now WHERE :app_delta IS NOT NULL
ON CONFLICT (app_name) DO UPDATE
   SET state = dadk_merge(app_state.state, excluded.state), update_time = excluded.update_time;
INSERT INTO user_state (app_name, user_id, state, update_time)
SELECT :app_name, :user_id, :user_delta, :now WHERE :user_delta IS NOT NULL
ON CONFLICT (app_name, user_id) DO UPDATE
   SET state = dadk_merge(user_state.state, excluded.state), update_time = excluded.update_time;
SELECT 'ok' AS status, s.pk, s.create_time,
       (SELECT state FROM app_state WHERE app_name = :app_name) AS app_state,
       (SELECT state FROM user_state WHERE app_name = :app_name AND user_id = :user_id) AS user_state
  FROM sessions s
 WHERE s.app_name = :app_name AND s.user_id = :user_id AND s.session_id = :session_id;

-- name: load_session_tail
-- The session row, shared state, and every event after :since_seq, in one read.
SELECT s.pk, s.last_seq, s.initial_state, s.update_time,
       (SELECT state FROM app_state WHERE app_name = :app_name) AS app_state,
       (SELECT state FROM user_state WHERE app_name = :app_name AND user_id = :user_id) AS user_state,
       e.seq, e.data
  FROM sessions s
  LEFT JOIN events e ON e.session_pk = s.pk AND e.seq > :since_seq
 WHERE s.app_name = :app_name AND s.user_id = :user_id AND s.session_id = :session_id
 ORDER BY e.seq;

-- name: load_session_head
-- The session row, shared state and its newest snapshot (for partial reads).
SELECT s.pk, s.last_seq, s.initial_state, s.update_time,
       (SELECT state FROM app_state WHERE app_name = :app_name) AS app_state,
       (SELECT state FROM user_state WHERE app_name = :app_name AND user_id = :user_id) AS user_state,
       snap.seq AS snap_seq, snap.state AS snap_state
  FROM sessions s
  LEFT JOIN state_snapshots snap
    ON snap.session_pk = s.pk
   AND snap.seq = (SELECT MAX(seq) FROM state_snapshots WHERE session_pk = s.pk)
 WHERE s.app_name = :app_name AND s.user_id = :user_id AND s.session_id = :session_id;

-- name: load_events_partial
-- Events after :from_seq, plus the whole newest invocation, plus events at or
-- after :after_ts (when given). A UNION of three indexed reads: one OR-ed
-- condition would make SQLite scan the whole session.
SELECT seq, data FROM events WHERE session_pk = :session_pk AND seq > :from_seq
UNION
SELECT seq, data FROM events INDEXED BY events_by_invocation
 WHERE session_pk = :session_pk
   AND invocation_id = (SELECT invocation_id FROM events
                         WHERE session_pk = :session_pk ORDER BY seq DESC LIMIT 1)
UNION
SELECT seq, data FROM events
 WHERE session_pk = :session_pk AND :after_ts IS NOT NULL AND timestamp >= :after_ts
ORDER BY seq;

-- name: load_deltas_after
SELECT seq, delta FROM events
 WHERE session_pk = :session_pk AND seq > :after_seq AND seq <= :upto_seq AND delta IS NOT NULL
 ORDER BY seq;

-- name: load_snapshots
SELECT seq, state FROM state_snapshots WHERE session_pk = :session_pk ORDER BY seq;

-- name: find_event_seq
SELECT s.pk, s.last_seq, e.seq
  FROM sessions s
  LEFT JOIN events e ON e.session_pk = s.pk AND e.event_id = :event_id
 WHERE s.app_name = :app_name AND s.user_id = :user_id AND s.session_id = :session_id;

-- name: append_event guarded
-- The fence: the caller names the last sequence number it saw. Anything else
-- (a newer append by someone, a deleted session, a replayed event id) writes
-- nothing. An event written for a run also names the run's epoch: a worker
-- whose run was taken over (or finished) is 'fenced' and writes nothing.
SELECT CASE
         WHEN s.pk IS NULL THEN 'missing'
         WHEN d.seq IS NOT NULL THEN 'duplicate'
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING') THEN 'fenced'
         WHEN s.last_seq <> :expected_seq THEN 'stale'
         ELSE 'ok'
       END AS status,
       d.seq AS dup_seq, s.last_seq AS last_seq
  FROM (SELECT 1) AS one
  LEFT JOIN sessions s ON s.pk = :session_pk
  LEFT JOIN events d ON d.session_pk = :session_pk AND d.event_id = :event_id;
INSERT INTO events (session_pk, seq, event_id, invocation_id, author, timestamp, delta, data)
VALUES (:session_pk, :expected_seq + 1, :event_id, :invocation_id, :author, :timestamp, :delta, :data);
UPDATE sessions SET last_seq = :expected_seq + 1, update_time = :timestamp WHERE pk = :session_pk;
INSERT INTO app_state (app_name, state, update_time)
SELECT :app_name, :app_delta, :timestamp WHERE :app_delta IS NOT NULL
ON CONFLICT (app_name) DO UPDATE
   SET state = dadk_merge(app_state.state, excluded.state), update_time = excluded.update_time;
INSERT INTO user_state (app_name, user_id, state, update_time)
SELECT :app_name, :user_id, :user_delta, :timestamp WHERE :user_delta IS NOT NULL
ON CONFLICT (app_name, user_id) DO UPDATE
   SET state = dadk_merge(user_state.state, excluded.state), update_time = excluded.update_time;
INSERT INTO state_snapshots (session_pk, seq, state)
SELECT :session_pk, :expected_seq + 1, :snapshot WHERE :snapshot IS NOT NULL;
SELECT 'ok' AS status, NULL AS dup_seq, :expected_seq + 1 AS last_seq;

-- name: list_sessions
-- Each session with its newest snapshot and the state deltas after it, so the
-- caller folds a short tail per session.
SELECT s.session_id, s.user_id, s.update_time, s.initial_state,
       snap.seq AS snap_seq, snap.state AS snap_state, e.seq, e.delta
  FROM sessions s
  LEFT JOIN state_snapshots snap
    ON snap.session_pk = s.pk
   AND snap.seq = (SELECT MAX(seq) FROM state_snapshots WHERE session_pk = s.pk)
  LEFT JOIN events e
    ON e.session_pk = s.pk AND e.seq > COALESCE(snap.seq, 0) AND e.delta IS NOT NULL
 WHERE s.app_name = :app_name AND (:user_id IS NULL OR s.user_id = :user_id)
 ORDER BY s.update_time, s.user_id, s.session_id, e.seq;

-- name: list_user_states
SELECT user_id, state FROM user_state
 WHERE app_name = :app_name AND (:user_id IS NULL OR user_id = :user_id);

-- name: get_app_state
SELECT state FROM app_state WHERE app_name = :app_name;

-- name: get_user_state
SELECT state FROM user_state WHERE app_name = :app_name AND user_id = :user_id;

-- name: delete_session
DELETE FROM sessions WHERE app_name = :app_name AND user_id = :user_id AND session_id = :session_id;

-- name: replace_snapshots guarded
-- Rebuild: drop a session's snapshots and write the ones given (a JSON array
-- of [seq, state] pairs), in one transaction.
SELECT CASE WHEN EXISTS (SELECT 1 FROM sessions WHERE pk = :session_pk) THEN 'ok' ELSE 'missing' END AS status;
DELETE FROM state_snapshots WHERE session_pk = :session_pk;
INSERT INTO state_snapshots (session_pk, seq, state)
SELECT :session_pk, json_extract(value, '$[0]'), json_extract(value, '$[1]')
  FROM json_each(:snapshots) WHERE true;
SELECT 'ok' AS status;

-- ---------------------------------------------------------------- run ledger
-- Times come from the database clock. A claim bumps 'epoch' (the fencing
-- token) and 'attempts', and sets the earliest next recovery:
-- next_attempt_at = now + lease + backoff * 2^(attempts before this claim).

-- name: run_submit
INSERT INTO runs (run_id, app_name, user_id, session_id, invocation_id, request, status,
                  owner, lease_until, created_at, updated_at)
VALUES (:run_id, :app_name, :user_id, :session_id, :invocation_id, :request, 'QUEUED',
        :owner, (julianday('now') - 2440587.5) * 86400.0 + :lease,
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0)
RETURNING *;

-- name: run_claim_queued
-- Starts our own queued run when it heads its session's queue and the session is free.
UPDATE runs
   SET status = 'RUNNING', epoch = epoch + 1, attempts = attempts + 1,
       lease_until = (julianday('now') - 2440587.5) * 86400.0 + :lease,
       next_attempt_at = (julianday('now') - 2440587.5) * 86400.0 + :lease
                         + :backoff * (1 << MIN(attempts, 20)),
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND status = 'QUEUED' AND owner = :owner
   AND NOT EXISTS (SELECT 1 FROM runs r
                    WHERE r.app_name = runs.app_name AND r.user_id = runs.user_id
                      AND r.session_id = runs.session_id AND r.status = 'RUNNING')
   AND NOT EXISTS (SELECT 1 FROM runs r
                    WHERE r.app_name = runs.app_name AND r.user_id = runs.user_id
                      AND r.session_id = runs.session_id AND r.status = 'QUEUED' AND r.pk < runs.pk)
RETURNING *;

-- name: run_renew
UPDATE runs
   SET lease_until = (julianday('now') - 2440587.5) * 86400.0 + :lease,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND owner = :owner AND epoch = :epoch AND status IN ('QUEUED', 'RUNNING')
RETURNING lease_until;

-- name: run_finish
UPDATE runs
   SET status = :status, last_error = :error, classification = COALESCE(:classification, classification),
       finished_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND owner = :owner AND epoch = :epoch AND status = 'RUNNING'
RETURNING status;

-- name: run_claim_expired
-- Recovery: RUNNING rows whose owner stopped renewing, past their back-off,
-- and QUEUED rows whose waiting caller died and whose turn has come.
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
RETURNING *;

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
-- An operator tries a parked run again: it re-enters its session's queue with
-- an expired lease and fresh attempts, so the next sweep recovers it. A run
-- that is not PARKED is left as it is (calling twice is harmless).
UPDATE runs
   SET status = 'QUEUED', owner = NULL, attempts = 0, next_attempt_at = 0,
       lease_until = 0, last_error = NULL, finished_at = NULL,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND status = 'PARKED'
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

-- ---------------------------------------------------------------- journal
-- A write made for a run names its epoch; once the run was taken over the
-- write is refused ('fenced'), like the run's session appends.

-- name: journal_get
SELECT * FROM journal WHERE key = :key;

-- name: journal_intent guarded
SELECT CASE
         WHEN EXISTS (SELECT 1 FROM journal WHERE key = :key) THEN 'exists'
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING') THEN 'fenced'
         ELSE 'ok'
       END AS status;
INSERT INTO journal (key, tool_name, status, run_id, run_epoch, invocation_id, function_call_id,
                     created_at, updated_at)
VALUES (:key, :tool_name, 'INTENT', :run_id, :run_epoch, :invocation_id, :function_call_id,
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0);
SELECT 'ok' AS status;

-- name: journal_done guarded
SELECT CASE
         WHEN NOT EXISTS (SELECT 1 FROM journal WHERE key = :key) THEN 'missing'
         WHEN EXISTS (SELECT 1 FROM journal WHERE key = :key AND status = 'DONE') THEN 'done'
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING') THEN 'fenced'
         ELSE 'ok'
       END AS status;
UPDATE journal
   SET status = 'DONE', result = :result, run_id = COALESCE(:run_id, run_id),
       run_epoch = COALESCE(:run_epoch, run_epoch),
       function_call_id = COALESCE(:function_call_id, function_call_id),
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE key = :key AND status = 'INTENT';
SELECT 'ok' AS status;

-- name: journal_list
SELECT * FROM journal
 WHERE (:invocation_id IS NULL OR invocation_id = :invocation_id)
 ORDER BY created_at DESC LIMIT :limit;

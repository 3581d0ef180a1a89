-- Named session queries for SQLite; other features keep theirs in queries_<feature>.sql.
-- The same names exist in ../postgresql/.
-- Parameters are :name. A 'guarded' unit's first statement decides (status = 'ok')
-- whether the rest run; see durable_adk/store/queries.py.

-- name: db_now
SELECT (julianday('now') - 2440587.5) * 86400.0 AS now;

-- name: timeline_seen
-- A worker found the database on this history (see 0025_timelines.sql); the
-- first worker to see it records when.
INSERT INTO db_timelines (timeline, first_seen_at)
VALUES (:timeline, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (timeline) DO NOTHING;

-- name: timeline_failover
-- When the database last changed history (a failover), or NULL if it never did.
SELECT CASE WHEN count(*) > 1 THEN max(first_seen_at) END AS failed_over_at
  FROM db_timelines;

-- ---------------------------------------------------------------- sessions

-- name: create_session guarded inline
SELECT CASE WHEN EXISTS (
           SELECT 1 FROM sessions
            WHERE app_name = :app_name AND user_id = :user_id AND session_id = :session_id)
       THEN 'exists' ELSE 'ok' END AS status;
INSERT INTO sessions (app_name, user_id, session_id, initial_state, create_time, update_time)
VALUES (:app_name, :user_id, :session_id, :initial_state, :now, :now);
-- skip when :app_delta IS NULL
INSERT INTO app_state (app_name, state, update_time)
SELECT :app_name, :app_delta, :now WHERE :app_delta IS NOT NULL
ON CONFLICT (app_name) DO UPDATE
   SET state = dadk_merge(app_state.state, excluded.state), update_time = excluded.update_time;
-- skip when :user_delta IS NULL
INSERT INTO user_state (app_name, user_id, state, update_time)
SELECT :app_name, :user_id, :user_delta, :now WHERE :user_delta IS NOT NULL
ON CONFLICT (app_name, user_id) DO UPDATE
   SET state = dadk_merge(user_state.state, excluded.state), update_time = excluded.update_time;
SELECT 'ok' AS status, s.pk, s.create_time,
       (SELECT state FROM app_state WHERE app_name = :app_name) AS app_state,
       (SELECT state FROM user_state WHERE app_name = :app_name AND user_id = :user_id) AS user_state
  FROM sessions s
 WHERE s.app_name = :app_name AND s.user_id = :user_id AND s.session_id = :session_id
   AND s.purging_at IS NULL;

-- name: load_session_tail
-- The session row, shared state, and every event after :since_seq, in one read.
SELECT s.pk, s.last_seq, s.initial_state, s.update_time, s.repairs,
       (SELECT state FROM app_state WHERE app_name = :app_name) AS app_state,
       (SELECT state FROM user_state WHERE app_name = :app_name AND user_id = :user_id) AS user_state,
       e.seq, e.data
  FROM sessions s
  LEFT JOIN events e ON e.session_pk = s.pk AND e.seq > :since_seq
 WHERE s.app_name = :app_name AND s.user_id = :user_id AND s.session_id = :session_id
   AND s.purging_at IS NULL
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
 WHERE s.app_name = :app_name AND s.user_id = :user_id AND s.session_id = :session_id
   AND s.purging_at IS NULL;

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

-- name: load_event_row
-- One stored event's own columns, by sequence number: what an unreadable row's
-- stand-in keeps (read only when the row's JSON cannot be parsed).
SELECT seq, event_id, invocation_id, author, timestamp, delta, data FROM events
 WHERE session_pk = :session_pk AND seq = :seq;

-- name: load_event_data
-- One stored event of a session, by id: a re-append of that id is compared with it.
SELECT seq, data FROM events WHERE session_pk = :session_pk AND event_id = :event_id;

-- name: find_event_seq
SELECT s.pk, s.last_seq, e.seq
  FROM sessions s
  LEFT JOIN events e ON e.session_pk = s.pk AND e.event_id = :event_id
 WHERE s.app_name = :app_name AND s.user_id = :user_id AND s.session_id = :session_id
   AND s.purging_at IS NULL;

-- name: append_fence fragment
-- The fence of an append, as its events INSERT's own WHERE (the check travels
-- there): the session is there and not being purged, the log is where the
-- caller saw it (:expected_seq), and a run's event names the run's epoch while
-- it is RUNNING. run_finish's fence (append_events_finish) names the owner too.
 WHERE EXISTS (SELECT 1 FROM sessions s
                WHERE s.pk = :session_pk AND s.purging_at IS NULL
                  AND (s.last_seq <> :expected_seq) IS NOT TRUE)
   AND (:run_id IS NULL OR EXISTS (
          SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                               AND status = 'RUNNING'));

-- name: events_from_batch fragment
-- A batch's events (:events, a JSON array of objects) as the rows of the events
-- INSERT, without its WHERE (the unit's fence follows it). Each column is read
-- from :events by its path ('$[0].seq'): SQLite keeps the parse of :events for a
-- statement's rows, while j.value is each element written out as text again,
-- parsed again for each column.
INSERT INTO events (session_pk, seq, event_id, invocation_id, author, timestamp, delta, data)
SELECT :session_pk, json_extract(:events, j.fullkey || '.seq'),
       json_extract(:events, j.fullkey || '.event_id'),
       json_extract(:events, j.fullkey || '.invocation_id'),
       json_extract(:events, j.fullkey || '.author'),
       json_extract(:events, j.fullkey || '.timestamp'),
       json_extract(:events, j.fullkey || '.delta'), json_extract(:events, j.fullkey || '.data')
  FROM json_each(:events) AS j

-- name: append_event guarded inline
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
  LEFT JOIN sessions s ON s.pk = :session_pk AND s.purging_at IS NULL
  LEFT JOIN events d ON d.session_pk = :session_pk AND d.event_id = :event_id;
-- check travels here: the check's conditions for 'ok', NULLs as it reads them (a
-- replayed event id fails the table's UNIQUE (session_pk, event_id) instead).
INSERT INTO events (session_pk, seq, event_id, invocation_id, author, timestamp, delta, data)
SELECT :session_pk, :expected_seq + 1, :event_id, :invocation_id, :author, :timestamp, :delta, :data
-- use: append_fence
UPDATE sessions SET last_seq = :expected_seq + 1, update_time = :timestamp WHERE pk = :session_pk;
-- The unit's result, its values known: the fence passed, so the UPDATE above
-- wrote its one row. Not a RETURNING clause: SQLite keeps RETURNING's rows in a
-- temporary table it opens for each run of the statement, which costs more
-- than this statement does.
SELECT 'ok' AS status, NULL AS dup_seq, :expected_seq + 1 AS last_seq;
-- skip when :app_delta IS NULL
INSERT INTO app_state (app_name, state, update_time)
SELECT :app_name, :app_delta, :timestamp WHERE :app_delta IS NOT NULL
ON CONFLICT (app_name) DO UPDATE
   SET state = dadk_merge(app_state.state, excluded.state), update_time = excluded.update_time;
-- skip when :user_delta IS NULL
INSERT INTO user_state (app_name, user_id, state, update_time)
SELECT :app_name, :user_id, :user_delta, :timestamp WHERE :user_delta IS NOT NULL
ON CONFLICT (app_name, user_id) DO UPDATE
   SET state = dadk_merge(user_state.state, excluded.state), update_time = excluded.update_time;
-- skip when :snapshot IS NULL
INSERT INTO state_snapshots (session_pk, seq, state)
SELECT :session_pk, :expected_seq + 1, :snapshot WHERE :snapshot IS NOT NULL;

-- name: append_events guarded inline
-- A batch of a run's events (barrier commits, docs/runs.md), in one transaction
-- and fenced as one: the caller names the last sequence number it saw and the
-- events come with their sequence numbers (:expected_seq + 1, + 2, ...), in
-- :events, a JSON array of {seq, event_id, invocation_id, author, timestamp,
-- delta, data}. A replayed event id, a newer append by anyone, a deleted
-- session or a run taken over or finished writes nothing of the batch. The
-- app: and user: deltas of the batch come merged in order; :snapshots is a JSON
-- array of [seq, state] for the snapshot points the batch crosses.
SELECT CASE
         WHEN s.pk IS NULL THEN 'missing'
         WHEN EXISTS (SELECT 1 FROM json_each(:events) AS j
                        JOIN events d ON d.session_pk = :session_pk
                                     AND d.event_id = json_extract(j.value, '$.event_id'))
              THEN 'duplicate'
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING') THEN 'fenced'
         WHEN s.last_seq <> :expected_seq THEN 'stale'
         ELSE 'ok'
       END AS status,
       s.last_seq AS last_seq
  FROM (SELECT 1) AS one
  LEFT JOIN sessions s ON s.pk = :session_pk AND s.purging_at IS NULL;
-- check travels here: the check's conditions for 'ok', NULLs as it reads them (an
-- event id already stored fails the table's UNIQUE (session_pk, event_id) instead).
-- use: events_from_batch
-- use: append_fence
UPDATE sessions SET last_seq = :last_seq, update_time = :timestamp WHERE pk = :session_pk;
-- The unit's result, its values known (as append_event's: not a RETURNING clause).
SELECT 'ok' AS status, :last_seq AS last_seq;
-- skip when :app_delta IS NULL
INSERT INTO app_state (app_name, state, update_time)
SELECT :app_name, :app_delta, :timestamp WHERE :app_delta IS NOT NULL
ON CONFLICT (app_name) DO UPDATE
   SET state = dadk_merge(app_state.state, excluded.state), update_time = excluded.update_time;
-- skip when :user_delta IS NULL
INSERT INTO user_state (app_name, user_id, state, update_time)
SELECT :app_name, :user_id, :user_delta, :timestamp WHERE :user_delta IS NOT NULL
ON CONFLICT (app_name, user_id) DO UPDATE
   SET state = dadk_merge(user_state.state, excluded.state), update_time = excluded.update_time;
-- skip when :snapshots IS NULL
INSERT INTO state_snapshots (session_pk, seq, state)
SELECT :session_pk, json_extract(value, '$[0]'), json_extract(value, '$[1]')
  FROM json_each(:snapshots) WHERE :snapshots IS NOT NULL;

-- name: append_events_finish guarded inline
-- A run's last events and its end in one transaction (barrier commits, docs/runs.md:
-- the final answer is durable exactly when the run is finished): append_events'
-- checks and writes, then run_finish's update. The fence names the owner too, as
-- run_finish does: a run taken over, finished or not held by :owner writes nothing.
SELECT CASE
         WHEN s.pk IS NULL THEN 'missing'
         WHEN EXISTS (SELECT 1 FROM json_each(:events) AS j
                        JOIN events d ON d.session_pk = :session_pk
                                     AND d.event_id = json_extract(j.value, '$.event_id'))
              THEN 'duplicate'
         WHEN NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND owner = :owner AND status = 'RUNNING') THEN 'fenced'
         WHEN s.last_seq <> :expected_seq THEN 'stale'
         ELSE 'ok'
       END AS status,
       s.last_seq AS last_seq
  FROM (SELECT 1) AS one
  LEFT JOIN sessions s ON s.pk = :session_pk AND s.purging_at IS NULL;
-- check travels here: the check's conditions for 'ok', NULLs as it reads them (an
-- event id already stored fails the table's UNIQUE (session_pk, event_id) instead).
-- use: events_from_batch
 WHERE EXISTS (SELECT 1 FROM sessions s
                WHERE s.pk = :session_pk AND s.purging_at IS NULL
                  AND (s.last_seq <> :expected_seq) IS NOT TRUE)
   AND EXISTS (SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                    AND owner = :owner AND status = 'RUNNING');
UPDATE sessions SET last_seq = :last_seq, update_time = :timestamp WHERE pk = :session_pk;
-- skip when :app_delta IS NULL
INSERT INTO app_state (app_name, state, update_time)
SELECT :app_name, :app_delta, :timestamp WHERE :app_delta IS NOT NULL
ON CONFLICT (app_name) DO UPDATE
   SET state = dadk_merge(app_state.state, excluded.state), update_time = excluded.update_time;
-- skip when :user_delta IS NULL
INSERT INTO user_state (app_name, user_id, state, update_time)
SELECT :app_name, :user_id, :user_delta, :timestamp WHERE :user_delta IS NOT NULL
ON CONFLICT (app_name, user_id) DO UPDATE
   SET state = dadk_merge(user_state.state, excluded.state), update_time = excluded.update_time;
-- skip when :snapshots IS NULL
INSERT INTO state_snapshots (session_pk, seq, state)
SELECT :session_pk, json_extract(value, '$[0]'), json_extract(value, '$[1]')
  FROM json_each(:snapshots) WHERE :snapshots IS NOT NULL;
UPDATE runs
   SET status = :status, last_error = :error, classification = COALESCE(:classification, classification),
       finished_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND owner = :owner AND epoch = :run_epoch AND status = 'RUNNING';
-- The unit's result: the run the UPDATE above finished (the fence named it, with
-- the UPDATE's own conditions, in this transaction). Not a RETURNING clause, as
-- in append_event.
SELECT 'ok' AS status, :last_seq AS last_seq, app_name, user_id, session_id,
       EXISTS (SELECT 1 FROM runs q
                WHERE q.app_name = runs.app_name AND q.user_id = runs.user_id
                  AND q.session_id = runs.session_id AND q.status = 'QUEUED') AS queued_behind
  FROM runs WHERE run_id = :run_id;
-- use: inbox_at_finish

-- name: list_sessions
-- Each session with its newest snapshot and the state deltas after it, so the
-- caller folds a short tail per session.
SELECT s.pk, s.session_id, s.user_id, s.update_time, s.initial_state,
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

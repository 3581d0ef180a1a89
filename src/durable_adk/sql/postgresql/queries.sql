-- Named session queries for PostgreSQL; other features keep theirs in queries_<feature>.sql.
-- The same names exist in ../sqlite/.
-- Parameters are :name (rewritten to $n at load time). Every unit is ONE
-- statement: one round trip, atomic on its own.

-- name: db_now
SELECT extract(epoch FROM clock_timestamp())::float8 AS now;

-- name: timeline_seen
-- A worker found the database on this history (see 0025_timelines.sql); the
-- first worker to see it records when.
INSERT INTO db_timelines (timeline, first_seen_at)
VALUES (:timeline::text, extract(epoch FROM clock_timestamp()))
ON CONFLICT (timeline) DO NOTHING;

-- name: timeline_failover
-- When the database last changed history (a failover), or NULL if it never did.
SELECT CASE WHEN count(*) > 1 THEN max(first_seen_at) END AS failed_over_at
  FROM db_timelines;

-- ---------------------------------------------------------------- sessions

-- name: create_session inline
WITH ins AS (
    INSERT INTO sessions (app_name, user_id, session_id, initial_state, create_time, update_time)
    VALUES (:app_name::text, :user_id::text, :session_id::text, :initial_state::text,
            :now::float8, :now::float8)
    ON CONFLICT (app_name, user_id, session_id) DO NOTHING
    RETURNING pk, create_time
), app AS (
    INSERT INTO app_state (app_name, state, update_time)
    SELECT :app_name::text, (:app_delta::text)::jsonb, :now::float8
      FROM ins WHERE :app_delta::text IS NOT NULL
    ON CONFLICT (app_name) DO UPDATE
       SET state = app_state.state || EXCLUDED.state, update_time = EXCLUDED.update_time
    RETURNING state
), usr AS (
    INSERT INTO user_state (app_name, user_id, state, update_time)
    SELECT :app_name::text, :user_id::text, (:user_delta::text)::jsonb, :now::float8
      FROM ins WHERE :user_delta::text IS NOT NULL
    ON CONFLICT (app_name, user_id) DO UPDATE
       SET state = user_state.state || EXCLUDED.state, update_time = EXCLUDED.update_time
    RETURNING state
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM ins) THEN 'ok' ELSE 'exists' END AS status,
       (SELECT pk FROM ins) AS pk,
       (SELECT create_time FROM ins) AS create_time,
       COALESCE((SELECT state FROM app),
                (SELECT state FROM app_state WHERE app_name = :app_name::text))::text AS app_state,
       COALESCE((SELECT state FROM usr),
                (SELECT state FROM user_state
                  WHERE app_name = :app_name::text AND user_id = :user_id::text))::text AS user_state;

-- name: load_session_tail
-- The session row, shared state, and every event after :since_seq, in one round trip.
SELECT s.pk, s.last_seq, s.initial_state, s.update_time, s.repairs,
       (SELECT state::text FROM app_state WHERE app_name = :app_name::text) AS app_state,
       (SELECT state::text FROM user_state
         WHERE app_name = :app_name::text AND user_id = :user_id::text) AS user_state,
       e.seq, e.data
  FROM sessions s
  LEFT JOIN events e ON e.session_pk = s.pk AND e.seq > :since_seq::bigint
 WHERE s.app_name = :app_name::text AND s.user_id = :user_id::text
   AND s.session_id = :session_id::text AND s.purging_at IS NULL
 ORDER BY e.seq;

-- name: load_session_head
-- The session row, shared state and its newest snapshot (for partial reads).
SELECT s.pk, s.last_seq, s.initial_state, s.update_time,
       (SELECT state::text FROM app_state WHERE app_name = :app_name::text) AS app_state,
       (SELECT state::text FROM user_state
         WHERE app_name = :app_name::text AND user_id = :user_id::text) AS user_state,
       snap.seq AS snap_seq, snap.state AS snap_state
  FROM sessions s
  LEFT JOIN LATERAL (
       SELECT seq, state FROM state_snapshots
        WHERE session_pk = s.pk ORDER BY seq DESC LIMIT 1) snap ON true
 WHERE s.app_name = :app_name::text AND s.user_id = :user_id::text
   AND s.session_id = :session_id::text AND s.purging_at IS NULL;

-- name: load_events_partial
-- Events after :from_seq, plus the whole newest invocation, plus events at or
-- after :after_ts (when given): a UNION of three indexed reads.
SELECT seq, data FROM events WHERE session_pk = :session_pk::bigint AND seq > :from_seq::bigint
UNION
SELECT seq, data FROM events
 WHERE session_pk = :session_pk::bigint
   AND invocation_id = (SELECT invocation_id FROM events
                         WHERE session_pk = :session_pk::bigint ORDER BY seq DESC LIMIT 1)
UNION
SELECT seq, data FROM events
 WHERE session_pk = :session_pk::bigint AND :after_ts::float8 IS NOT NULL
   AND timestamp >= :after_ts::float8
ORDER BY seq;

-- name: load_deltas_after
SELECT seq, delta FROM events
 WHERE session_pk = :session_pk::bigint AND seq > :after_seq::bigint
   AND seq <= :upto_seq::bigint AND delta IS NOT NULL
 ORDER BY seq;

-- name: load_snapshots
SELECT seq, state FROM state_snapshots WHERE session_pk = :session_pk::bigint ORDER BY seq;

-- name: load_event_row
-- One stored event's own columns, by sequence number: what an unreadable row's
-- stand-in keeps (read only when the row's JSON cannot be parsed).
SELECT seq, event_id, invocation_id, author, timestamp, delta, data FROM events
 WHERE session_pk = :session_pk::bigint AND seq = :seq::bigint;

-- name: load_event_data
-- One stored event of a session, by id: a re-append of that id is compared with it.
SELECT seq, data FROM events WHERE session_pk = :session_pk::bigint AND event_id = :event_id::text;

-- name: find_event_seq
SELECT s.pk, s.last_seq, e.seq
  FROM sessions s
  LEFT JOIN events e ON e.session_pk = s.pk AND e.event_id = :event_id::text
 WHERE s.app_name = :app_name::text AND s.user_id = :user_id::text
   AND s.session_id = :session_id::text;

-- name: append_event inline
-- The fence: the caller names the last sequence number it saw. The session row
-- is locked, so concurrent appenders queue; anything but an exact match (a newer
-- append by someone, a deleted session, a replayed event id) writes nothing. An
-- event written for a run also names the run's epoch: a worker whose run was
-- taken over (or finished) is 'fenced' and writes nothing.
WITH s AS (
    SELECT pk, last_seq FROM sessions
     WHERE pk = :session_pk::bigint AND purging_at IS NULL FOR UPDATE
), d AS (
    SELECT seq FROM events WHERE session_pk = :session_pk::bigint AND event_id = :event_id::text
), verdict AS (
    SELECT CASE
             WHEN NOT EXISTS (SELECT 1 FROM s) THEN 'missing'
             WHEN EXISTS (SELECT 1 FROM d) THEN 'duplicate'
             WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING') THEN 'fenced'
             WHEN (SELECT last_seq FROM s) <> :expected_seq::bigint THEN 'stale'
             ELSE 'ok'
           END AS status
), ins AS (
    INSERT INTO events (session_pk, seq, event_id, invocation_id, author, timestamp, delta, data)
    SELECT :session_pk::bigint, :expected_seq::bigint + 1, :event_id::text, :invocation_id::text,
           :author::text, :timestamp::float8, :delta::text, :data::text
      FROM verdict WHERE status = 'ok'
    RETURNING seq
), upd AS (
    UPDATE sessions SET last_seq = ins.seq, update_time = :timestamp::float8
      FROM ins WHERE sessions.pk = :session_pk::bigint
    RETURNING sessions.last_seq
-- skip when :app_delta IS NULL
), app AS (
    INSERT INTO app_state (app_name, state, update_time)
    SELECT :app_name::text, (:app_delta::text)::jsonb, :timestamp::float8
      FROM ins WHERE :app_delta::text IS NOT NULL
    ON CONFLICT (app_name) DO UPDATE
       SET state = app_state.state || EXCLUDED.state, update_time = EXCLUDED.update_time
    RETURNING 1
-- skip when :user_delta IS NULL
), usr AS (
    INSERT INTO user_state (app_name, user_id, state, update_time)
    SELECT :app_name::text, :user_id::text, (:user_delta::text)::jsonb, :timestamp::float8
      FROM ins WHERE :user_delta::text IS NOT NULL
    ON CONFLICT (app_name, user_id) DO UPDATE
       SET state = user_state.state || EXCLUDED.state, update_time = EXCLUDED.update_time
    RETURNING 1
-- skip when :snapshot IS NULL
), snap AS (
    INSERT INTO state_snapshots (session_pk, seq, state)
    SELECT :session_pk::bigint, ins.seq, :snapshot::text
      FROM ins WHERE :snapshot::text IS NOT NULL
    RETURNING 1
)
SELECT v.status,
       (SELECT seq FROM d) AS dup_seq,
       COALESCE((SELECT last_seq FROM upd), (SELECT last_seq FROM s)) AS last_seq
  FROM verdict v;

-- name: events_batch fragment
-- The CTEs of a batch of a run's events, for the units that write one (used
-- as "-- use: events_batch"): the session row locked (s) and the events (e).
s AS (
    SELECT pk, last_seq FROM sessions
     WHERE pk = :session_pk::bigint AND purging_at IS NULL FOR UPDATE
), e AS (
    SELECT * FROM json_to_recordset(:events::json)
        AS x(seq bigint, event_id text, invocation_id text, author text,
             timestamp float8, delta text, data text)
),

-- name: events_batch_verdict fragment
-- The batch's fence (verdict): 'missing', 'duplicate', 'fenced' (the run was
-- taken over or has finished), 'stale' (a newer append) or 'ok'.
verdict AS (
    SELECT CASE
             WHEN NOT EXISTS (SELECT 1 FROM s) THEN 'missing'
             WHEN EXISTS (SELECT 1 FROM events d JOIN e ON d.event_id = e.event_id
                           WHERE d.session_pk = :session_pk::bigint) THEN 'duplicate'
             WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING') THEN 'fenced'
             WHEN (SELECT last_seq FROM s) <> :expected_seq::bigint THEN 'stale'
             ELSE 'ok'
           END AS status
),

-- name: events_batch_writes fragment
-- What the batch writes when its verdict is 'ok': the events (ins), the
-- session's sequence number (upd), the app: and user: deltas (app, usr) and the
-- snapshot points (snap).
ins AS (
    INSERT INTO events (session_pk, seq, event_id, invocation_id, author, timestamp, delta, data)
    SELECT :session_pk::bigint, e.seq, e.event_id, e.invocation_id, e.author, e.timestamp,
           e.delta, e.data
      FROM e, verdict WHERE verdict.status = 'ok'
    RETURNING seq
), upd AS (
    UPDATE sessions SET last_seq = :last_seq::bigint, update_time = :timestamp::float8
      FROM verdict WHERE sessions.pk = :session_pk::bigint AND verdict.status = 'ok'
    RETURNING sessions.last_seq
-- skip when :app_delta IS NULL
), app AS (
    INSERT INTO app_state (app_name, state, update_time)
    SELECT :app_name::text, (:app_delta::text)::jsonb, :timestamp::float8
      FROM verdict WHERE verdict.status = 'ok' AND :app_delta::text IS NOT NULL
    ON CONFLICT (app_name) DO UPDATE
       SET state = app_state.state || EXCLUDED.state, update_time = EXCLUDED.update_time
    RETURNING 1
-- skip when :user_delta IS NULL
), usr AS (
    INSERT INTO user_state (app_name, user_id, state, update_time)
    SELECT :app_name::text, :user_id::text, (:user_delta::text)::jsonb, :timestamp::float8
      FROM verdict WHERE verdict.status = 'ok' AND :user_delta::text IS NOT NULL
    ON CONFLICT (app_name, user_id) DO UPDATE
       SET state = user_state.state || EXCLUDED.state, update_time = EXCLUDED.update_time
    RETURNING 1
-- skip when :snapshots IS NULL
), snap AS (
    INSERT INTO state_snapshots (session_pk, seq, state)
    SELECT :session_pk::bigint, (x ->> 0)::bigint, x ->> 1
      FROM json_array_elements(:snapshots::json) AS x, verdict WHERE verdict.status = 'ok'
    RETURNING 1
)

-- name: append_events inline
-- A batch of a run's events (barrier commits, docs/runs.md), as one statement
-- and fenced as one: the caller names the last sequence number it saw and the
-- events come with their sequence numbers (:expected_seq + 1, + 2, ...), in
-- :events, a JSON array of {seq, event_id, invocation_id, author, timestamp,
-- delta, data}. A replayed event id, a newer append by anyone, a deleted
-- session or a run taken over or finished writes nothing of the batch. The
-- app: and user: deltas of the batch come merged in order; :snapshots is a JSON
-- array of [seq, state] for the snapshot points the batch crosses.
WITH
-- use: events_batch
-- use: events_batch_verdict
-- use: events_batch_writes
SELECT v.status,
       COALESCE((SELECT last_seq FROM upd), (SELECT last_seq FROM s)) AS last_seq
  FROM verdict v;

-- name: append_events_finish inline
-- A run's last events and its end as one statement (barrier commits, docs/runs.md:
-- the final answer is durable exactly when the run is finished): append_events'
-- checks and writes, then run_finish's update. The fence names the owner too, as
-- run_finish does: a run taken over, finished or not held by :owner writes nothing.
WITH
-- use: events_batch
verdict AS (
    SELECT CASE
             WHEN NOT EXISTS (SELECT 1 FROM s) THEN 'missing'
             WHEN EXISTS (SELECT 1 FROM events d JOIN e ON d.event_id = e.event_id
                           WHERE d.session_pk = :session_pk::bigint) THEN 'duplicate'
             WHEN NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text AND owner = :owner::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING') THEN 'fenced'
             WHEN (SELECT last_seq FROM s) <> :expected_seq::bigint THEN 'stale'
             ELSE 'ok'
           END AS status
),
-- use: events_batch_writes
, fin AS (
    UPDATE runs
       SET status = :status::text, last_error = :error::text,
           classification = COALESCE(:classification::text, classification),
           finished_at = extract(epoch FROM clock_timestamp()),
           updated_at = extract(epoch FROM clock_timestamp())
      FROM verdict
     WHERE verdict.status = 'ok' AND run_id = :run_id::text AND owner = :owner::text
       AND epoch = :run_epoch::bigint AND runs.status = 'RUNNING'
    RETURNING runs.app_name, runs.user_id, runs.session_id,
              EXISTS (SELECT 1 FROM runs q
                       WHERE q.app_name = runs.app_name AND q.user_id = runs.user_id
                         AND q.session_id = runs.session_id AND q.status = 'QUEUED') AS queued_behind
)
-- use: inbox_at_finish
SELECT v.status,
       COALESCE((SELECT last_seq FROM upd), (SELECT last_seq FROM s)) AS last_seq,
       f.app_name, f.user_id, f.session_id, COALESCE(f.queued_behind, false) AS queued_behind
  FROM verdict v LEFT JOIN fin f ON true;

-- name: list_sessions
-- Each session with its newest snapshot and the state deltas after it, so the
-- caller folds a short tail per session.
SELECT s.pk, s.session_id, s.user_id, s.update_time, s.initial_state,
       snap.seq AS snap_seq, snap.state AS snap_state, e.seq, e.delta
  FROM sessions s
  LEFT JOIN LATERAL (
       SELECT seq, state FROM state_snapshots
        WHERE session_pk = s.pk ORDER BY seq DESC LIMIT 1) snap ON true
  LEFT JOIN events e
    ON e.session_pk = s.pk AND e.seq > COALESCE(snap.seq, 0) AND e.delta IS NOT NULL
 WHERE s.app_name = :app_name::text AND (:user_id::text IS NULL OR s.user_id = :user_id::text)
 ORDER BY s.update_time, s.user_id, s.session_id, e.seq;

-- name: list_user_states
SELECT user_id, state::text AS state FROM user_state
 WHERE app_name = :app_name::text AND (:user_id::text IS NULL OR user_id = :user_id::text);

-- name: get_app_state
SELECT state::text AS state FROM app_state WHERE app_name = :app_name::text;

-- name: get_user_state
SELECT state::text AS state FROM user_state
 WHERE app_name = :app_name::text AND user_id = :user_id::text;

-- name: delete_session
DELETE FROM sessions
 WHERE app_name = :app_name::text AND user_id = :user_id::text AND session_id = :session_id::text;

-- name: replace_snapshots
-- Rebuild: drop a session's snapshots and write the ones given (a JSON array
-- of [seq, state] pairs), in one statement.
WITH s AS (
    SELECT pk FROM sessions WHERE pk = :session_pk::bigint FOR UPDATE
), given AS (
    SELECT (item ->> 0)::bigint AS seq, item ->> 1 AS state
      FROM jsonb_array_elements((:snapshots::text)::jsonb) AS item
), gone AS (
    -- Only rows not rewritten below: one statement must not touch a row twice.
    DELETE FROM state_snapshots
     WHERE session_pk IN (SELECT pk FROM s) AND seq NOT IN (SELECT seq FROM given)
), ins AS (
    INSERT INTO state_snapshots (session_pk, seq, state)
    SELECT s.pk, given.seq, given.state FROM s, given
    ON CONFLICT (session_pk, seq) DO UPDATE SET state = EXCLUDED.state
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM s) THEN 'ok' ELSE 'missing' END AS status;

-- Worker service queries for SQLite (same names in ../postgresql/): following a
-- session's events from a sequence number, operators' summaries, and handing
-- leases back at a graceful shutdown.

-- name: service_session_seq
-- Whether a session exists, and the sequence number of its newest event.
SELECT pk, last_seq FROM sessions
 WHERE app_name = :app_name AND user_id = :user_id AND session_id = :session_id;

-- name: service_invocation_after
-- Where a follower of an invocation starts: the sequence number before its
-- first event, or the session's newest one while it has none yet.
SELECT COALESCE((SELECT MIN(e.seq) FROM events e
                  WHERE e.session_pk = s.pk AND e.invocation_id = :invocation_id) - 1,
                s.last_seq) AS after_seq
  FROM sessions s
 WHERE s.app_name = :app_name AND s.user_id = :user_id AND s.session_id = :session_id;

-- name: service_events_after
-- A session's events after :after_seq, in append order (reconnect: any worker
-- reads the same log, whoever is appending to it).
SELECT s.pk AS session_pk, e.seq, e.data
  FROM sessions s
  JOIN events e ON e.session_pk = s.pk AND e.seq > :after_seq
 WHERE s.app_name = :app_name AND s.user_id = :user_id AND s.session_id = :session_id
 ORDER BY e.seq
 LIMIT :limit;

-- name: service_invocation_events
-- The events of one invocation (a run's own events), in append order.
SELECT s.pk AS session_pk, e.seq, e.data
  FROM sessions s
  JOIN events e INDEXED BY events_by_invocation
    ON e.session_pk = s.pk AND e.invocation_id = :invocation_id
 WHERE s.app_name = :app_name AND s.user_id = :user_id AND s.session_id = :session_id
 ORDER BY e.seq;

-- name: service_session_runs
-- The runs of one session, newest first.
SELECT * FROM runs
 WHERE app_name = :app_name AND user_id = :user_id AND session_id = :session_id
 ORDER BY pk DESC
 LIMIT :limit;

-- name: service_run_counts
SELECT status, COUNT(*) AS n FROM runs GROUP BY status ORDER BY status;

-- name: service_store_stats
-- Totals for the dashboard's header; also what a test compares to prove that a
-- rejected request changed nothing.
SELECT (SELECT COUNT(*) FROM sessions) AS sessions,
       (SELECT COALESCE(SUM(last_seq), 0) FROM sessions) AS events,
       (SELECT COUNT(*) FROM runs) AS runs,
       (SELECT COALESCE(MAX(updated_at), 0) FROM runs) AS runs_changed_at,
       (SELECT COUNT(*) FROM dead_letters) AS dead_letters,
       (SELECT COUNT(*) FROM operator_actions) AS operator_actions;

-- name: service_hand_back
-- Graceful shutdown: every run this worker still holds gets an expired lease
-- and no back-off, so another worker's next sweep claims it at once. The
-- attempt it was on is given back: leaving a draining worker is not a failure.
-- Writes for the run stay fenced: the next claim bumps the epoch.
UPDATE runs
   SET lease_until = (julianday('now') - 2440587.5) * 86400.0 - 1,
       next_attempt_at = 0,
       attempts = MAX(attempts - 1, 0),
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE owner = :owner AND status IN ('QUEUED', 'RUNNING')
RETURNING run_id, status;

-- name: service_run_counts_of_app
SELECT status, COUNT(*) AS n FROM runs
 WHERE (:app_name IS NULL OR app_name = :app_name)
 GROUP BY status ORDER BY status;

-- name: service_apps
-- The apps that have runs on this store (the dashboard's app filter).
SELECT app_name, COUNT(*) AS runs FROM runs GROUP BY app_name ORDER BY app_name;

-- name: service_known_apps
-- The apps this store knows: with runs, sessions, schedules, workers or versions (the CLI's
-- default --app when there is one).
SELECT app_name FROM runs
UNION SELECT app_name FROM sessions
UNION SELECT app_name FROM schedules
UNION SELECT app_name FROM workers
UNION SELECT app_name FROM app_versions
ORDER BY app_name;

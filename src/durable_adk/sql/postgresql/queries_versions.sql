-- App versions (issue 25): runs by version and status, the live workers and
-- what they serve, and the versions an operator drained.

-- name: versions_runs
SELECT app_version, status, COUNT(*) AS n,
       SUM(CASE WHEN status = 'QUEUED' OR (status = 'RUNNING'
                     AND lease_until < extract(epoch FROM clock_timestamp()))
                THEN 1 ELSE 0 END) AS unheld
  FROM runs WHERE app_name = :app_name GROUP BY app_version, status;

-- name: versions_workers
-- The processes that serve the app now and what each serves: they beat
-- (workers, not a one-off pass), have not said goodbye, and their last beat is
-- younger than :window of their beat periods (one missed beat and they are gone).
SELECT worker_id, app_version, serves, last_beat_at
  FROM workers
 WHERE app_name = :app_name AND left_at IS NULL
   AND last_beat_at >= extract(epoch FROM clock_timestamp()) - :window::float8 * beat_s
 ORDER BY worker_id;

-- name: versions_drained
SELECT app_version, drained_at, drained_by, reason FROM app_versions
 WHERE app_name = :app_name AND drained_at IS NOT NULL ORDER BY app_version;

-- name: version_is_drained
SELECT drained_at FROM app_versions
 WHERE app_name = :app_name AND app_version = :app_version AND drained_at IS NOT NULL;

-- name: version_drain
-- Drains a version, with the audit line, in one statement; a version drained
-- already changes nothing and writes no line.
WITH upd AS (
    INSERT INTO app_versions AS v (app_name, app_version, drained_at, drained_by, reason)
    VALUES (:app_name, :app_version, extract(epoch FROM clock_timestamp()), :actor::text,
            :reason::text)
    ON CONFLICT (app_name, app_version) DO UPDATE
       SET drained_at = excluded.drained_at, drained_by = excluded.drained_by,
           reason = excluded.reason
     WHERE v.drained_at IS NULL
    RETURNING 1
), act AS (
    INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                                  status_after, epoch, detail, created_at)
    SELECT 'version:' || :app_version::text, :app_name, 'version_drain', :actor, :reason,
           'TAKING', 'DRAINED', 0, NULL, extract(epoch FROM clock_timestamp())
      FROM upd
)
SELECT COUNT(*) AS changed FROM upd;

-- name: version_undrain
-- Undoes a drain, with the audit line, in one statement (nothing if not drained).
WITH upd AS (
    UPDATE app_versions SET drained_at = NULL, drained_by = NULL, reason = NULL
     WHERE app_name = :app_name AND app_version = :app_version AND drained_at IS NOT NULL
    RETURNING 1
), act AS (
    INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                                  status_after, epoch, detail, created_at)
    SELECT 'version:' || :app_version::text, :app_name, 'version_undrain', :actor, :reason,
           'DRAINED', 'TAKING', 0, NULL, extract(epoch FROM clock_timestamp())
      FROM upd
)
SELECT COUNT(*) AS changed FROM upd;

-- name: version_move
-- Moves a version's open runs (QUEUED, RUNNING, PAUSED, PARKED) to another
-- version, with one audit line naming how many, in one statement; their
-- continuations keep the new version (they take their invocation's newest
-- run's). The fingerprint stays: drift is still checked against the code
-- they were recorded under.
WITH moved AS (
    UPDATE runs SET app_version = :to_version::text,
                    updated_at = extract(epoch FROM clock_timestamp())
     WHERE app_name = :app_name AND app_version = :app_version::text
       AND status IN ('QUEUED', 'RUNNING', 'PAUSED', 'PARKED')
    RETURNING 1
), n AS (SELECT COUNT(*) AS moved FROM moved), act AS (
    INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                                  status_after, epoch, detail, created_at)
    SELECT 'version:' || :app_version::text, :app_name, 'version_move', :actor, :reason,
           :app_version::text, :to_version::text, 0,
           json_build_object('to', :to_version::text, 'runs', n.moved)::text,
           extract(epoch FROM clock_timestamp())
      FROM n WHERE n.moved > 0
)
SELECT moved FROM n;

-- name: version_open_runs
SELECT run_id FROM runs
 WHERE app_name = :app_name AND app_version = :app_version
   AND status IN ('QUEUED', 'RUNNING', 'PAUSED', 'PARKED')
 ORDER BY pk;

-- App versions (issue 25): runs by version and status, the live workers and
-- what they serve, and the versions an operator drained.

-- name: versions_runs
SELECT app_version, status, COUNT(*) AS n,
       SUM(CASE WHEN status = 'QUEUED' OR (status = 'RUNNING' AND lease_until IS NOT NULL
                     AND lease_until < (julianday('now') - 2440587.5) * 86400.0)
                THEN 1 ELSE 0 END) AS unheld
  FROM runs WHERE app_name = :app_name GROUP BY app_version, status;

-- name: versions_workers
-- The processes that serve the app now and what each serves: they beat
-- (workers, not a one-off pass), have not said goodbye, and their last beat is
-- younger than :window of their beat periods (one missed beat and they are gone).
SELECT worker_id, app_version, serves, last_beat_at
  FROM workers
 WHERE app_name = :app_name AND left_at IS NULL
   AND last_beat_at >= (julianday('now') - 2440587.5) * 86400.0 - :window * beat_s
 ORDER BY worker_id;

-- name: versions_drained
SELECT app_version, drained_at, drained_by, reason FROM app_versions
 WHERE app_name = :app_name AND drained_at IS NOT NULL ORDER BY app_version;

-- name: version_is_drained
SELECT drained_at FROM app_versions
 WHERE app_name = :app_name AND app_version = :app_version AND drained_at IS NOT NULL;

-- name: version_drain
-- Drains a version, with the audit line, in one unit; a version drained already
-- changes nothing and writes no line. The last statement says whether it changed.
INSERT INTO app_versions (app_name, app_version, drained_at, drained_by, reason)
SELECT :app_name, :app_version, (julianday('now') - 2440587.5) * 86400.0, :actor, :reason
 WHERE 1
ON CONFLICT (app_name, app_version) DO UPDATE
   SET drained_at = excluded.drained_at, drained_by = excluded.drained_by,
       reason = excluded.reason
 WHERE app_versions.drained_at IS NULL;
INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                              status_after, epoch, detail, created_at)
SELECT 'version:' || :app_version, :app_name, 'version_drain', :actor, :reason,
       'TAKING', 'DRAINED', 0, NULL, (julianday('now') - 2440587.5) * 86400.0
 WHERE changes() > 0;
SELECT changes() AS changed;

-- name: version_undrain
-- Undoes a drain, with the audit line, in one unit (nothing if not drained).
UPDATE app_versions SET drained_at = NULL, drained_by = NULL, reason = NULL
 WHERE app_name = :app_name AND app_version = :app_version AND drained_at IS NOT NULL;
INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                              status_after, epoch, detail, created_at)
SELECT 'version:' || :app_version, :app_name, 'version_undrain', :actor, :reason,
       'DRAINED', 'TAKING', 0, NULL, (julianday('now') - 2440587.5) * 86400.0
 WHERE changes() > 0;
SELECT changes() AS changed;

-- name: version_move
-- Moves a version's open runs (QUEUED, RUNNING, PAUSED, PARKED) to another
-- version, with one audit line naming how many, in one unit; their
-- continuations keep the new version (they take their invocation's newest
-- run's). The fingerprint stays: drift is still checked against the code
-- they were recorded under. The last statement says how many moved.
UPDATE runs SET app_version = :to_version, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE app_name = :app_name AND app_version = :app_version
   AND status IN ('QUEUED', 'RUNNING', 'PAUSED', 'PARKED');
INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                              status_after, epoch, detail, created_at)
SELECT 'version:' || :app_version, :app_name, 'version_move', :actor, :reason,
       :app_version, :to_version, 0, json_object('to', :to_version, 'runs', changes()),
       (julianday('now') - 2440587.5) * 86400.0
 WHERE changes() > 0;
SELECT CASE WHEN changes() > 0
            THEN (SELECT json_extract(detail, '$.runs') FROM operator_actions
                   WHERE pk = last_insert_rowid())
            ELSE 0 END AS moved;

-- name: version_open_runs
SELECT run_id FROM runs
 WHERE app_name = :app_name AND app_version = :app_version
   AND status IN ('QUEUED', 'RUNNING', 'PAUSED', 'PARKED')
 ORDER BY pk;

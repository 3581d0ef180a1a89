-- Schedules (durable_adk.schedules) for SQLite (same names in the other dialect).
-- Times that decide anything come from the database clock.

-- name: schedule_list_of_app
SELECT s.*, (julianday('now') - 2440587.5) * 86400.0 AS db_now
  FROM schedules s WHERE s.app_name = :app_name ORDER BY s.name;

-- name: schedule_get
SELECT s.*, (julianday('now') - 2440587.5) * 86400.0 AS db_now
  FROM schedules s WHERE s.app_name = :app_name AND s.name = :name;

-- name: schedule_set_get
-- Which version's set of schedules is in force for the app, its digest and
-- epoch (no row: never synced since schema version 19).
SELECT app_version, digest, epoch FROM schedule_sets WHERE app_name = :app_name;

-- name: schedule_sync guarded
-- A version's declared set made the app's, in one unit, refused ('fenced')
-- when another sync came first (the set's epoch is no longer :seen, 0 for
-- none). :fresh (JSON [{name, spec, next_tick_at, next_fire_at}]) are new, or
-- their timing changed: they start from the next tick given. :changed (same
-- shape) keep their next tick. Both are no longer orphaned and bump their
-- epoch, fencing a claim that read the old definition; a changed one is
-- looked at now (a claim it fenced would hold it until its lease ran out).
-- :orphan (JSON names) are no longer declared: never claimed again, still
-- listed. Every other row of the app is stamped with the version (:restamp).
-- The set records the version, its digest and who synced it.
SELECT CASE WHEN COALESCE((SELECT epoch FROM schedule_sets WHERE app_name = :app_name), 0) = :seen
            THEN 'ok' ELSE 'fenced' END AS status;
INSERT INTO schedules (app_name, name, spec, next_tick_at, next_fire_at, app_version,
                       created_at, updated_at)
SELECT :app_name, json_extract(t.value, '$.name'), json_extract(t.value, '$.spec'),
       json_extract(t.value, '$.next_tick_at'), json_extract(t.value, '$.next_fire_at'),
       :app_version, (julianday('now') - 2440587.5) * 86400.0,
       (julianday('now') - 2440587.5) * 86400.0
  FROM json_each(:fresh) AS t WHERE true
ON CONFLICT (app_name, name) DO UPDATE
   SET spec = excluded.spec, orphaned_at = NULL, epoch = schedules.epoch + 1,
       next_tick_at = excluded.next_tick_at, next_fire_at = excluded.next_fire_at,
       app_version = excluded.app_version, updated_at = excluded.updated_at;
UPDATE schedules
   SET spec = (SELECT json_extract(t.value, '$.spec') FROM json_each(:changed) AS t
                WHERE json_extract(t.value, '$.name') = schedules.name),
       orphaned_at = NULL, epoch = epoch + 1, app_version = :app_version,
       next_fire_at = MIN(next_fire_at, (julianday('now') - 2440587.5) * 86400.0),
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE app_name = :app_name
   AND name IN (SELECT json_extract(t.value, '$.name') FROM json_each(:changed) AS t);
UPDATE schedules
   SET orphaned_at = (julianday('now') - 2440587.5) * 86400.0, epoch = epoch + 1,
       app_version = :app_version, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE app_name = :app_name AND name IN (SELECT value FROM json_each(:orphan));
UPDATE schedules SET app_version = :app_version
 WHERE app_name = :app_name AND name IN (SELECT value FROM json_each(:restamp));
INSERT INTO schedule_sets (app_name, app_version, digest, epoch, synced_by, synced_at)
VALUES (:app_name, :app_version, :digest, :seen + 1, :synced_by,
        (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (app_name) DO UPDATE
   SET app_version = excluded.app_version, digest = excluded.digest, epoch = excluded.epoch,
       synced_by = excluded.synced_by, synced_at = excluded.synced_at;
SELECT 'ok' AS status;

-- name: schedule_claim lease claim
-- The poller's one statement per poll: due schedules of the app (not paused,
-- not orphaned) that the claiming worker's version (:app_version) synced, oldest first, each held for :lease seconds (its next look is
-- pushed past the lease, so a worker that dies holding it leaves it due again)
-- with its epoch bumped. The write lock makes the claim exclusive.
UPDATE schedules
   SET owner = :owner, epoch = epoch + 1,
       next_fire_at = (julianday('now') - 2440587.5) * 86400.0 + :lease,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE pk IN (SELECT pk FROM schedules
               WHERE app_name = :app_name AND paused = 0 AND orphaned_at IS NULL
                 AND next_fire_at <= (julianday('now') - 2440587.5) * 86400.0
                 AND app_version IS :app_version
               ORDER BY next_fire_at LIMIT :batch)
RETURNING *, (julianday('now') - 2440587.5) * 86400.0 AS db_now;

-- name: schedule_record guarded
-- A claim's ticks (:ticks, JSON [{tick_key, tick_at, kind, run_id, user_id,
-- session_id}, ...]) recorded PENDING with their runs' ids, and the schedule
-- advanced past them, in one unit; refused ('fenced') when the schedule was
-- claimed or changed since (its epoch moved). A tick already recorded is kept.
SELECT CASE WHEN EXISTS (SELECT 1 FROM schedules WHERE pk = :pk AND epoch = :epoch)
            THEN 'ok' ELSE 'fenced' END AS status;
INSERT INTO schedule_ticks (app_name, schedule_name, tick_key, tick_at, kind, run_id, user_id,
                            session_id, state, created_at, updated_at)
SELECT :app_name, :name, json_extract(t.value, '$.tick_key'), json_extract(t.value, '$.tick_at'),
       json_extract(t.value, '$.kind'), json_extract(t.value, '$.run_id'),
       json_extract(t.value, '$.user_id'), json_extract(t.value, '$.session_id'), 'PENDING',
       (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0
  FROM json_each(:ticks) AS t WHERE true
ON CONFLICT (app_name, schedule_name, tick_key) DO NOTHING;
UPDATE schedules
   SET next_tick_at = :next_tick_at, last_tick_at = COALESCE(:last_tick_at, last_tick_at),
       missed = missed + :missed, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE pk = :pk AND epoch = :epoch;
SELECT 'ok' AS status;

-- name: schedule_open_ticks
-- A schedule's ticks recorded but not yet submitted or skipped, in tick order.
SELECT * FROM schedule_ticks
 WHERE app_name = :app_name AND schedule_name = :name AND state = 'PENDING'
 ORDER BY tick_at, pk;

-- name: schedule_tick_done
-- A tick submitted (its run is on the ledger) or skipped; a submitted tick's
-- run becomes the schedule's last run (what the overlap policy looks at).
UPDATE schedule_ticks
   SET state = :state, detail = :detail, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE run_id = :run_id AND state = 'PENDING';
UPDATE schedules
   SET last_run_id = :run_id, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE app_name = :app_name AND name = :name AND :state = 'SUBMITTED';

-- name: schedule_release
-- The claim's end: the schedule's next look is :next_fire_at, unless it was
-- claimed or changed since (a trigger or a resume asked for a look now).
UPDATE schedules
   SET next_fire_at = :next_fire_at, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE pk = :pk AND epoch = :epoch;

-- name: schedule_set_paused
-- Pause (:paused = 1) or resume (:paused = 0, from :next_tick_at, looked at
-- now) a schedule, with the audit line, in one unit; a schedule already so
-- changes nothing and writes no line. The last statement says whether it changed.
UPDATE schedules
   SET paused = :paused, epoch = epoch + 1,
       next_tick_at = COALESCE(:next_tick_at, next_tick_at),
       next_fire_at = CASE WHEN :paused = 0 THEN (julianday('now') - 2440587.5) * 86400.0
                           ELSE next_fire_at END,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE app_name = :app_name AND name = :name AND paused <> :paused AND orphaned_at IS NULL;
INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                              status_after, epoch, detail, created_at)
SELECT 'schedule:' || name, app_name, :action, :actor, :reason,
       CASE WHEN :paused = 1 THEN 'ACTIVE' ELSE 'PAUSED' END,
       CASE WHEN :paused = 1 THEN 'PAUSED' ELSE 'ACTIVE' END, epoch, :detail,
       (julianday('now') - 2440587.5) * 86400.0
  FROM schedules WHERE app_name = :app_name AND name = :name AND changes() > 0;
SELECT s.*, changes() AS changed, (julianday('now') - 2440587.5) * 86400.0 AS db_now
  FROM schedules s WHERE s.app_name = :app_name AND s.name = :name;

-- name: schedule_trigger
-- Trigger now: a tick of its own key ('trigger:<id>') recorded PENDING for an
-- active schedule, the schedule looked at now, and the audit line, in one
-- unit. A second trigger of the same id fails on the tick's key (nothing written).
INSERT INTO schedule_ticks (app_name, schedule_name, tick_key, tick_at, kind, run_id, user_id,
                            session_id, state, actor, created_at, updated_at)
SELECT app_name, name, :tick_key, (julianday('now') - 2440587.5) * 86400.0, 'trigger', :run_id,
       :user_id, :session_id, 'PENDING', :actor,
       (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0
  FROM schedules WHERE app_name = :app_name AND name = :name AND paused = 0
   AND orphaned_at IS NULL;
UPDATE schedules
   SET next_fire_at = (julianday('now') - 2440587.5) * 86400.0, epoch = epoch + 1,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE app_name = :app_name AND name = :name AND changes() > 0;
INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                              status_after, epoch, detail, created_at)
SELECT 'schedule:' || name, app_name, 'schedule_trigger', :actor, :reason, 'ACTIVE', 'ACTIVE',
       epoch, :detail, (julianday('now') - 2440587.5) * 86400.0
  FROM schedules WHERE app_name = :app_name AND name = :name AND changes() > 0;
SELECT * FROM schedule_ticks
 WHERE app_name = :app_name AND schedule_name = :name AND tick_key = :tick_key;

-- name: schedule_tick_get
SELECT * FROM schedule_ticks
 WHERE app_name = :app_name AND schedule_name = :name AND tick_key = :tick_key;

-- name: schedule_ticks_recent
-- A schedule's latest ticks, newest first.
SELECT * FROM schedule_ticks
 WHERE app_name = :app_name AND schedule_name = :name ORDER BY pk DESC LIMIT :limit;

-- name: schedule_rewind
-- Tests and benches: put a schedule's next tick (and next look) at given times.
UPDATE schedules
   SET next_tick_at = :next_tick_at, next_fire_at = :next_fire_at, epoch = epoch + 1
 WHERE app_name = :app_name AND name = :name;

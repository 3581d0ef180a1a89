-- Schedules (durable_adk.schedules) for PostgreSQL (same names in the other dialect).
-- Times that decide anything come from the database clock.

-- name: schedule_list_of_app
SELECT s.*, extract(epoch FROM clock_timestamp()) AS db_now
  FROM schedules s WHERE s.app_name = :app_name ORDER BY s.name;

-- name: schedule_get
SELECT s.*, extract(epoch FROM clock_timestamp()) AS db_now
  FROM schedules s WHERE s.app_name = :app_name AND s.name = :name;

-- name: schedule_set_get
-- Which version's set of schedules is in force for the app, its digest and
-- epoch (no row: never synced since schema version 19).
SELECT app_version, digest, epoch FROM schedule_sets WHERE app_name = :app_name;

-- name: schedule_sync
-- A version's declared set made the app's, in one statement, refused
-- ('fenced') when another sync came first (the set's epoch is no longer
-- :seen, 0 for none): the set's row is taken first, under its row lock, and
-- every other change reads from it, so a sync that lost writes nothing.
-- :fresh (JSON [{name, spec, next_tick_at, next_fire_at}]) are new, or their
-- timing changed: they start from the next tick given. :changed (same shape)
-- keep their next tick. Both are no longer orphaned and bump their epoch,
-- fencing a claim that read the old definition; a changed one is looked at
-- now (a claim it fenced would hold it until its lease ran out). :orphan
-- (JSON names) are no longer declared: never claimed again, still listed.
-- Every other row of the app is stamped with the version (:restamp). The
-- sets are disjoint.
WITH won AS (
    INSERT INTO schedule_sets (app_name, app_version, digest, epoch, synced_by, synced_at)
    VALUES (:app_name, :app_version::text, :digest, :seen::bigint + 1, :synced_by::text,
            extract(epoch FROM clock_timestamp()))
    ON CONFLICT (app_name) DO UPDATE
       SET app_version = excluded.app_version, digest = excluded.digest,
           epoch = excluded.epoch, synced_by = excluded.synced_by,
           synced_at = excluded.synced_at
     WHERE schedule_sets.epoch = :seen::bigint
    RETURNING epoch
), fresh AS (
    INSERT INTO schedules (app_name, name, spec, next_tick_at, next_fire_at, app_version,
                           created_at, updated_at)
    SELECT :app_name, t->>'name', t->>'spec', (t->>'next_tick_at')::float8,
           (t->>'next_fire_at')::float8, :app_version::text,
           extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp())
      FROM jsonb_array_elements(:fresh::jsonb) AS t, won
    ON CONFLICT (app_name, name) DO UPDATE
       SET spec = excluded.spec, orphaned_at = NULL, epoch = schedules.epoch + 1,
           next_tick_at = excluded.next_tick_at, next_fire_at = excluded.next_fire_at,
           app_version = excluded.app_version, updated_at = excluded.updated_at
    RETURNING 1
), changed AS (
    UPDATE schedules s
       SET spec = t->>'spec', orphaned_at = NULL, epoch = s.epoch + 1,
           app_version = :app_version::text,
           next_fire_at = LEAST(s.next_fire_at, extract(epoch FROM clock_timestamp())),
           updated_at = extract(epoch FROM clock_timestamp())
      FROM jsonb_array_elements(:changed::jsonb) AS t, won
     WHERE s.app_name = :app_name AND s.name = t->>'name'
    RETURNING 1
), orphaned AS (
    UPDATE schedules s
       SET orphaned_at = extract(epoch FROM clock_timestamp()), epoch = s.epoch + 1,
           app_version = :app_version::text, updated_at = extract(epoch FROM clock_timestamp())
      FROM jsonb_array_elements_text(:orphan::jsonb) AS t(name), won
     WHERE s.app_name = :app_name AND s.name = t.name
    RETURNING 1
), restamped AS (
    UPDATE schedules s SET app_version = :app_version::text
      FROM jsonb_array_elements_text(:restamp::jsonb) AS t(name), won
     WHERE s.app_name = :app_name AND s.name = t.name
    RETURNING 1
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM won) THEN 'ok' ELSE 'fenced' END AS status;

-- name: schedule_claim lease claim
-- The poller's one statement per poll: due schedules of the app (not paused,
-- not orphaned) that the claiming worker's version (:app_version) synced, oldest first, each held for :lease seconds (its next look is
-- pushed past the lease, so a worker that dies holding it leaves it due again)
-- with its epoch bumped. SKIP LOCKED: two workers never claim one schedule.
-- The clock is read once, in a scalar subquery, so that it bounds the index
-- scan (clock_timestamp() itself is volatile: compared row by row, it would
-- make the scan read every schedule of the app).
WITH due AS (
    SELECT pk FROM schedules
     WHERE app_name = :app_name AND paused = 0 AND orphaned_at IS NULL
       AND next_fire_at <= (SELECT extract(epoch FROM clock_timestamp()))
       AND app_version IS NOT DISTINCT FROM :app_version::text
     ORDER BY next_fire_at LIMIT :batch::int
       FOR UPDATE SKIP LOCKED
)
UPDATE schedules s
   SET owner = :owner, epoch = s.epoch + 1,
       next_fire_at = extract(epoch FROM clock_timestamp()) + :lease::float8,
       updated_at = extract(epoch FROM clock_timestamp())
  FROM due WHERE s.pk = due.pk
RETURNING s.*, extract(epoch FROM clock_timestamp()) AS db_now;

-- name: schedule_record
-- A claim's ticks (:ticks, JSON [{tick_key, tick_at, kind, run_id, user_id,
-- session_id}, ...]) recorded PENDING with their runs' ids, and the schedule
-- advanced past them, in one unit; refused ('fenced') when the schedule was
-- claimed or changed since (its epoch moved). A tick already recorded is kept.
WITH ok AS (
    SELECT pk FROM schedules WHERE pk = :pk AND epoch = :epoch FOR UPDATE
), ins AS (
    INSERT INTO schedule_ticks (app_name, schedule_name, tick_key, tick_at, kind, run_id,
                                user_id, session_id, state, created_at, updated_at)
    SELECT :app_name, :name, t->>'tick_key', (t->>'tick_at')::float8, t->>'kind', t->>'run_id',
           t->>'user_id', t->>'session_id', 'PENDING',
           extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp())
      FROM jsonb_array_elements(:ticks::jsonb) AS t
     WHERE EXISTS (SELECT 1 FROM ok)
    ON CONFLICT (app_name, schedule_name, tick_key) DO NOTHING
), adv AS (
    UPDATE schedules
       SET next_tick_at = :next_tick_at::float8,
           last_tick_at = COALESCE(:last_tick_at::float8, last_tick_at),
           missed = missed + :missed::int, updated_at = extract(epoch FROM clock_timestamp())
     WHERE pk IN (SELECT pk FROM ok)
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM ok) THEN 'ok' ELSE 'fenced' END AS status;

-- name: schedule_open_ticks
-- A schedule's ticks recorded but not yet submitted or skipped, in tick order.
SELECT * FROM schedule_ticks
 WHERE app_name = :app_name AND schedule_name = :name AND state = 'PENDING'
 ORDER BY tick_at, pk;

-- name: schedule_tick_done
-- A tick submitted (its run is on the ledger) or skipped; a submitted tick's
-- run becomes the schedule's last run (what the overlap policy looks at).
WITH tick AS (
    UPDATE schedule_ticks
       SET state = :state, detail = :detail, updated_at = extract(epoch FROM clock_timestamp())
     WHERE run_id = :run_id AND state = 'PENDING'
)
UPDATE schedules
   SET last_run_id = :run_id, updated_at = extract(epoch FROM clock_timestamp())
 WHERE app_name = :app_name AND name = :name AND :state::text = 'SUBMITTED';

-- name: schedule_release
-- The claim's end: the schedule's next look is :next_fire_at, unless it was
-- claimed or changed since (a trigger or a resume asked for a look now).
UPDATE schedules
   SET next_fire_at = :next_fire_at::float8, updated_at = extract(epoch FROM clock_timestamp())
 WHERE pk = :pk AND epoch = :epoch;

-- name: schedule_set_paused
-- Pause (:paused = 1) or resume (:paused = 0, from :next_tick_at, looked at
-- now) a schedule, with the audit line, in one unit; a schedule already so
-- changes nothing and writes no line. The result says whether it changed.
WITH upd AS (
    UPDATE schedules
       SET paused = :paused::int, epoch = epoch + 1,
           next_tick_at = COALESCE(:next_tick_at::float8, next_tick_at),
           next_fire_at = CASE WHEN :paused::int = 0 THEN extract(epoch FROM clock_timestamp())
                               ELSE next_fire_at END,
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE app_name = :app_name AND name = :name AND paused <> :paused::int
       AND orphaned_at IS NULL
    RETURNING *
), act AS (
    INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                                  status_after, epoch, detail, created_at)
    SELECT 'schedule:' || name, app_name, :action, :actor, :reason,
           CASE WHEN :paused::int = 1 THEN 'ACTIVE' ELSE 'PAUSED' END,
           CASE WHEN :paused::int = 1 THEN 'PAUSED' ELSE 'ACTIVE' END, epoch, :detail,
           extract(epoch FROM clock_timestamp())
      FROM upd
)
SELECT upd.*, 1 AS changed, extract(epoch FROM clock_timestamp()) AS db_now FROM upd
UNION ALL
SELECT s.*, 0 AS changed, extract(epoch FROM clock_timestamp()) AS db_now
  FROM schedules s
 WHERE s.app_name = :app_name AND s.name = :name AND NOT EXISTS (SELECT 1 FROM upd);

-- name: schedule_trigger
-- Trigger now: a tick of its own key ('trigger:<id>') recorded PENDING for an
-- active schedule, the schedule looked at now, and the audit line, in one
-- unit. A second trigger of the same id fails on the tick's key (nothing written).
WITH s AS (
    SELECT pk, app_name, name, epoch FROM schedules
     WHERE app_name = :app_name AND name = :name AND paused = 0 AND orphaned_at IS NULL
       FOR UPDATE
), ins AS (
    INSERT INTO schedule_ticks (app_name, schedule_name, tick_key, tick_at, kind, run_id,
                                user_id, session_id, state, actor, created_at, updated_at)
    SELECT app_name, name, :tick_key, extract(epoch FROM clock_timestamp()), 'trigger', :run_id,
           :user_id, :session_id, 'PENDING', :actor,
           extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp())
      FROM s
    RETURNING *
), upd AS (
    UPDATE schedules
       SET next_fire_at = extract(epoch FROM clock_timestamp()), epoch = epoch + 1,
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE pk IN (SELECT pk FROM s)
), act AS (
    INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                                  status_after, epoch, detail, created_at)
    SELECT 'schedule:' || name, app_name, 'schedule_trigger', :actor, :reason, 'ACTIVE',
           'ACTIVE', epoch + 1, :detail, extract(epoch FROM clock_timestamp())
      FROM s
)
SELECT * FROM ins;

-- name: schedule_tick_get
SELECT * FROM schedule_ticks
 WHERE app_name = :app_name AND schedule_name = :name AND tick_key = :tick_key;

-- name: schedule_ticks_recent
-- A schedule's latest ticks, newest first.
SELECT * FROM schedule_ticks
 WHERE app_name = :app_name AND schedule_name = :name ORDER BY pk DESC LIMIT :limit::int;

-- name: schedule_rewind
-- Tests and benches: put a schedule's next tick (and next look) at given times.
UPDATE schedules
   SET next_tick_at = :next_tick_at::float8, next_fire_at = :next_fire_at::float8,
       epoch = epoch + 1
 WHERE app_name = :app_name AND name = :name;

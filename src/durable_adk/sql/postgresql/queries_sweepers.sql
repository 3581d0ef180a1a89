-- Recovery sweepers: who recovers each app's runs, and when they last did.

-- name: sweeper_beat
-- A sweeper's pass (begun, going on, or ended), by the database clock; rows of
-- sweepers silent for a day are dropped (worker ids are new in every process).
WITH beat AS (
    INSERT INTO sweepers (app_name, worker_id, interval_s, last_sweep_at,
                          app_version, app_fingerprint, serves)
    VALUES (:app_name, :worker_id, :interval_s::float8, extract(epoch FROM clock_timestamp()),
            :app_version::text, :app_fingerprint::text, :serves::text)
    ON CONFLICT (app_name, worker_id) DO UPDATE
       SET interval_s = excluded.interval_s, last_sweep_at = excluded.last_sweep_at,
           app_version = excluded.app_version, app_fingerprint = excluded.app_fingerprint,
           serves = excluded.serves
)
DELETE FROM sweepers
 WHERE app_name = :app_name AND worker_id <> :worker_id
   AND last_sweep_at < extract(epoch FROM clock_timestamp()) - 86400.0;

-- name: sweeper_seen
-- How many sweepers of an app are live (a periodic one whose last beat is
-- within three of its intervals plus :grace; a one-off pass within
-- :one_off_window), and the newest beat of any.
SELECT (SELECT COUNT(*) FROM sweepers
         WHERE app_name = :app_name
           AND last_sweep_at >= extract(epoch FROM clock_timestamp())
               - COALESCE(3 * interval_s + :grace::float8, :one_off_window::float8)) AS alive,
       (SELECT MAX(last_sweep_at) FROM sweepers WHERE app_name = :app_name) AS last_sweep_at,
       extract(epoch FROM clock_timestamp()) AS now;

-- name: worker_beat
-- A serving process's beat (database clock) and what it serves; it is serving
-- again if it had left. Rows of processes silent for a day are dropped.
WITH beat AS (
    INSERT INTO workers (app_name, worker_id, app_version, app_fingerprint, serves, beat_s,
                         last_beat_at, started_at)
    VALUES (:app_name, :worker_id, :app_version::text, :app_fingerprint::text, :serves::text,
            :beat_s::float8, extract(epoch FROM clock_timestamp()),
            extract(epoch FROM clock_timestamp()))
    ON CONFLICT (app_name, worker_id) DO UPDATE
       SET app_version = excluded.app_version, app_fingerprint = excluded.app_fingerprint,
           serves = excluded.serves, beat_s = excluded.beat_s,
           last_beat_at = excluded.last_beat_at, left_at = NULL
)
DELETE FROM workers
 WHERE app_name = :app_name AND worker_id <> :worker_id
   AND last_beat_at < extract(epoch FROM clock_timestamp()) - 86400.0;

-- name: worker_leave
-- A serving process's goodbye: no longer listed as serving.
UPDATE workers SET left_at = extract(epoch FROM clock_timestamp())
 WHERE app_name = :app_name AND worker_id = :worker_id AND left_at IS NULL;

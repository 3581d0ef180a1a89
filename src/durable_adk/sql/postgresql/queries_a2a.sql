-- Durable A2A (issue 44): tasks, their events, the runs they drove, message
-- ids taken, push configs. A task's state, version and the event that made the
-- version are written in one statement.

-- name: a2a_task_get
SELECT task_id, app_name, owner, context_id, state, version, body
  FROM a2a_tasks
 WHERE task_id = :task_id::text AND app_name = :app_name::text AND owner = :owner::text;

-- name: a2a_task_state
SELECT state FROM a2a_tasks WHERE task_id = :task_id::text AND app_name = :app_name::text;

-- name: a2a_task_version
-- The stored version of a task (what a save that overwrites it will make the next of).
SELECT version FROM a2a_tasks WHERE task_id = :task_id::text;

-- name: a2a_task_save
-- A save of a task (compare-and-swap on its version): :prev_version 0 is a
-- first write; :force 1 writes whatever the stored version (the SDK's plain
-- TaskStore); :canceling 1 moves a task that is not terminal to CANCELED
-- whatever its version. A terminal task is never written again (a late event
-- of a canceled task changes nothing), nor another owner's or app's. The
-- event (a StreamResponse) that made the new version is stored with it, and
-- queued in the push outbox for each push config of the task. The
-- stored row is locked first, so two saves from one version: one wins.
-- :expect (not NULL) is the version the writer sealed its event for
-- (encryption at rest: the event's associated data names the version it
-- makes): another stored version is 'stale', and the writer reads again.
WITH cur AS (
    SELECT version, state, app_name, owner FROM a2a_tasks
     WHERE task_id = :task_id::text FOR UPDATE
), ok AS (
    SELECT 1 AS one
     WHERE NOT EXISTS (SELECT 1 FROM cur WHERE app_name <> :app_name::text
                                            OR owner <> :owner::text)
       AND (:expect::bigint IS NULL
            OR COALESCE((SELECT version FROM cur), 0) = :expect::bigint)
       AND (:force::int = 1 OR NOT EXISTS (
            SELECT 1 FROM cur WHERE state IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED',
                                              'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED')))
       AND CASE
             WHEN :force::int = 1 THEN true
             WHEN :canceling::int = 1 THEN EXISTS (
                  SELECT 1 FROM cur WHERE state NOT IN ('TASK_STATE_COMPLETED',
                        'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED'))
             WHEN :prev_version::bigint = 0 THEN NOT EXISTS (SELECT 1 FROM cur)
             ELSE EXISTS (SELECT 1 FROM cur WHERE version = :prev_version::bigint)
           END
), up AS (
    INSERT INTO a2a_tasks (task_id, app_name, owner, context_id, state, version, body,
                           created_at, updated_at)
    SELECT :task_id::text, :app_name::text, :owner::text, :context_id::text, :state::text, 1,
           :body::text, extract(epoch FROM clock_timestamp()),
           extract(epoch FROM clock_timestamp())
      FROM ok
    ON CONFLICT (task_id) DO UPDATE
       SET state = excluded.state, body = excluded.body, context_id = excluded.context_id,
           version = a2a_tasks.version + 1, updated_at = excluded.updated_at
     WHERE :prev_version::bigint <> 0 OR :force::int = 1 OR :canceling::int = 1
    RETURNING version, updated_at
), ev AS (
    INSERT INTO a2a_task_events (task_id, version, body, created_at)
    SELECT :task_id::text, version, :event::text, updated_at FROM up
     WHERE :event::text IS NOT NULL
    ON CONFLICT (task_id, version) DO NOTHING
), push AS (
    INSERT INTO a2a_push_outbox (app_name, task_id, owner, config_id, version, config, body,
                                 status, attempts, next_attempt_at, created_at)
    SELECT :app_name::text, p.task_id, p.owner, p.config_id, up.version, p.body, :event::text,
           'PENDING', 0, up.updated_at, up.updated_at
      FROM a2a_push_configs p, up
     WHERE p.task_id = :task_id::text AND :event::text IS NOT NULL
    ON CONFLICT (task_id, owner, config_id, version) DO NOTHING
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM up) THEN 'ok'
            WHEN :expect::bigint IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM cur WHERE app_name <> :app_name::text
                                                    OR owner <> :owner::text)
                 AND COALESCE((SELECT version FROM cur), 0) <> :expect::bigint THEN 'stale'
            ELSE 'conflict' END AS status,
       (SELECT version FROM up) AS version;

-- name: a2a_task_delete
WITH gone AS (
    DELETE FROM a2a_tasks WHERE task_id = :task_id::text AND app_name = :app_name::text
       AND owner = :owner::text
    RETURNING task_id
), ev AS (
    DELETE FROM a2a_task_events WHERE task_id IN (SELECT task_id FROM gone)
), push AS (
    DELETE FROM a2a_push_configs WHERE task_id IN (SELECT task_id FROM gone)
)
SELECT COUNT(*) AS n FROM gone;

-- name: a2a_task_list
-- One page of an owner's tasks, newest change first (:context_id and :state
-- NULL: any), with how many match in all.
SELECT task_id, version, body, COUNT(*) OVER () AS total
  FROM a2a_tasks
 WHERE app_name = :app_name::text AND owner = :owner::text
   AND (:context_id::text IS NULL OR context_id = :context_id::text)
   AND (:state::text IS NULL OR state = :state::text)
   AND (:updated_after::float8 IS NULL OR updated_at >= :updated_after::float8)
 ORDER BY updated_at DESC, task_id DESC
 LIMIT :limit::bigint OFFSET :offset::bigint;

-- name: a2a_event_publish
-- An event a replica published that no save stored (a save stores its own).
INSERT INTO a2a_task_events (task_id, version, body, created_at)
VALUES (:task_id::text, :version::bigint, :body::text, extract(epoch FROM clock_timestamp()))
ON CONFLICT (task_id, version) DO NOTHING;

-- name: a2a_events_after
SELECT task_id, version, body FROM a2a_task_events
 WHERE task_id = :task_id::text AND version > :after::bigint
 ORDER BY version
 LIMIT :limit::bigint;

-- name: a2a_task_link_run
-- The invocation a task drives (its first run, or a new turn it started).
INSERT INTO a2a_task_runs (task_id, app_name, user_id, session_id, invocation_id, created_at)
VALUES (:task_id::text, :app_name::text, :user_id::text, :session_id::text,
        :invocation_id::text, extract(epoch FROM clock_timestamp()))
ON CONFLICT (task_id, invocation_id) DO NOTHING;

-- name: a2a_task_runs_of
-- A task's invocations, newest last, each with its newest run.
SELECT l.task_id, l.user_id, l.session_id, l.invocation_id, r.run_id, r.status,
       r.last_error, r.classification
  FROM a2a_task_runs l
  LEFT JOIN runs r
    ON r.pk = (SELECT MAX(pk) FROM runs x
                WHERE x.app_name = l.app_name AND x.user_id = l.user_id
                  AND x.session_id = l.session_id AND x.invocation_id = l.invocation_id)
 WHERE l.task_id = :task_id::text AND l.app_name = :app_name::text
 ORDER BY l.created_at, l.invocation_id;

-- name: a2a_tasks_of_invocation
SELECT l.task_id, t.state, t.context_id, t.owner
  FROM a2a_task_runs l JOIN a2a_tasks t ON t.task_id = l.task_id
 WHERE l.invocation_id = :invocation_id::text
 ORDER BY l.created_at;

-- name: a2a_tasks_to_sync
-- Tasks not ended of an app whose newest invocation's newest
-- run has ended (at least :grace seconds ago, so a live drive publishes its own
-- end first), or whose invocation has no run :orphan_grace seconds after the
-- link (the worker died before the run was recorded). A run PAUSED or PARKED
-- may leave its task open (a sleep is working; a park is working, for an
-- operator): such a task is taken only when it was not written since the run
-- stopped, so each pause or park is published once. A task waiting for its
-- client (input-required, auth-required) is taken when a run its client did
-- not send moved it on since (the inbox's answer, a deadline's default, a
-- job's result, an operator's cancel) and stopped.
SELECT t.task_id, t.owner, t.context_id, t.state, t.version, t.body,
       l.user_id, l.session_id, l.invocation_id, r.run_id, r.status AS run_status,
       r.last_error, r.classification
  FROM a2a_tasks t
  JOIN a2a_task_runs l
    ON l.task_id = t.task_id
   AND l.invocation_id = (SELECT y.invocation_id FROM a2a_task_runs y WHERE y.task_id = t.task_id
                           ORDER BY y.created_at DESC, y.invocation_id DESC LIMIT 1)
  LEFT JOIN runs r
    ON r.pk = (SELECT MAX(pk) FROM runs x
                WHERE x.app_name = l.app_name AND x.user_id = l.user_id
                  AND x.session_id = l.session_id AND x.invocation_id = l.invocation_id)
 WHERE t.app_name = :app_name::text
   AND t.state IN ('TASK_STATE_SUBMITTED', 'TASK_STATE_WORKING',
                   'TASK_STATE_INPUT_REQUIRED', 'TASK_STATE_AUTH_REQUIRED')
   AND ((r.status IN ('DONE', 'FAILED', 'CANCELLED', 'PAUSED', 'PARKED')
         AND r.updated_at <= extract(epoch FROM clock_timestamp()) - :grace::float8
         AND ((t.state IN ('TASK_STATE_SUBMITTED', 'TASK_STATE_WORKING')
               AND r.status NOT IN ('PAUSED', 'PARKED'))
              OR t.updated_at < r.updated_at))
        OR (r.pk IS NULL AND t.state IN ('TASK_STATE_SUBMITTED', 'TASK_STATE_WORKING')
            AND l.created_at <= extract(epoch FROM clock_timestamp()) - :orphan_grace::float8))
 LIMIT :limit::bigint;

-- name: a2a_tasks_waiting
-- Open tasks of an app whose newest invocation's newest run is recorded under a
-- version and nobody holds it (QUEUED, or RUNNING with its lease run out at
-- least :grace seconds ago), not written since the lease ran out: the caller
-- says which of them wait for a worker of their version.
SELECT t.task_id, t.owner, t.context_id, t.state, t.version, t.body,
       l.user_id, l.session_id, l.invocation_id, r.run_id, r.status AS run_status,
       r.last_error, r.classification, r.app_version
  FROM a2a_tasks t
  JOIN a2a_task_runs l
    ON l.task_id = t.task_id
   AND l.invocation_id = (SELECT y.invocation_id FROM a2a_task_runs y WHERE y.task_id = t.task_id
                           ORDER BY y.created_at DESC, y.invocation_id DESC LIMIT 1)
  JOIN runs r
    ON r.pk = (SELECT MAX(pk) FROM runs x
                WHERE x.app_name = l.app_name AND x.user_id = l.user_id
                  AND x.session_id = l.session_id AND x.invocation_id = l.invocation_id)
 WHERE t.app_name = :app_name::text
   AND t.state IN ('TASK_STATE_SUBMITTED', 'TASK_STATE_WORKING')
   AND r.status IN ('QUEUED', 'RUNNING')
   AND r.app_version IS NOT NULL
   AND r.lease_until <= extract(epoch FROM clock_timestamp()) - :grace::float8
   AND t.updated_at < r.lease_until
 LIMIT :limit::bigint;

-- name: a2a_pause_waits_on
-- What a paused invocation waits on: its earliest open timer (a durable sleep),
-- its open jobs that are not timers, and its open questions in the inbox.
SELECT (SELECT MIN(j.deadline_at) FROM jobs j
         WHERE j.invocation_id = :invocation_id::text AND j.timer = 1 AND j.state = 'STARTED')
         AS wakes_at,
       (SELECT COUNT(*) FROM jobs j
         WHERE j.invocation_id = :invocation_id::text AND j.timer = 0 AND j.state = 'STARTED')
         AS jobs,
       (SELECT COUNT(*) FROM interrupts i
         WHERE i.app_name = :app_name::text AND i.user_id = :user_id::text AND i.session_id = :session_id::text
           AND i.invocation_id = :invocation_id::text AND i.status = 'OPEN') AS asks;

-- name: a2a_message_claim
-- Takes a message id for a task in its context, or finds the task that took it.
WITH ins AS (
    INSERT INTO a2a_messages (app_name, owner, context_id, message_id, task_id, nonce,
                              created_at)
    VALUES (:app_name::text, :owner::text, :context_id::text, :message_id::text,
            :task_id::text, :nonce::text, extract(epoch FROM clock_timestamp()))
    ON CONFLICT (app_name, owner, context_id, message_id) DO NOTHING
    RETURNING task_id, nonce
)
SELECT task_id, nonce FROM ins
UNION ALL
SELECT task_id, nonce FROM a2a_messages
 WHERE app_name = :app_name::text AND owner = :owner::text AND context_id = :context_id::text
   AND message_id = :message_id::text AND NOT EXISTS (SELECT 1 FROM ins);

-- name: a2a_push_set
INSERT INTO a2a_push_configs (task_id, owner, config_id, body, created_at)
VALUES (:task_id::text, :owner::text, :config_id::text, :body::text,
        extract(epoch FROM clock_timestamp()))
ON CONFLICT (task_id, owner, config_id) DO UPDATE SET body = excluded.body;

-- name: a2a_push_get
SELECT task_id, owner, config_id, body FROM a2a_push_configs
 WHERE task_id = :task_id::text AND owner = :owner::text
 ORDER BY created_at, config_id;

-- name: a2a_push_for_dispatch
SELECT task_id, owner, config_id, body FROM a2a_push_configs
 WHERE task_id = :task_id::text
 ORDER BY created_at, config_id;

-- name: a2a_push_delete
DELETE FROM a2a_push_configs
 WHERE task_id = :task_id::text AND owner = :owner::text
   AND (:config_id::text IS NULL OR config_id = :config_id::text);

-- name: a2a_push_claim
-- Takes the app's due pushes for :lease seconds (a delivery that dies with its
-- worker is taken again after it), counting the attempt.
UPDATE a2a_push_outbox
   SET attempts = attempts + 1,
       next_attempt_at = extract(epoch FROM clock_timestamp()) + :lease::float8
 WHERE pk IN (SELECT pk FROM a2a_push_outbox
               WHERE app_name = :app_name::text AND status = 'PENDING'
                 AND next_attempt_at <= extract(epoch FROM clock_timestamp())
               ORDER BY next_attempt_at, pk
               LIMIT :limit::bigint
               FOR UPDATE SKIP LOCKED)
RETURNING pk, task_id, owner, config_id, version, config, body, attempts;

-- name: a2a_push_sent
UPDATE a2a_push_outbox
   SET status = 'SENT', sent_at = extract(epoch FROM clock_timestamp()), last_error = NULL
 WHERE pk = :pk::bigint AND status = 'PENDING';

-- name: a2a_push_failed
-- A failed attempt: tried again after :backoff seconds, or DEAD after :max_attempts.
UPDATE a2a_push_outbox
   SET status = CASE WHEN attempts >= :max_attempts::bigint THEN 'DEAD' ELSE 'PENDING' END,
       next_attempt_at = extract(epoch FROM clock_timestamp()) + :backoff::float8,
       last_error = :error::text
 WHERE pk = :pk::bigint AND status = 'PENDING';

-- name: a2a_push_list
SELECT pk, task_id, owner, config_id, version, status, attempts, last_error, created_at, sent_at
  FROM a2a_push_outbox
 WHERE app_name = :app_name::text AND (:status::text IS NULL OR status = :status::text)
 ORDER BY pk
 LIMIT :limit::bigint;

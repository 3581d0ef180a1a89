-- Data lifecycle (issue 43): retention's purge and forgetting a user
-- (durable_adk.lifecycle). A session is marked for purging (purging_at) by
-- one statement that checks nothing still needs it; an append to a marked
-- session finds it missing. Its rows in every table then go in short batches,
-- each on an index, each returning one row per row deleted with its size;
-- the session row goes last. The statements of one shape per table
-- (purge_<table>, scrub_pick_<table>, scrub_<table>) and purge_preview are
-- written by scripts/gen_lifecycle_sql.py from its one table of steps, for
-- both dialects alike: change the table there and run it, not these statements
-- (tests/unit/test_lifecycle_sql.py fails when they differ). The rest is
-- written by hand.

-- name: purging_sessions fragment
-- The sessions of :app_name being purged (of :user_id only, when given), for
-- the purge's batches (used as "-- use: purging_sessions"): a small set on the
-- partial index sessions_purging, marked a batch at a time.
purging AS (
    SELECT pk, app_name, user_id, session_id FROM sessions
     WHERE app_name = :app_name::text AND purging_at IS NOT NULL
       AND (:user_id::text IS NULL OR user_id = :user_id::text)
),

-- name: purge_events
-- A batch of the events of the sessions being purged (their primary key: session, seq).
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.session_pk, x.seq FROM purging p
      JOIN events x ON x.session_pk = p.pk
     LIMIT :batch::int
)
, locked AS (
    SELECT t.session_pk, t.seq FROM events t JOIN doomed d ON t.session_pk = d.session_pk AND t.seq = d.seq
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM events t USING locked d WHERE t.session_pk = d.session_pk AND t.seq = d.seq
RETURNING octet_length(t.data) + COALESCE(octet_length(t.delta), 0) AS bytes;

-- name: purge_state_snapshots
-- A batch of their state snapshots.
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.session_pk, x.seq FROM purging p
      JOIN state_snapshots x ON x.session_pk = p.pk
     LIMIT :batch::int
)
, locked AS (
    SELECT t.session_pk, t.seq FROM state_snapshots t JOIN doomed d ON t.session_pk = d.session_pk AND t.seq = d.seq
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM state_snapshots t USING locked d WHERE t.session_pk = d.session_pk AND t.seq = d.seq
RETURNING octet_length(t.state) AS bytes;

-- name: purge_event_repairs
-- A batch of their event repairs' records (they hold the events as stored).
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.pk FROM purging p
      JOIN event_repairs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.pk FROM event_repairs t JOIN doomed d ON t.pk = d.pk
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM event_repairs t USING locked d WHERE t.pk = d.pk
RETURNING octet_length(t.original) + octet_length(t.replacement) AS bytes;

-- name: purge_artifacts
-- A batch of their artifacts (every version; '' sessions are a user's own artifacts).
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.app_name, x.user_id, x.session_id, x.filename, x.version FROM purging p
      JOIN artifacts x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.app_name, t.user_id, t.session_id, t.filename, t.version FROM artifacts t JOIN doomed d ON t.app_name = d.app_name AND t.user_id = d.user_id AND t.session_id = d.session_id AND t.filename = d.filename AND t.version = d.version
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM artifacts t USING locked d WHERE t.app_name = d.app_name AND t.user_id = d.user_id AND t.session_id = d.session_id AND t.filename = d.filename AND t.version = d.version
RETURNING octet_length(t.part) + octet_length(t.custom_metadata) AS bytes;

-- name: purge_journal
-- A batch of the journal entries of their runs' invocations.
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.key FROM purging p
      JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
      JOIN journal x ON x.invocation_id = r.invocation_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.key FROM journal t JOIN doomed d ON t.key = d.key
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM journal t USING locked d WHERE t.key = d.key
RETURNING octet_length(t.key) + COALESCE(octet_length(t.result), 0) AS bytes;

-- name: purge_dead_letters
-- A batch of their runs' dead letters.
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.pk FROM purging p
      JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
      JOIN dead_letters x ON x.run_id = r.run_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.pk FROM dead_letters t JOIN doomed d ON t.pk = d.pk
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM dead_letters t USING locked d WHERE t.pk = d.pk
RETURNING COALESCE(octet_length(t.request), 0) + COALESCE(octet_length(t.last_events), 0) + octet_length(t.error) AS bytes;

-- name: purge_schedule_ticks
-- A batch of the schedule firings that started their runs.
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.pk FROM purging p
      JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
      JOIN schedule_ticks x ON x.run_id = r.run_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.pk FROM schedule_ticks t JOIN doomed d ON t.pk = d.pk
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM schedule_ticks t USING locked d WHERE t.pk = d.pk
RETURNING COALESCE(octet_length(t.detail), 0) AS bytes;

-- name: purge_operator_actions
-- A batch of the operators' audit lines about their runs (forgetting a user only: retention keeps the audit).
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.pk FROM purging p
      JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
      JOIN operator_actions x ON x.run_id = r.run_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.pk FROM operator_actions t JOIN doomed d ON t.pk = d.pk
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM operator_actions t USING locked d WHERE t.pk = d.pk
RETURNING COALESCE(octet_length(t.reason), 0) + COALESCE(octet_length(t.detail), 0) AS bytes;

-- name: purge_job_calls
-- A batch of the calls their runs' invocations attached to jobs.
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.job_id, x.app_name, x.user_id, x.session_id, x.function_call_id FROM purging p
      JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
      JOIN job_calls x ON x.invocation_id = r.invocation_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.job_id, t.app_name, t.user_id, t.session_id, t.function_call_id FROM job_calls t JOIN doomed d ON t.job_id = d.job_id AND t.app_name = d.app_name AND t.user_id = d.user_id AND t.session_id = d.session_id AND t.function_call_id = d.function_call_id
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM job_calls t USING locked d WHERE t.job_id = d.job_id AND t.app_name = d.app_name AND t.user_id = d.user_id AND t.session_id = d.session_id AND t.function_call_id = d.function_call_id
RETURNING octet_length(t.function_call_id) AS bytes;

-- name: purge_jobs
-- A batch of the jobs of their sessions (a job's other calls go with it).
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.job_id FROM purging p
      JOIN jobs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.job_id FROM jobs t JOIN doomed d ON t.job_id = d.job_id
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM jobs t USING locked d WHERE t.job_id = d.job_id
RETURNING COALESCE(octet_length(t.request), 0) + COALESCE(octet_length(t.result), 0) + COALESCE(octet_length(t.progress), 0) + COALESCE(octet_length(t.progress_sent), 0) AS bytes;

-- name: purge_saga_steps
-- A batch of the steps of their sagas.
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.pk FROM purging p
      JOIN sagas g ON g.app_name = p.app_name AND g.user_id = p.user_id AND g.session_id = p.session_id
      JOIN saga_steps x ON x.saga_id = g.saga_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.pk FROM saga_steps t JOIN doomed d ON t.pk = d.pk
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM saga_steps t USING locked d WHERE t.pk = d.pk
RETURNING COALESCE(octet_length(t.record), 0) + COALESCE(octet_length(t.last_error), 0) AS bytes;

-- name: purge_sagas
-- A batch of their sagas.
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.saga_id FROM purging p
      JOIN sagas x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.saga_id FROM sagas t JOIN doomed d ON t.saga_id = d.saga_id
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM sagas t USING locked d WHERE t.saga_id = d.saga_id
RETURNING COALESCE(octet_length(t.reason), 0) AS bytes;

-- name: purge_interrupts
-- A batch of their interrupts, answered or not.
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.pk FROM purging p
      JOIN interrupts x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.pk FROM interrupts t JOIN doomed d ON t.pk = d.pk
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM interrupts t USING locked d WHERE t.pk = d.pk
RETURNING COALESCE(octet_length(t.args), 0) + COALESCE(octet_length(t.answer), 0) AS bytes;

-- name: purge_answer_claims
-- A batch of the claims of their interrupts' answers.
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.app_name, x.user_id, x.session_id, x.invocation_id, x.call_id, x.ask FROM purging p
      JOIN answer_claims x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.app_name, t.user_id, t.session_id, t.invocation_id, t.call_id, t.ask FROM answer_claims t JOIN doomed d ON t.app_name = d.app_name AND t.user_id = d.user_id AND t.session_id = d.session_id AND t.invocation_id = d.invocation_id AND t.call_id = d.call_id AND t.ask = d.ask
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM answer_claims t USING locked d WHERE t.app_name = d.app_name AND t.user_id = d.user_id AND t.session_id = d.session_id AND t.invocation_id = d.invocation_id AND t.call_id = d.call_id AND t.ask = d.ask
RETURNING octet_length(t.call_id) AS bytes;

-- name: purge_runs
-- A batch of their runs whose journal entries, dead letters, schedule firings and job
-- calls are gone (the batches above find those through the runs: never orphaned).
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.pk FROM purging p
      JOIN runs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     WHERE NOT EXISTS (SELECT 1 FROM journal j WHERE j.invocation_id = x.invocation_id)
       AND NOT EXISTS (SELECT 1 FROM dead_letters l WHERE l.run_id = x.run_id)
       AND NOT EXISTS (SELECT 1 FROM schedule_ticks k WHERE k.run_id = x.run_id)
       AND NOT EXISTS (SELECT 1 FROM job_calls c WHERE c.invocation_id = x.invocation_id)
     LIMIT :batch::int
)
, locked AS (
    SELECT t.pk FROM runs t JOIN doomed d ON t.pk = d.pk
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM runs t USING locked d WHERE t.pk = d.pk
RETURNING octet_length(t.request) + COALESCE(octet_length(t.last_error), 0) AS bytes;

-- name: purge_a2a_task_events
-- A batch of the events of their A2A tasks (a task is theirs through the invocations it drove).
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
tasks AS (
    SELECT DISTINCT l.task_id FROM purging p
      JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id
), doomed AS (
    SELECT x.task_id, x.version FROM tasks k
      JOIN a2a_task_events x ON x.task_id = k.task_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.task_id, t.version FROM a2a_task_events t JOIN doomed d ON t.task_id = d.task_id AND t.version = d.version
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM a2a_task_events t USING locked d WHERE t.task_id = d.task_id AND t.version = d.version
RETURNING octet_length(t.body) AS bytes;

-- name: purge_a2a_push_outbox
-- A batch of their A2A tasks' push outbox rows (sent or dead: a pending push keeps the session).
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
tasks AS (
    SELECT DISTINCT l.task_id FROM purging p
      JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id
), doomed AS (
    SELECT x.pk FROM tasks k
      JOIN a2a_push_outbox x ON x.task_id = k.task_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.pk FROM a2a_push_outbox t JOIN doomed d ON t.pk = d.pk
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM a2a_push_outbox t USING locked d WHERE t.pk = d.pk
RETURNING octet_length(t.config) + octet_length(t.body) + COALESCE(octet_length(t.last_error), 0) AS bytes;

-- name: purge_a2a_push_configs
-- A batch of their A2A tasks' push configs (each holds the client's URL and token).
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
tasks AS (
    SELECT DISTINCT l.task_id FROM purging p
      JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id
), doomed AS (
    SELECT x.task_id, x.owner, x.config_id FROM tasks k
      JOIN a2a_push_configs x ON x.task_id = k.task_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.task_id, t.owner, t.config_id FROM a2a_push_configs t JOIN doomed d ON t.task_id = d.task_id AND t.owner = d.owner AND t.config_id = d.config_id
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM a2a_push_configs t USING locked d WHERE t.task_id = d.task_id AND t.owner = d.owner AND t.config_id = d.config_id
RETURNING octet_length(t.body) AS bytes;

-- name: purge_a2a_messages
-- A batch of the message ids their A2A tasks took.
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
tasks AS (
    SELECT DISTINCT l.task_id FROM purging p
      JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id
), doomed AS (
    SELECT x.app_name, x.owner, x.context_id, x.message_id FROM tasks k
      JOIN a2a_messages x ON x.task_id = k.task_id
     LIMIT :batch::int
)
, locked AS (
    SELECT t.app_name, t.owner, t.context_id, t.message_id FROM a2a_messages t JOIN doomed d ON t.app_name = d.app_name AND t.owner = d.owner AND t.context_id = d.context_id AND t.message_id = d.message_id
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM a2a_messages t USING locked d WHERE t.app_name = d.app_name AND t.owner = d.owner AND t.context_id = d.context_id AND t.message_id = d.message_id
RETURNING octet_length(t.message_id) AS bytes;

-- name: purge_a2a_tasks
-- A batch of their A2A tasks whose events, pushes, push configs and message ids are gone.
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
tasks AS (
    SELECT DISTINCT l.task_id FROM purging p
      JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id
), doomed AS (
    SELECT x.task_id FROM tasks k
      JOIN a2a_tasks x ON x.task_id = k.task_id
     WHERE NOT EXISTS (SELECT 1 FROM a2a_task_events e WHERE e.task_id = x.task_id)
       AND NOT EXISTS (SELECT 1 FROM a2a_push_outbox o WHERE o.task_id = x.task_id)
       AND NOT EXISTS (SELECT 1 FROM a2a_push_configs c WHERE c.task_id = x.task_id)
       AND NOT EXISTS (SELECT 1 FROM a2a_messages m WHERE m.task_id = x.task_id)
     LIMIT :batch::int
)
, locked AS (
    SELECT t.task_id FROM a2a_tasks t JOIN doomed d ON t.task_id = d.task_id
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM a2a_tasks t USING locked d WHERE t.task_id = d.task_id
RETURNING octet_length(t.body) AS bytes;

-- name: purge_a2a_task_runs
-- Last of the A2A rows: a batch of the links of their sessions' invocations to tasks that are gone.
-- Each row once however many purge at a time: a row another purge holds is skipped.
WITH
-- use: purging_sessions
doomed AS (
    SELECT x.task_id, x.invocation_id FROM purging p
      JOIN a2a_task_runs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     WHERE NOT EXISTS (SELECT 1 FROM a2a_tasks t WHERE t.task_id = x.task_id)
     LIMIT :batch::int
)
, locked AS (
    SELECT t.task_id, t.invocation_id FROM a2a_task_runs t JOIN doomed d ON t.task_id = d.task_id AND t.invocation_id = d.invocation_id
       FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM a2a_task_runs t USING locked d WHERE t.task_id = d.task_id AND t.invocation_id = d.invocation_id
RETURNING octet_length(t.invocation_id) AS bytes;

-- name: scrub_pick_journal
-- Payload-only retention: a batch of journal rows of the sessions being purged that still
-- carry a payload, with its size (the skeleton stays).
WITH
-- use: purging_sessions
picked AS (
    SELECT x.key AS key, COALESCE(octet_length(x.result), 0) AS bytes FROM purging p
      JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
      JOIN journal x ON x.invocation_id = r.invocation_id
     WHERE x.result IS NOT NULL
     LIMIT :batch::int
)
SELECT key, bytes FROM picked;

-- name: scrub_journal
-- Drops the payload of the journal rows picked (:keys, a JSON array) that still carry
-- one: a row two purges picked is counted by the one whose update changed it.
UPDATE journal SET result = NULL
 WHERE key IN (SELECT value FROM json_array_elements_text(:keys::json))
   AND result IS NOT NULL
RETURNING key AS key;

-- name: scrub_pick_dead_letters
-- Payload-only retention: a batch of dead_letters rows of the sessions being purged that still
-- carry a payload, with its size (the skeleton stays).
WITH
-- use: purging_sessions
picked AS (
    SELECT x.pk AS key, COALESCE(octet_length(x.request), 0) + COALESCE(octet_length(x.last_events), 0) + octet_length(x.error) AS bytes FROM purging p
      JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
      JOIN dead_letters x ON x.run_id = r.run_id
     WHERE (x.request IS NOT NULL OR x.last_events IS NOT NULL OR x.error <> '')
     LIMIT :batch::int
)
SELECT key, bytes FROM picked;

-- name: scrub_dead_letters
-- Drops the payload of the dead_letters rows picked (:keys, a JSON array) that still carry
-- one: a row two purges picked is counted by the one whose update changed it.
UPDATE dead_letters SET request = NULL, last_events = NULL, error = ''
 WHERE pk IN (SELECT value::bigint FROM json_array_elements_text(:keys::json))
   AND (request IS NOT NULL OR last_events IS NOT NULL OR error <> '')
RETURNING pk AS key;

-- name: scrub_pick_jobs
-- Payload-only retention: a batch of jobs rows of the sessions being purged that still
-- carry a payload, with its size (the skeleton stays).
WITH
-- use: purging_sessions
picked AS (
    SELECT x.job_id AS key, COALESCE(octet_length(x.request), 0) + COALESCE(octet_length(x.result), 0) + COALESCE(octet_length(x.progress), 0) + COALESCE(octet_length(x.progress_sent), 0) AS bytes FROM purging p
      JOIN jobs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     WHERE (x.request IS NOT NULL OR x.result IS NOT NULL OR x.progress IS NOT NULL
        OR x.progress_sent IS NOT NULL)
     LIMIT :batch::int
)
SELECT key, bytes FROM picked;

-- name: scrub_jobs
-- Drops the payload of the jobs rows picked (:keys, a JSON array) that still carry
-- one: a row two purges picked is counted by the one whose update changed it.
UPDATE jobs SET request = NULL, result = NULL, progress = NULL, progress_sent = NULL
 WHERE job_id IN (SELECT value FROM json_array_elements_text(:keys::json))
   AND (request IS NOT NULL OR result IS NOT NULL OR progress IS NOT NULL
        OR progress_sent IS NOT NULL)
RETURNING job_id AS key;

-- name: scrub_pick_saga_steps
-- Payload-only retention: a batch of saga_steps rows of the sessions being purged that still
-- carry a payload, with its size (the skeleton stays).
WITH
-- use: purging_sessions
picked AS (
    SELECT x.pk AS key, COALESCE(octet_length(x.record), 0) + COALESCE(octet_length(x.last_error), 0) AS bytes FROM purging p
      JOIN sagas g ON g.app_name = p.app_name AND g.user_id = p.user_id AND g.session_id = p.session_id
      JOIN saga_steps x ON x.saga_id = g.saga_id
     WHERE (x.record IS NOT NULL OR x.last_error IS NOT NULL)
     LIMIT :batch::int
)
SELECT key, bytes FROM picked;

-- name: scrub_saga_steps
-- Drops the payload of the saga_steps rows picked (:keys, a JSON array) that still carry
-- one: a row two purges picked is counted by the one whose update changed it.
UPDATE saga_steps SET record = NULL, last_error = NULL
 WHERE pk IN (SELECT value::bigint FROM json_array_elements_text(:keys::json))
   AND (record IS NOT NULL OR last_error IS NOT NULL)
RETURNING pk AS key;

-- name: scrub_pick_interrupts
-- Payload-only retention: a batch of interrupts rows of the sessions being purged that still
-- carry a payload, with its size (the skeleton stays).
WITH
-- use: purging_sessions
picked AS (
    SELECT x.pk AS key, COALESCE(octet_length(x.args), 0) + COALESCE(octet_length(x.answer), 0) AS bytes FROM purging p
      JOIN interrupts x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     WHERE (x.args IS NOT NULL OR x.answer IS NOT NULL)
     LIMIT :batch::int
)
SELECT key, bytes FROM picked;

-- name: scrub_interrupts
-- Drops the payload of the interrupts rows picked (:keys, a JSON array) that still carry
-- one: a row two purges picked is counted by the one whose update changed it.
UPDATE interrupts SET args = NULL, answer = NULL
 WHERE pk IN (SELECT value::bigint FROM json_array_elements_text(:keys::json))
   AND (args IS NOT NULL OR answer IS NOT NULL)
RETURNING pk AS key;

-- name: scrub_pick_runs
-- Payload-only retention: a batch of runs rows of the sessions being purged that still
-- carry a payload, with its size (the skeleton stays).
WITH
-- use: purging_sessions
picked AS (
    SELECT x.pk AS key, octet_length(x.request) + COALESCE(octet_length(x.last_error), 0) AS bytes FROM purging p
      JOIN runs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     WHERE (x.request <> '' OR x.last_error IS NOT NULL)
     LIMIT :batch::int
)
SELECT key, bytes FROM picked;

-- name: scrub_runs
-- Drops the payload of the runs rows picked (:keys, a JSON array) that still carry
-- one: a row two purges picked is counted by the one whose update changed it.
UPDATE runs SET request = '', last_error = NULL
 WHERE pk IN (SELECT value::bigint FROM json_array_elements_text(:keys::json))
   AND (request <> '' OR last_error IS NOT NULL)
RETURNING pk AS key;

-- name: purge_unneeded fragment
-- The sessions of :app_name (alias s) that retention lets go and nothing still
-- needs (the rest of a WHERE clause, used as "-- use: purge_unneeded"): older
-- than :before (the latest of the cut-offs: sessions_by_update's range); with
-- runs, or idle since :idle_before; every run of it ended before the cut-off
-- of its ending (abandoned first, then DONE, FAILED, CANCELLED, PARKED; -1:
-- kept for ever), so none is queued, running, paused or asleep; no open job
-- and no job with a call still to answer; no saga unfinished or owing its
-- outcome event; no interrupt still open; no schedule firing pending; no A2A
-- task of it not ended (submitted, working, input- or auth-required) or with
-- a push still to deliver.
      s.app_name = :app_name::text AND s.purging_at IS NULL
       AND s.update_time < :before::float8
       AND (s.update_time < :idle_before::float8
            OR EXISTS (SELECT 1 FROM runs r WHERE r.app_name = s.app_name AND r.user_id = s.user_id AND r.session_id = s.session_id))
       AND NOT EXISTS (
            SELECT 1 FROM runs r
             WHERE r.app_name = s.app_name AND r.user_id = s.user_id AND r.session_id = s.session_id
               AND NOT COALESCE(r.finished_at, r.updated_at) < CASE
                     WHEN r.abandoned_at IS NOT NULL THEN :abandoned_before::float8
                     WHEN r.status = 'DONE' THEN :done_before::float8
                     WHEN r.status = 'FAILED' THEN :failed_before::float8
                     WHEN r.status = 'CANCELLED' THEN :cancelled_before::float8
                     WHEN r.status = 'PARKED' THEN :parked_before::float8
                     ELSE -1 END)
       AND NOT EXISTS (
            SELECT 1 FROM jobs j
             WHERE j.app_name = s.app_name AND j.user_id = s.user_id AND j.session_id = s.session_id
               AND (j.state = 'STARTED'
                    OR EXISTS (SELECT 1 FROM job_calls c
                                WHERE c.job_id = j.job_id AND c.resumed_at IS NULL)))
       AND NOT EXISTS (
            SELECT 1 FROM sagas g
             WHERE g.app_name = s.app_name AND g.user_id = s.user_id AND g.session_id = s.session_id
               AND (g.status IN ('RUNNING', 'COMPENSATING') OR g.unrecorded = 1))
       AND NOT EXISTS (
            SELECT 1 FROM interrupts i WHERE i.app_name = s.app_name AND i.user_id = s.user_id AND i.session_id = s.session_id AND i.status = 'OPEN')
       AND NOT EXISTS (
            SELECT 1 FROM schedule_ticks t
             WHERE t.app_name = s.app_name AND t.state = 'PENDING'
               AND t.user_id = s.user_id AND t.session_id = s.session_id)
       AND NOT EXISTS (
            SELECT 1 FROM a2a_task_runs l JOIN a2a_tasks a ON a.task_id = l.task_id
             WHERE l.app_name = s.app_name AND l.user_id = s.user_id AND l.session_id = s.session_id
               AND (a.state NOT IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED')
                    OR EXISTS (SELECT 1 FROM a2a_push_outbox o
                                WHERE o.task_id = a.task_id AND o.status = 'PENDING')))

-- name: purge_mark
-- Marks a batch of the sessions retention lets go (oldest first): from now on
-- an append to one finds it missing. A session another purge or an append
-- holds is skipped, so two purges never mark one twice.
WITH picked AS (
    SELECT s.pk FROM sessions s
     WHERE
-- use: purge_unneeded
     ORDER BY s.update_time
     LIMIT :batch::int
       FOR UPDATE OF s SKIP LOCKED
)
UPDATE sessions SET purging_at = extract(epoch FROM clock_timestamp())
  FROM picked WHERE sessions.pk = picked.pk AND sessions.purging_at IS NULL
RETURNING sessions.pk;

-- name: purge_preview
-- What a purge would delete now, per table, with its size: the sessions it
-- would mark and those already marked, and their rows (a dry run: reads only).
WITH cand AS (
    SELECT s.pk, s.app_name, s.user_id, s.session_id, s.initial_state FROM sessions s
     WHERE
-- use: purge_unneeded
    UNION ALL
    SELECT s.pk, s.app_name, s.user_id, s.session_id, s.initial_state FROM sessions s
     WHERE s.app_name = :app_name::text AND s.purging_at IS NOT NULL
), k AS (
    SELECT DISTINCT l.task_id FROM cand p
      JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id
)
SELECT 'sessions' AS table_name, COUNT(*) AS row_count,
       COALESCE(SUM(octet_length(p.initial_state)), 0) AS bytes FROM cand p
UNION ALL
SELECT 'events', COUNT(*), COALESCE(SUM(octet_length(x.data) + COALESCE(octet_length(x.delta), 0)), 0) FROM cand p
  JOIN events x ON x.session_pk = p.pk
UNION ALL
SELECT 'state_snapshots', COUNT(*), COALESCE(SUM(octet_length(x.state)), 0) FROM cand p
  JOIN state_snapshots x ON x.session_pk = p.pk
UNION ALL
SELECT 'event_repairs', COUNT(*), COALESCE(SUM(octet_length(x.original) + octet_length(x.replacement)), 0) FROM cand p
  JOIN event_repairs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
UNION ALL
SELECT 'artifacts', COUNT(*), COALESCE(SUM(octet_length(x.part) + octet_length(x.custom_metadata)), 0) FROM cand p
  JOIN artifacts x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
UNION ALL
SELECT 'journal', COUNT(*), COALESCE(SUM(octet_length(x.key) + COALESCE(octet_length(x.result), 0)), 0) FROM cand p
  JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
  JOIN journal x ON x.invocation_id = r.invocation_id
UNION ALL
SELECT 'dead_letters', COUNT(*), COALESCE(SUM(COALESCE(octet_length(x.request), 0) + COALESCE(octet_length(x.last_events), 0) + octet_length(x.error)), 0) FROM cand p
  JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
  JOIN dead_letters x ON x.run_id = r.run_id
UNION ALL
SELECT 'schedule_ticks', COUNT(*), COALESCE(SUM(COALESCE(octet_length(x.detail), 0)), 0) FROM cand p
  JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
  JOIN schedule_ticks x ON x.run_id = r.run_id
UNION ALL
SELECT 'job_calls', COUNT(*), COALESCE(SUM(octet_length(x.function_call_id)), 0) FROM cand p
  JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
  JOIN job_calls x ON x.invocation_id = r.invocation_id
UNION ALL
SELECT 'jobs', COUNT(*), COALESCE(SUM(COALESCE(octet_length(x.request), 0) + COALESCE(octet_length(x.result), 0) + COALESCE(octet_length(x.progress), 0) + COALESCE(octet_length(x.progress_sent), 0)), 0) FROM cand p
  JOIN jobs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
UNION ALL
SELECT 'saga_steps', COUNT(*), COALESCE(SUM(COALESCE(octet_length(x.record), 0) + COALESCE(octet_length(x.last_error), 0)), 0) FROM cand p
  JOIN sagas g ON g.app_name = p.app_name AND g.user_id = p.user_id AND g.session_id = p.session_id
  JOIN saga_steps x ON x.saga_id = g.saga_id
UNION ALL
SELECT 'sagas', COUNT(*), COALESCE(SUM(COALESCE(octet_length(x.reason), 0)), 0) FROM cand p
  JOIN sagas x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
UNION ALL
SELECT 'interrupts', COUNT(*), COALESCE(SUM(COALESCE(octet_length(x.args), 0) + COALESCE(octet_length(x.answer), 0)), 0) FROM cand p
  JOIN interrupts x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
UNION ALL
SELECT 'answer_claims', COUNT(*), COALESCE(SUM(octet_length(x.call_id)), 0) FROM cand p
  JOIN answer_claims x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
UNION ALL
SELECT 'runs', COUNT(*), COALESCE(SUM(octet_length(x.request) + COALESCE(octet_length(x.last_error), 0)), 0) FROM cand p
  JOIN runs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
UNION ALL
SELECT 'a2a_task_events', COUNT(*), COALESCE(SUM(octet_length(x.body)), 0) FROM k
  JOIN a2a_task_events x ON x.task_id = k.task_id
UNION ALL
SELECT 'a2a_push_outbox', COUNT(*), COALESCE(SUM(octet_length(x.config) + octet_length(x.body) + COALESCE(octet_length(x.last_error), 0)), 0) FROM k
  JOIN a2a_push_outbox x ON x.task_id = k.task_id
UNION ALL
SELECT 'a2a_push_configs', COUNT(*), COALESCE(SUM(octet_length(x.body)), 0) FROM k
  JOIN a2a_push_configs x ON x.task_id = k.task_id
UNION ALL
SELECT 'a2a_messages', COUNT(*), COALESCE(SUM(octet_length(x.message_id)), 0) FROM k
  JOIN a2a_messages x ON x.task_id = k.task_id
UNION ALL
SELECT 'a2a_tasks', COUNT(*), COALESCE(SUM(octet_length(x.body)), 0) FROM k
  JOIN a2a_tasks x ON x.task_id = k.task_id
UNION ALL
SELECT 'a2a_task_runs', COUNT(*), COALESCE(SUM(octet_length(x.invocation_id)), 0) FROM cand p
  JOIN a2a_task_runs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id;

-- name: purge_holding
-- Which tables hold rows of the sessions being purged, one flag a table (a read:
-- no write lock). A drain deletes only from those: on SQLite each DELETE is a
-- write of its own, lock and all, and most tables hold nothing for most sessions.
-- A row added after this read waits for the next pass (the sessions go last,
-- only once nothing is left of them).
WITH
-- use: purging_sessions
tasks AS (
    SELECT DISTINCT l.task_id FROM purging p
      JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id
)
SELECT
       EXISTS (SELECT 1 FROM purging p
              JOIN events x ON x.session_pk = p.pk) AS events,
       EXISTS (SELECT 1 FROM purging p
              JOIN state_snapshots x ON x.session_pk = p.pk) AS state_snapshots,
       EXISTS (SELECT 1 FROM purging p
              JOIN event_repairs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS event_repairs,
       EXISTS (SELECT 1 FROM purging p
              JOIN artifacts x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS artifacts,
       EXISTS (SELECT 1 FROM purging p
              JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
              JOIN journal x ON x.invocation_id = r.invocation_id) AS journal,
       EXISTS (SELECT 1 FROM purging p
              JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
              JOIN dead_letters x ON x.run_id = r.run_id) AS dead_letters,
       EXISTS (SELECT 1 FROM purging p
              JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
              JOIN schedule_ticks x ON x.run_id = r.run_id) AS schedule_ticks,
       EXISTS (SELECT 1 FROM purging p
              JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
              JOIN operator_actions x ON x.run_id = r.run_id) AS operator_actions,
       EXISTS (SELECT 1 FROM purging p
              JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
              JOIN job_calls x ON x.invocation_id = r.invocation_id) AS job_calls,
       EXISTS (SELECT 1 FROM purging p
              JOIN jobs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS jobs,
       EXISTS (SELECT 1 FROM purging p
              JOIN sagas g ON g.app_name = p.app_name AND g.user_id = p.user_id AND g.session_id = p.session_id
              JOIN saga_steps x ON x.saga_id = g.saga_id) AS saga_steps,
       EXISTS (SELECT 1 FROM purging p
              JOIN sagas x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS sagas,
       EXISTS (SELECT 1 FROM purging p
              JOIN interrupts x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS interrupts,
       EXISTS (SELECT 1 FROM purging p
              JOIN answer_claims x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS answer_claims,
       EXISTS (SELECT 1 FROM purging p
              JOIN runs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS runs,
       EXISTS (SELECT 1 FROM tasks k
              JOIN a2a_task_events x ON x.task_id = k.task_id) AS a2a_task_events,
       EXISTS (SELECT 1 FROM tasks k
              JOIN a2a_push_outbox x ON x.task_id = k.task_id) AS a2a_push_outbox,
       EXISTS (SELECT 1 FROM tasks k
              JOIN a2a_push_configs x ON x.task_id = k.task_id) AS a2a_push_configs,
       EXISTS (SELECT 1 FROM tasks k
              JOIN a2a_messages x ON x.task_id = k.task_id) AS a2a_messages,
       EXISTS (SELECT 1 FROM tasks k
              JOIN a2a_tasks x ON x.task_id = k.task_id) AS a2a_tasks,
       EXISTS (SELECT 1 FROM purging p
              JOIN a2a_task_runs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS a2a_task_runs;

-- name: purge_sessions
-- Last: the sessions being purged with nothing left of them (nothing at all, or
-- with :keep_skeleton, nothing but the ledger's rows without their payloads).
WITH
-- use: purging_sessions
doomed AS (
    SELECT p.pk FROM purging p
     WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.session_pk = p.pk)
       AND NOT EXISTS (SELECT 1 FROM artifacts a WHERE a.app_name = p.app_name AND a.user_id = p.user_id AND a.session_id = p.session_id)
       AND NOT EXISTS (SELECT 1 FROM event_repairs v WHERE v.app_name = p.app_name AND v.user_id = p.user_id AND v.session_id = p.session_id)
       AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
                        AND (NOT :keep_skeleton::boolean OR r.request <> '' OR r.last_error IS NOT NULL))
       AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.app_name = p.app_name AND j.user_id = p.user_id AND j.session_id = p.session_id
                        AND (NOT :keep_skeleton::boolean OR j.request IS NOT NULL OR j.result IS NOT NULL
                             OR j.progress IS NOT NULL OR j.progress_sent IS NOT NULL))
       AND NOT EXISTS (SELECT 1 FROM sagas g WHERE g.app_name = p.app_name AND g.user_id = p.user_id AND g.session_id = p.session_id
                        AND (NOT :keep_skeleton::boolean OR EXISTS (
                             SELECT 1 FROM saga_steps t WHERE t.saga_id = g.saga_id
                                AND (t.record IS NOT NULL OR t.last_error IS NOT NULL))))
       AND NOT EXISTS (SELECT 1 FROM interrupts i WHERE i.app_name = p.app_name AND i.user_id = p.user_id AND i.session_id = p.session_id
                        AND (NOT :keep_skeleton::boolean OR i.args IS NOT NULL OR i.answer IS NOT NULL))
       AND (:keep_skeleton::boolean OR NOT EXISTS (SELECT 1 FROM answer_claims c WHERE c.app_name = p.app_name AND c.user_id = p.user_id AND c.session_id = p.session_id))
       AND NOT EXISTS (SELECT 1 FROM a2a_task_runs l WHERE l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id)
     LIMIT :batch::int
)
, locked AS (
    SELECT t.pk FROM sessions t JOIN doomed d ON t.pk = d.pk FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM sessions t USING locked d WHERE t.pk = d.pk
RETURNING octet_length(t.initial_state) AS bytes;

-- name: lifecycle_apps
-- Every app with sessions or runs, by a skip over the indexes' first column
-- (one index probe per app, not a scan of the tables).
WITH RECURSIVE a(app_name) AS (
    SELECT (SELECT app_name FROM sessions ORDER BY app_name LIMIT 1)
    UNION ALL
    SELECT (SELECT s.app_name FROM sessions s WHERE s.app_name > a.app_name
             ORDER BY s.app_name LIMIT 1)
      FROM a WHERE a.app_name IS NOT NULL
), b(app_name) AS (
    SELECT (SELECT app_name FROM runs ORDER BY app_name LIMIT 1)
    UNION ALL
    SELECT (SELECT r.app_name FROM runs r WHERE r.app_name > b.app_name
             ORDER BY r.app_name LIMIT 1)
      FROM b WHERE b.app_name IS NOT NULL
)
SELECT app_name FROM a WHERE app_name IS NOT NULL
UNION
SELECT app_name FROM b WHERE app_name IS NOT NULL
ORDER BY app_name;

-- name: purge_checkpoint
-- After a batch: nothing to do on PostgreSQL (autovacuum makes the dead rows reusable).
SELECT 1 AS done;

-- name: purge_oldest
-- The oldest row kept of an app, per table (a metric): its least recently
-- updated session and its run that finished first (both on an index).
SELECT (SELECT update_time FROM sessions WHERE app_name = :app_name::text
         ORDER BY app_name, update_time LIMIT 1) AS sessions,
       (SELECT finished_at FROM runs WHERE app_name = :app_name::text AND finished_at IS NOT NULL
         ORDER BY app_name, finished_at LIMIT 1) AS runs,
       extract(epoch FROM clock_timestamp()) AS now;

-- name: forget_live_runs
-- The runs of a user that are still under way (queued, running, paused or asleep).
SELECT run_id, status, session_id FROM runs
 WHERE app_name = :app_name::text AND user_id = :user_id::text
   AND status IN ('QUEUED', 'RUNNING', 'PAUSED')
 ORDER BY pk;

-- name: forget_mark
-- Marks every session of a user for purging, and adds a marked stand-in for
-- each session id the user's rows name without a session row (a deleted
-- session's runs, a user's own artifacts under ''), so the purge's batches
-- reach every row of the user through the sessions being purged.
WITH marked AS (
    UPDATE sessions SET purging_at = extract(epoch FROM clock_timestamp())
     WHERE app_name = :app_name::text AND user_id = :user_id::text AND purging_at IS NULL
    RETURNING pk
), named AS (
    SELECT session_id FROM runs WHERE app_name = :app_name::text AND user_id = :user_id::text
    UNION SELECT session_id FROM jobs WHERE app_name = :app_name::text AND user_id = :user_id::text
    UNION SELECT session_id FROM sagas WHERE app_name = :app_name::text AND user_id = :user_id::text
    UNION SELECT session_id FROM interrupts WHERE app_name = :app_name::text AND user_id = :user_id::text
    UNION SELECT session_id FROM artifacts WHERE app_name = :app_name::text AND user_id = :user_id::text
    UNION SELECT session_id FROM answer_claims WHERE app_name = :app_name::text AND user_id = :user_id::text
    UNION SELECT session_id FROM event_repairs WHERE app_name = :app_name::text AND user_id = :user_id::text
    UNION SELECT session_id FROM a2a_task_runs WHERE app_name = :app_name::text AND user_id = :user_id::text
), added AS (
    INSERT INTO sessions (app_name, user_id, session_id, initial_state, last_seq,
                          create_time, update_time, purging_at)
    SELECT :app_name::text, :user_id::text, n.session_id, '{}', 0, extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp())
      FROM named n WHERE n.session_id IS NOT NULL
    ON CONFLICT (app_name, user_id, session_id) DO NOTHING
    RETURNING pk
)
SELECT (SELECT COUNT(*) FROM marked) + (SELECT COUNT(*) FROM added) AS marked;

-- name: forget_user_state
-- A user's own state (``user:`` keys) in an app.
DELETE FROM user_state WHERE app_name = :app_name::text AND user_id = :user_id::text
RETURNING octet_length(state::text) AS bytes;

-- name: forget_audit_open
-- The audit line of forgetting a user, written before anything is deleted; a
-- retry after a crash finds the line of the request in progress and carries it on.
WITH ins AS (
    INSERT INTO forget_requests (scope, user_id, actor, reason, status, created_at)
    VALUES (:scope::text, :user_id::text, :actor::text, :reason::text, 'STARTED', extract(epoch FROM clock_timestamp()))
    ON CONFLICT (scope, user_id) WHERE status = 'STARTED' DO NOTHING
    RETURNING pk, deleted, created_at, actor
)
SELECT pk, deleted, created_at, actor FROM ins
UNION ALL
SELECT pk, deleted, created_at, actor FROM forget_requests
 WHERE scope = :scope::text AND user_id = :user_id::text AND status = 'STARTED'
   AND NOT EXISTS (SELECT 1 FROM ins);

-- name: forget_audit_save
-- What forgetting a user deleted so far (:deleted, JSON per table); :done ends it.
UPDATE forget_requests
   SET deleted = :deleted::text,
       status = CASE WHEN :done::boolean THEN 'DONE' ELSE status END,
       finished_at = CASE WHEN :done::boolean THEN extract(epoch FROM clock_timestamp()) ELSE finished_at END
 WHERE pk = :pk::bigint AND status = 'STARTED'
RETURNING pk;

-- name: forget_requests_list
-- The audit of forgetting users, newest first.
SELECT pk, scope, user_id, actor, reason, status, deleted, created_at, finished_at
  FROM forget_requests
 WHERE (:user_id::text IS NULL OR user_id = :user_id::text)
 ORDER BY pk DESC LIMIT :limit::int;

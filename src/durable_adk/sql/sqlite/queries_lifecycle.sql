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

-- name: purge_events
-- A batch of the events of the sessions being purged (their primary key: session, seq).
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM events WHERE (session_pk, seq) IN (
    SELECT x.session_pk, x.seq FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN events x ON x.session_pk = p.pk
     LIMIT :batch)
RETURNING length(CAST(data AS BLOB)) + COALESCE(length(CAST(delta AS BLOB)), 0) AS bytes;

-- name: purge_state_snapshots
-- A batch of their state snapshots.
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM state_snapshots WHERE (session_pk, seq) IN (
    SELECT x.session_pk, x.seq FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN state_snapshots x ON x.session_pk = p.pk
     LIMIT :batch)
RETURNING length(CAST(state AS BLOB)) AS bytes;

-- name: purge_event_repairs
-- A batch of their event repairs' records (they hold the events as stored).
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM event_repairs WHERE pk IN (
    SELECT x.pk FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN event_repairs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     LIMIT :batch)
RETURNING length(CAST(original AS BLOB)) + length(CAST(replacement AS BLOB)) AS bytes;

-- name: purge_artifacts
-- A batch of their artifacts (every version; '' sessions are a user's own artifacts).
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM artifacts WHERE (app_name, user_id, session_id, filename, version) IN (
    SELECT x.app_name, x.user_id, x.session_id, x.filename, x.version FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN artifacts x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     LIMIT :batch)
RETURNING length(CAST(part AS BLOB)) + length(CAST(custom_metadata AS BLOB)) AS bytes;

-- name: purge_journal
-- A batch of the journal entries of their runs' invocations.
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM journal WHERE key IN (
    SELECT x.key FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
      CROSS JOIN journal x ON x.invocation_id = r.invocation_id
     LIMIT :batch)
RETURNING length(CAST(key AS BLOB)) + COALESCE(length(CAST(result AS BLOB)), 0) AS bytes;

-- name: purge_dead_letters
-- A batch of their runs' dead letters.
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM dead_letters WHERE pk IN (
    SELECT x.pk FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
      CROSS JOIN dead_letters x ON x.run_id = r.run_id
     LIMIT :batch)
RETURNING COALESCE(length(CAST(request AS BLOB)), 0) + COALESCE(length(CAST(last_events AS BLOB)), 0) + length(CAST(error AS BLOB)) AS bytes;

-- name: purge_schedule_ticks
-- A batch of the schedule firings that started their runs.
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM schedule_ticks WHERE pk IN (
    SELECT x.pk FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
      CROSS JOIN schedule_ticks x ON x.run_id = r.run_id
     LIMIT :batch)
RETURNING COALESCE(length(CAST(detail AS BLOB)), 0) AS bytes;

-- name: purge_operator_actions
-- A batch of the operators' audit lines about their runs (forgetting a user only: retention keeps the audit).
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM operator_actions WHERE pk IN (
    SELECT x.pk FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
      CROSS JOIN operator_actions x ON x.run_id = r.run_id
     LIMIT :batch)
RETURNING COALESCE(length(CAST(reason AS BLOB)), 0) + COALESCE(length(CAST(detail AS BLOB)), 0) AS bytes;

-- name: purge_job_calls
-- A batch of the calls their runs' invocations attached to jobs.
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM job_calls WHERE (job_id, app_name, user_id, session_id, function_call_id) IN (
    SELECT x.job_id, x.app_name, x.user_id, x.session_id, x.function_call_id FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
      CROSS JOIN job_calls x ON x.invocation_id = r.invocation_id
     LIMIT :batch)
RETURNING length(CAST(function_call_id AS BLOB)) AS bytes;

-- name: purge_jobs
-- A batch of the jobs of their sessions (a job's other calls go with it).
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM jobs WHERE job_id IN (
    SELECT x.job_id FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN jobs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     LIMIT :batch)
RETURNING COALESCE(length(CAST(request AS BLOB)), 0) + COALESCE(length(CAST(result AS BLOB)), 0) + COALESCE(length(CAST(progress AS BLOB)), 0) + COALESCE(length(CAST(progress_sent AS BLOB)), 0) AS bytes;

-- name: purge_saga_steps
-- A batch of the steps of their sagas.
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM saga_steps WHERE pk IN (
    SELECT x.pk FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN sagas g ON g.app_name = p.app_name AND g.user_id = p.user_id AND g.session_id = p.session_id
      CROSS JOIN saga_steps x ON x.saga_id = g.saga_id
     LIMIT :batch)
RETURNING COALESCE(length(CAST(record AS BLOB)), 0) + COALESCE(length(CAST(last_error AS BLOB)), 0) AS bytes;

-- name: purge_sagas
-- A batch of their sagas.
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM sagas WHERE saga_id IN (
    SELECT x.saga_id FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN sagas x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     LIMIT :batch)
RETURNING COALESCE(length(CAST(reason AS BLOB)), 0) AS bytes;

-- name: purge_interrupts
-- A batch of their interrupts, answered or not.
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM interrupts WHERE pk IN (
    SELECT x.pk FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN interrupts x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     LIMIT :batch)
RETURNING COALESCE(length(CAST(args AS BLOB)), 0) + COALESCE(length(CAST(answer AS BLOB)), 0) AS bytes;

-- name: purge_answer_claims
-- A batch of the claims of their interrupts' answers.
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM answer_claims WHERE (app_name, user_id, session_id, invocation_id, call_id, ask) IN (
    SELECT x.app_name, x.user_id, x.session_id, x.invocation_id, x.call_id, x.ask FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN answer_claims x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     LIMIT :batch)
RETURNING length(CAST(call_id AS BLOB)) AS bytes;

-- name: purge_runs
-- A batch of their runs whose journal entries, dead letters, schedule firings and job
-- calls are gone (the batches above find those through the runs: never orphaned).
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM runs WHERE pk IN (
    SELECT x.pk FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN runs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     WHERE NOT EXISTS (SELECT 1 FROM journal j WHERE j.invocation_id = x.invocation_id)
       AND NOT EXISTS (SELECT 1 FROM dead_letters l WHERE l.run_id = x.run_id)
       AND NOT EXISTS (SELECT 1 FROM schedule_ticks k WHERE k.run_id = x.run_id)
       AND NOT EXISTS (SELECT 1 FROM job_calls c WHERE c.invocation_id = x.invocation_id)
     LIMIT :batch)
RETURNING length(CAST(request AS BLOB)) + COALESCE(length(CAST(last_error AS BLOB)), 0) AS bytes;

-- name: purge_a2a_task_events
-- A batch of the events of their A2A tasks (a task is theirs through the invocations it drove).
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM a2a_task_events WHERE (task_id, version) IN (
    SELECT x.task_id, x.version FROM (SELECT DISTINCT l.task_id FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id) k
      CROSS JOIN a2a_task_events x ON x.task_id = k.task_id
     LIMIT :batch)
RETURNING length(CAST(body AS BLOB)) AS bytes;

-- name: purge_a2a_push_outbox
-- A batch of their A2A tasks' push outbox rows (sent or dead: a pending push keeps the session).
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM a2a_push_outbox WHERE pk IN (
    SELECT x.pk FROM (SELECT DISTINCT l.task_id FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id) k
      CROSS JOIN a2a_push_outbox x ON x.task_id = k.task_id
     LIMIT :batch)
RETURNING length(CAST(config AS BLOB)) + length(CAST(body AS BLOB)) + COALESCE(length(CAST(last_error AS BLOB)), 0) AS bytes;

-- name: purge_a2a_push_configs
-- A batch of their A2A tasks' push configs (each holds the client's URL and token).
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM a2a_push_configs WHERE (task_id, owner, config_id) IN (
    SELECT x.task_id, x.owner, x.config_id FROM (SELECT DISTINCT l.task_id FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id) k
      CROSS JOIN a2a_push_configs x ON x.task_id = k.task_id
     LIMIT :batch)
RETURNING length(CAST(body AS BLOB)) AS bytes;

-- name: purge_a2a_messages
-- A batch of the message ids their A2A tasks took.
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM a2a_messages WHERE (app_name, owner, context_id, message_id) IN (
    SELECT x.app_name, x.owner, x.context_id, x.message_id FROM (SELECT DISTINCT l.task_id FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id) k
      CROSS JOIN a2a_messages x ON x.task_id = k.task_id
     LIMIT :batch)
RETURNING length(CAST(message_id AS BLOB)) AS bytes;

-- name: purge_a2a_tasks
-- A batch of their A2A tasks whose events, pushes, push configs and message ids are gone.
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM a2a_tasks WHERE task_id IN (
    SELECT x.task_id FROM (SELECT DISTINCT l.task_id FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id) k
      CROSS JOIN a2a_tasks x ON x.task_id = k.task_id
     WHERE NOT EXISTS (SELECT 1 FROM a2a_task_events e WHERE e.task_id = x.task_id)
       AND NOT EXISTS (SELECT 1 FROM a2a_push_outbox o WHERE o.task_id = x.task_id)
       AND NOT EXISTS (SELECT 1 FROM a2a_push_configs c WHERE c.task_id = x.task_id)
       AND NOT EXISTS (SELECT 1 FROM a2a_messages m WHERE m.task_id = x.task_id)
     LIMIT :batch)
RETURNING length(CAST(body AS BLOB)) AS bytes;

-- name: purge_a2a_task_runs
-- Last of the A2A rows: a batch of the links of their sessions' invocations to tasks that are gone.
-- Each row once however many purge at a time: a row another purge holds is skipped.
DELETE FROM a2a_task_runs WHERE (task_id, invocation_id) IN (
    SELECT x.task_id, x.invocation_id FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN a2a_task_runs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
     WHERE NOT EXISTS (SELECT 1 FROM a2a_tasks t WHERE t.task_id = x.task_id)
     LIMIT :batch)
RETURNING length(CAST(invocation_id AS BLOB)) AS bytes;

-- name: scrub_pick_journal
-- Payload-only retention: a batch of journal rows of the sessions being purged that still
-- carry a payload, with its size (the skeleton stays).
SELECT x.key AS key, COALESCE(length(CAST(x.result AS BLOB)), 0) AS bytes FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
      CROSS JOIN journal x ON x.invocation_id = r.invocation_id
 WHERE x.result IS NOT NULL
 LIMIT :batch;

-- name: scrub_journal
-- Drops the payload of the journal rows picked (:keys, a JSON array) that still carry
-- one: a row two purges picked is counted by the one whose update changed it.
UPDATE journal SET result = NULL
 WHERE key IN (SELECT value FROM json_each(:keys))
   AND result IS NOT NULL
RETURNING key AS key;

-- name: scrub_pick_dead_letters
-- Payload-only retention: a batch of dead_letters rows of the sessions being purged that still
-- carry a payload, with its size (the skeleton stays).
SELECT x.pk AS key, COALESCE(length(CAST(x.request AS BLOB)), 0) + COALESCE(length(CAST(x.last_events AS BLOB)), 0) + length(CAST(x.error AS BLOB)) AS bytes FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
      CROSS JOIN dead_letters x ON x.run_id = r.run_id
 WHERE (x.request IS NOT NULL OR x.last_events IS NOT NULL OR x.error <> '')
 LIMIT :batch;

-- name: scrub_dead_letters
-- Drops the payload of the dead_letters rows picked (:keys, a JSON array) that still carry
-- one: a row two purges picked is counted by the one whose update changed it.
UPDATE dead_letters SET request = NULL, last_events = NULL, error = ''
 WHERE pk IN (SELECT value FROM json_each(:keys))
   AND (request IS NOT NULL OR last_events IS NOT NULL OR error <> '')
RETURNING pk AS key;

-- name: scrub_pick_jobs
-- Payload-only retention: a batch of jobs rows of the sessions being purged that still
-- carry a payload, with its size (the skeleton stays).
SELECT x.job_id AS key, COALESCE(length(CAST(x.request AS BLOB)), 0) + COALESCE(length(CAST(x.result AS BLOB)), 0) + COALESCE(length(CAST(x.progress AS BLOB)), 0) + COALESCE(length(CAST(x.progress_sent AS BLOB)), 0) AS bytes FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN jobs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
 WHERE (x.request IS NOT NULL OR x.result IS NOT NULL OR x.progress IS NOT NULL
        OR x.progress_sent IS NOT NULL)
 LIMIT :batch;

-- name: scrub_jobs
-- Drops the payload of the jobs rows picked (:keys, a JSON array) that still carry
-- one: a row two purges picked is counted by the one whose update changed it.
UPDATE jobs SET request = NULL, result = NULL, progress = NULL, progress_sent = NULL
 WHERE job_id IN (SELECT value FROM json_each(:keys))
   AND (request IS NOT NULL OR result IS NOT NULL OR progress IS NOT NULL
        OR progress_sent IS NOT NULL)
RETURNING job_id AS key;

-- name: scrub_pick_saga_steps
-- Payload-only retention: a batch of saga_steps rows of the sessions being purged that still
-- carry a payload, with its size (the skeleton stays).
SELECT x.pk AS key, COALESCE(length(CAST(x.record AS BLOB)), 0) + COALESCE(length(CAST(x.last_error AS BLOB)), 0) AS bytes FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN sagas g ON g.app_name = p.app_name AND g.user_id = p.user_id AND g.session_id = p.session_id
      CROSS JOIN saga_steps x ON x.saga_id = g.saga_id
 WHERE (x.record IS NOT NULL OR x.last_error IS NOT NULL)
 LIMIT :batch;

-- name: scrub_saga_steps
-- Drops the payload of the saga_steps rows picked (:keys, a JSON array) that still carry
-- one: a row two purges picked is counted by the one whose update changed it.
UPDATE saga_steps SET record = NULL, last_error = NULL
 WHERE pk IN (SELECT value FROM json_each(:keys))
   AND (record IS NOT NULL OR last_error IS NOT NULL)
RETURNING pk AS key;

-- name: scrub_pick_interrupts
-- Payload-only retention: a batch of interrupts rows of the sessions being purged that still
-- carry a payload, with its size (the skeleton stays).
SELECT x.pk AS key, COALESCE(length(CAST(x.args AS BLOB)), 0) + COALESCE(length(CAST(x.answer AS BLOB)), 0) AS bytes FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN interrupts x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
 WHERE (x.args IS NOT NULL OR x.answer IS NOT NULL)
 LIMIT :batch;

-- name: scrub_interrupts
-- Drops the payload of the interrupts rows picked (:keys, a JSON array) that still carry
-- one: a row two purges picked is counted by the one whose update changed it.
UPDATE interrupts SET args = NULL, answer = NULL
 WHERE pk IN (SELECT value FROM json_each(:keys))
   AND (args IS NOT NULL OR answer IS NOT NULL)
RETURNING pk AS key;

-- name: scrub_pick_runs
-- Payload-only retention: a batch of runs rows of the sessions being purged that still
-- carry a payload, with its size (the skeleton stays).
SELECT x.pk AS key, length(CAST(x.request AS BLOB)) + COALESCE(length(CAST(x.last_error AS BLOB)), 0) AS bytes FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN runs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
 WHERE (x.request <> '' OR x.last_error IS NOT NULL)
 LIMIT :batch;

-- name: scrub_runs
-- Drops the payload of the runs rows picked (:keys, a JSON array) that still carry
-- one: a row two purges picked is counted by the one whose update changed it.
UPDATE runs SET request = '', last_error = NULL
 WHERE pk IN (SELECT value FROM json_each(:keys))
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
      s.app_name = :app_name AND s.purging_at IS NULL
       AND s.update_time < :before
       AND (s.update_time < :idle_before
            OR EXISTS (SELECT 1 FROM runs r WHERE r.app_name = s.app_name AND r.user_id = s.user_id AND r.session_id = s.session_id))
       AND NOT EXISTS (
            SELECT 1 FROM runs r
             WHERE r.app_name = s.app_name AND r.user_id = s.user_id AND r.session_id = s.session_id
               AND NOT COALESCE(r.finished_at, r.updated_at) < CASE
                     WHEN r.abandoned_at IS NOT NULL THEN :abandoned_before
                     WHEN r.status = 'DONE' THEN :done_before
                     WHEN r.status = 'FAILED' THEN :failed_before
                     WHEN r.status = 'CANCELLED' THEN :cancelled_before
                     WHEN r.status = 'PARKED' THEN :parked_before
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
            SELECT 1 FROM a2a_task_runs l CROSS JOIN a2a_tasks a ON a.task_id = l.task_id
             WHERE l.app_name = s.app_name AND l.user_id = s.user_id AND l.session_id = s.session_id
               AND (a.state NOT IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED')
                    OR EXISTS (SELECT 1 FROM a2a_push_outbox o
                                WHERE o.task_id = a.task_id AND o.status = 'PENDING')))

-- name: purge_mark
-- Marks a batch of the sessions retention lets go (oldest first): from now on
-- an append to one finds it missing (SQLite has one writer at a time).
UPDATE sessions SET purging_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE pk IN (
    SELECT s.pk FROM sessions s
     WHERE
-- use: purge_unneeded
     ORDER BY s.update_time
     LIMIT :batch)
RETURNING pk;

-- name: purge_preview
-- What a purge would delete now, per table, with its size: the sessions it
-- would mark and those already marked, and their rows (a dry run: reads only).
WITH cand AS (
    SELECT s.pk, s.app_name, s.user_id, s.session_id, s.initial_state FROM sessions s
     WHERE
-- use: purge_unneeded
    UNION ALL
    SELECT s.pk, s.app_name, s.user_id, s.session_id, s.initial_state FROM sessions s
     WHERE s.app_name = :app_name AND s.purging_at IS NOT NULL
), k AS (
    SELECT DISTINCT l.task_id FROM cand p
      CROSS JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id
)
SELECT 'sessions' AS table_name, COUNT(*) AS row_count,
       COALESCE(SUM(length(CAST(p.initial_state AS BLOB))), 0) AS bytes FROM cand p
UNION ALL
SELECT 'events', COUNT(*), COALESCE(SUM(length(CAST(x.data AS BLOB)) + COALESCE(length(CAST(x.delta AS BLOB)), 0)), 0) FROM cand p
  CROSS JOIN events x ON x.session_pk = p.pk
UNION ALL
SELECT 'state_snapshots', COUNT(*), COALESCE(SUM(length(CAST(x.state AS BLOB))), 0) FROM cand p
  CROSS JOIN state_snapshots x ON x.session_pk = p.pk
UNION ALL
SELECT 'event_repairs', COUNT(*), COALESCE(SUM(length(CAST(x.original AS BLOB)) + length(CAST(x.replacement AS BLOB))), 0) FROM cand p
  CROSS JOIN event_repairs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
UNION ALL
SELECT 'artifacts', COUNT(*), COALESCE(SUM(length(CAST(x.part AS BLOB)) + length(CAST(x.custom_metadata AS BLOB))), 0) FROM cand p
  CROSS JOIN artifacts x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
UNION ALL
SELECT 'journal', COUNT(*), COALESCE(SUM(length(CAST(x.key AS BLOB)) + COALESCE(length(CAST(x.result AS BLOB)), 0)), 0) FROM cand p
  CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
  CROSS JOIN journal x ON x.invocation_id = r.invocation_id
UNION ALL
SELECT 'dead_letters', COUNT(*), COALESCE(SUM(COALESCE(length(CAST(x.request AS BLOB)), 0) + COALESCE(length(CAST(x.last_events AS BLOB)), 0) + length(CAST(x.error AS BLOB))), 0) FROM cand p
  CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
  CROSS JOIN dead_letters x ON x.run_id = r.run_id
UNION ALL
SELECT 'schedule_ticks', COUNT(*), COALESCE(SUM(COALESCE(length(CAST(x.detail AS BLOB)), 0)), 0) FROM cand p
  CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
  CROSS JOIN schedule_ticks x ON x.run_id = r.run_id
UNION ALL
SELECT 'job_calls', COUNT(*), COALESCE(SUM(length(CAST(x.function_call_id AS BLOB))), 0) FROM cand p
  CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
  CROSS JOIN job_calls x ON x.invocation_id = r.invocation_id
UNION ALL
SELECT 'jobs', COUNT(*), COALESCE(SUM(COALESCE(length(CAST(x.request AS BLOB)), 0) + COALESCE(length(CAST(x.result AS BLOB)), 0) + COALESCE(length(CAST(x.progress AS BLOB)), 0) + COALESCE(length(CAST(x.progress_sent AS BLOB)), 0)), 0) FROM cand p
  CROSS JOIN jobs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
UNION ALL
SELECT 'saga_steps', COUNT(*), COALESCE(SUM(COALESCE(length(CAST(x.record AS BLOB)), 0) + COALESCE(length(CAST(x.last_error AS BLOB)), 0)), 0) FROM cand p
  CROSS JOIN sagas g ON g.app_name = p.app_name AND g.user_id = p.user_id AND g.session_id = p.session_id
  CROSS JOIN saga_steps x ON x.saga_id = g.saga_id
UNION ALL
SELECT 'sagas', COUNT(*), COALESCE(SUM(COALESCE(length(CAST(x.reason AS BLOB)), 0)), 0) FROM cand p
  CROSS JOIN sagas x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
UNION ALL
SELECT 'interrupts', COUNT(*), COALESCE(SUM(COALESCE(length(CAST(x.args AS BLOB)), 0) + COALESCE(length(CAST(x.answer AS BLOB)), 0)), 0) FROM cand p
  CROSS JOIN interrupts x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
UNION ALL
SELECT 'answer_claims', COUNT(*), COALESCE(SUM(length(CAST(x.call_id AS BLOB))), 0) FROM cand p
  CROSS JOIN answer_claims x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
UNION ALL
SELECT 'runs', COUNT(*), COALESCE(SUM(length(CAST(x.request AS BLOB)) + COALESCE(length(CAST(x.last_error AS BLOB)), 0)), 0) FROM cand p
  CROSS JOIN runs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id
UNION ALL
SELECT 'a2a_task_events', COUNT(*), COALESCE(SUM(length(CAST(x.body AS BLOB))), 0) FROM k
  CROSS JOIN a2a_task_events x ON x.task_id = k.task_id
UNION ALL
SELECT 'a2a_push_outbox', COUNT(*), COALESCE(SUM(length(CAST(x.config AS BLOB)) + length(CAST(x.body AS BLOB)) + COALESCE(length(CAST(x.last_error AS BLOB)), 0)), 0) FROM k
  CROSS JOIN a2a_push_outbox x ON x.task_id = k.task_id
UNION ALL
SELECT 'a2a_push_configs', COUNT(*), COALESCE(SUM(length(CAST(x.body AS BLOB))), 0) FROM k
  CROSS JOIN a2a_push_configs x ON x.task_id = k.task_id
UNION ALL
SELECT 'a2a_messages', COUNT(*), COALESCE(SUM(length(CAST(x.message_id AS BLOB))), 0) FROM k
  CROSS JOIN a2a_messages x ON x.task_id = k.task_id
UNION ALL
SELECT 'a2a_tasks', COUNT(*), COALESCE(SUM(length(CAST(x.body AS BLOB))), 0) FROM k
  CROSS JOIN a2a_tasks x ON x.task_id = k.task_id
UNION ALL
SELECT 'a2a_task_runs', COUNT(*), COALESCE(SUM(length(CAST(x.invocation_id AS BLOB))), 0) FROM cand p
  CROSS JOIN a2a_task_runs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id;

-- name: purge_holding
-- Which tables hold rows of the sessions being purged, one flag a table (a read:
-- no write lock). A drain deletes only from those: on SQLite each DELETE is a
-- write of its own, lock and all, and most tables hold nothing for most sessions.
-- A row added after this read waits for the next pass (the sessions go last,
-- only once nothing is left of them).
SELECT
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN events x ON x.session_pk = p.pk) AS events,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN state_snapshots x ON x.session_pk = p.pk) AS state_snapshots,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN event_repairs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS event_repairs,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN artifacts x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS artifacts,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
              CROSS JOIN journal x ON x.invocation_id = r.invocation_id) AS journal,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
              CROSS JOIN dead_letters x ON x.run_id = r.run_id) AS dead_letters,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
              CROSS JOIN schedule_ticks x ON x.run_id = r.run_id) AS schedule_ticks,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
              CROSS JOIN operator_actions x ON x.run_id = r.run_id) AS operator_actions,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN runs r ON r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
              CROSS JOIN job_calls x ON x.invocation_id = r.invocation_id) AS job_calls,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN jobs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS jobs,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN sagas g ON g.app_name = p.app_name AND g.user_id = p.user_id AND g.session_id = p.session_id
              CROSS JOIN saga_steps x ON x.saga_id = g.saga_id) AS saga_steps,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN sagas x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS sagas,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN interrupts x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS interrupts,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN answer_claims x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS answer_claims,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN runs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS runs,
       EXISTS (SELECT 1 FROM (SELECT DISTINCT l.task_id FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id) k
              CROSS JOIN a2a_task_events x ON x.task_id = k.task_id) AS a2a_task_events,
       EXISTS (SELECT 1 FROM (SELECT DISTINCT l.task_id FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id) k
              CROSS JOIN a2a_push_outbox x ON x.task_id = k.task_id) AS a2a_push_outbox,
       EXISTS (SELECT 1 FROM (SELECT DISTINCT l.task_id FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id) k
              CROSS JOIN a2a_push_configs x ON x.task_id = k.task_id) AS a2a_push_configs,
       EXISTS (SELECT 1 FROM (SELECT DISTINCT l.task_id FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id) k
              CROSS JOIN a2a_messages x ON x.task_id = k.task_id) AS a2a_messages,
       EXISTS (SELECT 1 FROM (SELECT DISTINCT l.task_id FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
      CROSS JOIN a2a_task_runs l ON l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id) k
              CROSS JOIN a2a_tasks x ON x.task_id = k.task_id) AS a2a_tasks,
       EXISTS (SELECT 1 FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
              CROSS JOIN a2a_task_runs x ON x.app_name = p.app_name AND x.user_id = p.user_id AND x.session_id = p.session_id) AS a2a_task_runs;

-- name: purge_sessions
-- Last: the sessions being purged with nothing left of them (nothing at all, or
-- with :keep_skeleton, nothing but the ledger's rows without their payloads).
DELETE FROM sessions WHERE pk IN (
    SELECT p.pk FROM (SELECT pk, app_name, user_id, session_id FROM sessions
             WHERE app_name = :app_name AND purging_at IS NOT NULL
               AND (:user_id IS NULL OR user_id = :user_id)) p
     WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.session_pk = p.pk)
       AND NOT EXISTS (SELECT 1 FROM artifacts a WHERE a.app_name = p.app_name AND a.user_id = p.user_id AND a.session_id = p.session_id)
       AND NOT EXISTS (SELECT 1 FROM event_repairs v WHERE v.app_name = p.app_name AND v.user_id = p.user_id AND v.session_id = p.session_id)
       AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.app_name = p.app_name AND r.user_id = p.user_id AND r.session_id = p.session_id
                        AND (NOT :keep_skeleton OR r.request <> '' OR r.last_error IS NOT NULL))
       AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.app_name = p.app_name AND j.user_id = p.user_id AND j.session_id = p.session_id
                        AND (NOT :keep_skeleton OR j.request IS NOT NULL OR j.result IS NOT NULL
                             OR j.progress IS NOT NULL OR j.progress_sent IS NOT NULL))
       AND NOT EXISTS (SELECT 1 FROM sagas g WHERE g.app_name = p.app_name AND g.user_id = p.user_id AND g.session_id = p.session_id
                        AND (NOT :keep_skeleton OR EXISTS (
                             SELECT 1 FROM saga_steps t WHERE t.saga_id = g.saga_id
                                AND (t.record IS NOT NULL OR t.last_error IS NOT NULL))))
       AND NOT EXISTS (SELECT 1 FROM interrupts i WHERE i.app_name = p.app_name AND i.user_id = p.user_id AND i.session_id = p.session_id
                        AND (NOT :keep_skeleton OR i.args IS NOT NULL OR i.answer IS NOT NULL))
       AND (:keep_skeleton OR NOT EXISTS (SELECT 1 FROM answer_claims c WHERE c.app_name = p.app_name AND c.user_id = p.user_id AND c.session_id = p.session_id))
       AND NOT EXISTS (SELECT 1 FROM a2a_task_runs l WHERE l.app_name = p.app_name AND l.user_id = p.user_id AND l.session_id = p.session_id)
     LIMIT :batch)
RETURNING length(CAST(initial_state AS BLOB)) AS bytes;

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
-- After a batch: copy the pages the batch wrote from the WAL back into the database
-- now, on the purge's own connection, without waiting for writers (PASSIVE). Left
-- to SQLite's automatic checkpoint, the next small commit of a live run would pay
-- for the whole batch.
PRAGMA wal_checkpoint(PASSIVE);

-- name: purge_oldest
-- The oldest row kept of an app, per table (a metric): its least recently
-- updated session and its run that finished first (both on an index).
SELECT (SELECT update_time FROM sessions WHERE app_name = :app_name
         ORDER BY app_name, update_time LIMIT 1) AS sessions,
       (SELECT finished_at FROM runs WHERE app_name = :app_name AND finished_at IS NOT NULL
         ORDER BY app_name, finished_at LIMIT 1) AS runs,
       (julianday('now') - 2440587.5) * 86400.0 AS now;

-- name: forget_live_runs
-- The runs of a user that are still under way (queued, running, paused or asleep).
SELECT run_id, status, session_id FROM runs
 WHERE app_name = :app_name AND user_id = :user_id
   AND status IN ('QUEUED', 'RUNNING', 'PAUSED')
 ORDER BY pk;

-- name: forget_mark
-- Marks every session of a user for purging, and adds a marked stand-in for
-- each session id the user's rows name without a session row (a deleted
-- session's runs, a user's own artifacts under ''), so the purge's batches
-- reach every row of the user through the sessions being purged.
UPDATE sessions SET purging_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE app_name = :app_name AND user_id = :user_id AND purging_at IS NULL;
INSERT INTO sessions (app_name, user_id, session_id, initial_state, last_seq,
                      create_time, update_time, purging_at)
SELECT :app_name, :user_id, n.session_id, '{}', 0, (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0
  FROM (SELECT session_id FROM runs WHERE app_name = :app_name AND user_id = :user_id
    UNION SELECT session_id FROM jobs WHERE app_name = :app_name AND user_id = :user_id
    UNION SELECT session_id FROM sagas WHERE app_name = :app_name AND user_id = :user_id
    UNION SELECT session_id FROM interrupts WHERE app_name = :app_name AND user_id = :user_id
    UNION SELECT session_id FROM artifacts WHERE app_name = :app_name AND user_id = :user_id
    UNION SELECT session_id FROM answer_claims WHERE app_name = :app_name AND user_id = :user_id
    UNION SELECT session_id FROM event_repairs WHERE app_name = :app_name AND user_id = :user_id
    UNION SELECT session_id FROM a2a_task_runs WHERE app_name = :app_name AND user_id = :user_id) n WHERE n.session_id IS NOT NULL
ON CONFLICT (app_name, user_id, session_id) DO NOTHING;

-- name: forget_user_state
-- A user's own state (``user:`` keys) in an app.
DELETE FROM user_state WHERE app_name = :app_name AND user_id = :user_id
RETURNING length(CAST(state AS BLOB)) AS bytes;

-- name: forget_audit_open
-- The audit line of forgetting a user, written before anything is deleted; a
-- retry after a crash finds the line of the request in progress and carries it on.
INSERT INTO forget_requests (scope, user_id, actor, reason, status, created_at)
VALUES (:scope, :user_id, :actor, :reason, 'STARTED', (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (scope, user_id) WHERE status = 'STARTED' DO NOTHING;
SELECT pk, deleted, created_at, actor FROM forget_requests
 WHERE scope = :scope AND user_id = :user_id AND status = 'STARTED';

-- name: forget_audit_save
-- What forgetting a user deleted so far (:deleted, JSON per table); :done ends it.
UPDATE forget_requests
   SET deleted = :deleted,
       status = CASE WHEN :done THEN 'DONE' ELSE status END,
       finished_at = CASE WHEN :done THEN (julianday('now') - 2440587.5) * 86400.0 ELSE finished_at END
 WHERE pk = :pk AND status = 'STARTED'
RETURNING pk;

-- name: forget_requests_list
-- The audit of forgetting users, newest first.
SELECT pk, scope, user_id, actor, reason, status, deleted, created_at, finished_at
  FROM forget_requests
 WHERE (:user_id IS NULL OR user_id = :user_id)
 ORDER BY pk DESC LIMIT :limit;

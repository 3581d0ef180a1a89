-- Job table queries for PostgreSQL (same names in the other dialect).

-- ---------------------------------------------------------------- jobs
-- Every change is one conditional statement, so a duplicate, a late arrival or
-- a concurrent caller changes nothing it should not. Times are database clock.

-- name: job_create
-- Creates the job if absent; an existing job is returned unchanged.
WITH ins AS (
    INSERT INTO jobs (job_id, tool_name, request, state, deadline_at, created_at, updated_at)
    VALUES (:job_id::text, :tool_name::text, :request::text, 'STARTED',
            extract(epoch FROM clock_timestamp()) + :deadline::float8,
            extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp()))
    ON CONFLICT (job_id) DO NOTHING
    RETURNING *
)
SELECT true AS created, ins.* FROM ins
UNION ALL
SELECT false AS created, j.* FROM jobs j
 WHERE j.job_id = :job_id::text AND NOT EXISTS (SELECT 1 FROM ins);

-- name: job_attach
-- Fills only the empty columns: a replayed or late attach never overwrites.
-- A call other than the one on the row (another call id with the same
-- business identity) is kept in job_calls, once, to be answered too.
WITH upd AS (
    UPDATE jobs
       SET app_name = COALESCE(app_name, :app_name::text),
           user_id = COALESCE(user_id, :user_id::text),
           session_id = COALESCE(session_id, :session_id::text),
           invocation_id = COALESCE(invocation_id, :invocation_id::text),
           function_call_id = COALESCE(function_call_id, :function_call_id::text),
           app_version = COALESCE(app_version, (SELECT r.app_version FROM runs r WHERE r.invocation_id = :invocation_id::text ORDER BY r.pk DESC LIMIT 1)),
           app_fingerprint = COALESCE(app_fingerprint,
                                     (SELECT r.app_fingerprint FROM runs r WHERE r.invocation_id = :invocation_id::text ORDER BY r.pk DESC LIMIT 1)),
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE job_id = :job_id::text
    RETURNING *
), extra AS (
    INSERT INTO job_calls (job_id, app_name, user_id, session_id, invocation_id,
                           function_call_id, created_at)
    SELECT upd.job_id, :app_name::text, :user_id::text, :session_id::text,
           :invocation_id::text, :function_call_id::text, extract(epoch FROM clock_timestamp())
      FROM upd
     WHERE (upd.app_name, upd.user_id, upd.session_id, upd.function_call_id)
           IS DISTINCT FROM (:app_name::text, :user_id::text, :session_id::text,
                             :function_call_id::text)
    ON CONFLICT DO NOTHING
    RETURNING job_id
)
SELECT upd.* FROM upd;

-- name: job_start_writes fragment
-- A long-running call's job, for the units that start one (used as
-- "-- use: job_start_writes" after a verdict CTE): created if absent and the
-- call attached to it (job_create then job_attach: only the empty columns are
-- filled, another call of the same job is kept in job_calls), when the
-- verdict is 'ok'.
job AS (
    INSERT INTO jobs (job_id, tool_name, request, state, deadline_at, app_name, user_id,
                      session_id, invocation_id, function_call_id, app_version,
                      app_fingerprint, created_at, updated_at)
    SELECT :job_id::text, :tool_name::text, :request::text, 'STARTED',
           extract(epoch FROM clock_timestamp()) + :deadline::float8, :app_name::text,
           :user_id::text, :session_id::text, :invocation_id::text, :function_call_id::text,
           r.app_version, r.app_fingerprint,
           extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp())
      FROM (SELECT 1) AS one
      LEFT JOIN LATERAL (SELECT app_version, app_fingerprint FROM runs
                          WHERE invocation_id = :invocation_id::text
                          ORDER BY pk DESC LIMIT 1) r ON TRUE
     WHERE (SELECT status FROM verdict) = 'ok'
    ON CONFLICT (job_id) DO UPDATE
       SET app_name = COALESCE(jobs.app_name, EXCLUDED.app_name),
           user_id = COALESCE(jobs.user_id, EXCLUDED.user_id),
           session_id = COALESCE(jobs.session_id, EXCLUDED.session_id),
           invocation_id = COALESCE(jobs.invocation_id, EXCLUDED.invocation_id),
           function_call_id = COALESCE(jobs.function_call_id, EXCLUDED.function_call_id),
           app_version = COALESCE(jobs.app_version, EXCLUDED.app_version),
           app_fingerprint = COALESCE(jobs.app_fingerprint, EXCLUDED.app_fingerprint),
           updated_at = EXCLUDED.updated_at
    RETURNING *
), extra AS (
    INSERT INTO job_calls (job_id, app_name, user_id, session_id, invocation_id,
                           function_call_id, created_at)
    SELECT job.job_id, :app_name::text, :user_id::text, :session_id::text,
           :invocation_id::text, :function_call_id::text, extract(epoch FROM clock_timestamp())
      FROM job
     WHERE (job.app_name, job.user_id, job.session_id, job.function_call_id)
           IS DISTINCT FROM (:app_name::text, :user_id::text, :session_id::text,
                             :function_call_id::text)
    ON CONFLICT DO NOTHING
    RETURNING job_id
)

-- name: job_start inline
-- A long-running call's job, as one statement (job_start_writes).
WITH verdict AS (SELECT 'ok'::text AS status),
-- use: job_start_writes
SELECT job.* FROM job;

-- name: append_events_job_start inline
-- A run's buffered events (append_events) and the job of a long-running call
-- among them (job_start) as one statement: the call is durable exactly when
-- its job is, so no crash leaves one without the other. The job's part runs
-- only when the events were written; the result is the append's verdict
-- ('ok', or its refusal: then nothing was written) with the job's row.
WITH
-- use: events_batch
-- use: events_batch_verdict
-- use: events_batch_writes
,
-- use: job_start_writes
SELECT v.status,
       COALESCE((SELECT last_seq FROM upd), (SELECT last_seq FROM s)) AS last_seq,
       j.*
  FROM verdict v LEFT JOIN job j ON TRUE;

-- name: job_mark_submitted
-- Records that the outside system accepted the work; the first caller wins.
UPDATE jobs
   SET submitted_at = extract(epoch FROM clock_timestamp()), submit_after = NULL,
       submit_error = NULL, updated_at = extract(epoch FROM clock_timestamp())
 WHERE job_id = :job_id::text AND submitted_at IS NULL
RETURNING job_id;

-- name: job_claim_submit
-- Takes the next submission attempt of open jobs whose work is not accepted
-- yet (one job, or any of the :tools, a JSON array of tool names): no attempt
-- running or backing off (submit_after passed), deadline not passed. The claim
-- holds the attempt for :lease seconds. SKIP LOCKED: two submitters never take
-- one attempt.
WITH picked AS MATERIALIZED (
    SELECT q.job_id FROM jobs q
     WHERE q.state = 'STARTED' AND q.submitted_at IS NULL
       AND (:job_id::text IS NULL OR q.job_id = :job_id::text)
       AND (:tools::jsonb IS NULL
            OR q.tool_name IN (SELECT jsonb_array_elements_text(:tools::jsonb)))
       AND (q.submit_after IS NULL OR q.submit_after <= extract(epoch FROM clock_timestamp()))
       AND q.deadline_at > extract(epoch FROM clock_timestamp())
     ORDER BY q.submit_after NULLS FIRST, q.created_at
     LIMIT :limit::int
     FOR UPDATE SKIP LOCKED
)
UPDATE jobs
   SET submit_attempts = submit_attempts + 1,
       submit_after = extract(epoch FROM clock_timestamp()) + :lease::float8,
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE job_id IN (SELECT job_id FROM picked) AND submitted_at IS NULL
RETURNING *;

-- name: job_submit_failed
-- An attempt failed: keep the error, back off :retry_in seconds. Only the
-- attempt that is current (:attempt) sets the back-off.
UPDATE jobs
   SET submit_error = :error::text,
       submit_after = extract(epoch FROM clock_timestamp()) + :retry_in::float8,
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE job_id = :job_id::text AND submitted_at IS NULL AND submit_attempts = :attempt::bigint
RETURNING job_id;

-- name: job_backdate_submit
-- Moves a job's submission attempt or back-off into the past, nothing else.
UPDATE jobs SET submit_after = submit_after - :seconds::float8
 WHERE job_id = :job_id::text
RETURNING job_id;

-- name: job_complete
-- The first terminal result wins; later ones see the row as it stands.
WITH upd AS (
    UPDATE jobs
       SET state = :state::text, result = :result::text,
           completed_at = extract(epoch FROM clock_timestamp()),
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE job_id = :job_id::text AND state = 'STARTED'
    RETURNING *
)
SELECT 'changed' AS outcome, upd.* FROM upd
UNION ALL
SELECT 'unchanged' AS outcome, j.* FROM jobs j
 WHERE j.job_id = :job_id::text AND NOT EXISTS (SELECT 1 FROM upd);

-- name: job_progress
-- Records progress of an open job, only when it differs from the last one.
UPDATE jobs
   SET progress = :progress::text, progress_at = extract(epoch FROM clock_timestamp()),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE job_id = :job_id::text AND state = 'STARTED' AND progress IS DISTINCT FROM :progress::text
RETURNING job_id;

-- name: job_claim_progress
-- Progress to deliver: changed since last delivered, and the last delivery at
-- least :interval seconds ago. The claim marks it delivered (at most once).
-- Evaluated once (MATERIALIZED): inside IN (...) the planner may re-run a
-- LIMIT ... SKIP LOCKED subquery per row and claim more than :limit.
WITH picked AS MATERIALIZED (
    SELECT q.job_id FROM jobs q
     WHERE q.state = 'STARTED' AND q.progress IS NOT NULL
       AND q.progress IS DISTINCT FROM q.progress_sent
       AND q.function_call_id IS NOT NULL AND q.session_id IS NOT NULL
       AND q.invocation_id IS NOT NULL AND q.user_id IS NOT NULL AND q.app_name IS NOT NULL
       AND (q.progress_sent_at IS NULL
            OR q.progress_sent_at <= extract(epoch FROM clock_timestamp()) - :interval::float8)
     ORDER BY q.progress_at
     LIMIT :limit::int
     FOR UPDATE SKIP LOCKED
)
UPDATE jobs
   SET progress_sent = progress, progress_sent_at = extract(epoch FROM clock_timestamp())
 WHERE job_id IN (SELECT job_id FROM picked)
   AND state = 'STARTED' AND progress IS DISTINCT FROM progress_sent
RETURNING *;

-- name: job_claim_resume
-- Ready rows: terminal, attached, not handed to a run, no live claim. A row
-- whose invocation still has an open sibling waits :gather seconds for it, so
-- calls of one turn that finish close together are answered together. SKIP
-- LOCKED: two resumers never claim one row.
-- Evaluated once (MATERIALIZED): inside IN (...) the planner may re-run a
-- LIMIT ... SKIP LOCKED subquery per row and claim more than :limit.
WITH picked AS MATERIALIZED (
    SELECT q.job_id FROM jobs q
     WHERE q.state <> 'STARTED' AND q.resumed_at IS NULL
       AND (:app_name::text IS NULL OR q.app_name = :app_name::text)
       AND q.function_call_id IS NOT NULL AND q.session_id IS NOT NULL
       AND q.invocation_id IS NOT NULL AND q.user_id IS NOT NULL AND q.app_name IS NOT NULL
       AND (q.resume_until IS NULL
            OR q.resume_until < extract(epoch FROM clock_timestamp()))
       AND (q.completed_at <= extract(epoch FROM clock_timestamp()) - :gather::float8
            OR (NOT EXISTS (SELECT 1 FROM jobs s
                             WHERE s.invocation_id = q.invocation_id
                               AND s.session_id = q.session_id AND s.state = 'STARTED')
                AND NOT EXISTS (SELECT 1 FROM job_calls sc JOIN jobs sj ON sj.job_id = sc.job_id
                                 WHERE sc.invocation_id = q.invocation_id
                                   AND sc.session_id = q.session_id AND sj.state = 'STARTED')))
     ORDER BY q.invocation_id, q.completed_at
     LIMIT :limit::int
     FOR UPDATE SKIP LOCKED
)
UPDATE jobs
   SET resume_owner = :owner::text, resume_epoch = resume_epoch + 1,
       resume_until = extract(epoch FROM clock_timestamp()) + :lease::float8,
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE job_id IN (SELECT job_id FROM picked)
   AND state <> 'STARTED' AND resumed_at IS NULL
   AND (resume_until IS NULL OR resume_until < extract(epoch FROM clock_timestamp()))
RETURNING *;

-- name: job_claim_resume_calls
-- The same for the other calls of finished jobs (job_calls): each call not yet
-- handed to a run, with no live claim, is held by one claimer under a lease.
WITH picked AS MATERIALIZED (
    SELECT c.job_id, c.app_name, c.user_id, c.session_id, c.function_call_id
      FROM job_calls c JOIN jobs j ON j.job_id = c.job_id
     WHERE j.state <> 'STARTED' AND c.resumed_at IS NULL
       AND (:app_name::text IS NULL OR c.app_name = :app_name::text)
       AND (c.resume_until IS NULL OR c.resume_until < extract(epoch FROM clock_timestamp()))
       AND (j.completed_at <= extract(epoch FROM clock_timestamp()) - :gather::float8
            OR (NOT EXISTS (SELECT 1 FROM jobs s
                             WHERE s.invocation_id = c.invocation_id
                               AND s.session_id = c.session_id AND s.state = 'STARTED')
                AND NOT EXISTS (SELECT 1 FROM job_calls sc JOIN jobs sj ON sj.job_id = sc.job_id
                                 WHERE sc.invocation_id = c.invocation_id
                                   AND sc.session_id = c.session_id AND sj.state = 'STARTED')))
     ORDER BY c.invocation_id, j.completed_at
     LIMIT :limit::int
     FOR UPDATE OF c SKIP LOCKED
)
UPDATE job_calls c
   SET resume_owner = :owner::text, resume_epoch = c.resume_epoch + 1,
       resume_until = extract(epoch FROM clock_timestamp()) + :lease::float8
  FROM picked p
 WHERE c.job_id = p.job_id AND c.app_name = p.app_name AND c.user_id = p.user_id
   AND c.session_id = p.session_id AND c.function_call_id = p.function_call_id
   AND c.resumed_at IS NULL
RETURNING c.*;

-- name: job_mark_resumed
-- Records the run that carries the answers, for claims still held
-- (:claims is a JSON array of {"job_id", "epoch", "session_id", "call"}):
-- the job row's own call here, the other calls in job_mark_resumed_calls.
UPDATE jobs
   SET resumed_at = extract(epoch FROM clock_timestamp()), resume_run_id = :run_id::text,
       resume_until = NULL, updated_at = extract(epoch FROM clock_timestamp())
 WHERE job_id IN (SELECT c.job_id
                    FROM jsonb_to_recordset(:claims::jsonb)
                         AS c(job_id text, epoch bigint, session_id text, call text)
                   WHERE c.epoch = jobs.resume_epoch AND c.session_id = jobs.session_id
                     AND c.call = jobs.function_call_id)
   AND resume_owner = :owner::text AND resumed_at IS NULL
RETURNING job_id;

-- name: job_mark_resumed_calls
UPDATE job_calls
   SET resumed_at = extract(epoch FROM clock_timestamp()), resume_run_id = :run_id::text,
       resume_until = NULL
 WHERE (job_id, session_id, function_call_id, resume_epoch) IN (
         SELECT c.job_id, c.session_id, c.call, c.epoch
           FROM jsonb_to_recordset(:claims::jsonb)
                AS c(job_id text, epoch bigint, session_id text, call text))
   AND resume_owner = :owner::text AND resumed_at IS NULL
RETURNING job_id;

-- name: job_release_resume
-- Gives claims back at once (the resumer could not hand them over).
UPDATE jobs
   SET resume_until = NULL, updated_at = extract(epoch FROM clock_timestamp())
 WHERE job_id IN (SELECT c.job_id
                    FROM jsonb_to_recordset(:claims::jsonb)
                         AS c(job_id text, epoch bigint, session_id text, call text)
                   WHERE c.epoch = jobs.resume_epoch AND c.session_id = jobs.session_id
                     AND c.call = jobs.function_call_id)
   AND resume_owner = :owner::text AND resumed_at IS NULL
RETURNING job_id;

-- name: job_release_resume_calls
UPDATE job_calls
   SET resume_until = NULL
 WHERE (job_id, session_id, function_call_id, resume_epoch) IN (
         SELECT c.job_id, c.session_id, c.call, c.epoch
           FROM jsonb_to_recordset(:claims::jsonb)
                AS c(job_id text, epoch bigint, session_id text, call text))
   AND resume_owner = :owner::text AND resumed_at IS NULL
RETURNING job_id;

-- name: job_calls_of
-- The other calls attached to a job, oldest first.
SELECT * FROM job_calls WHERE job_id = :job_id::text ORDER BY created_at, function_call_id;

-- name: job_expire
-- Open jobs past their deadline become EXPIRED with the explicit result given.
-- Evaluated once (MATERIALIZED): inside IN (...) the planner may re-run a
-- LIMIT ... SKIP LOCKED subquery per row and claim more than :limit.
WITH picked AS MATERIALIZED (
    SELECT q.job_id FROM jobs q
     WHERE q.state = 'STARTED' AND q.timer = 0
       AND q.deadline_at < extract(epoch FROM clock_timestamp())
     ORDER BY q.deadline_at
     LIMIT :limit::int
     FOR UPDATE SKIP LOCKED
)
UPDATE jobs
   SET state = 'EXPIRED', result = :result::text,
       completed_at = extract(epoch FROM clock_timestamp()),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE job_id IN (SELECT job_id FROM picked)
   AND state = 'STARTED'
RETURNING *;

-- name: job_get
SELECT * FROM jobs WHERE job_id = :job_id::text;

-- name: job_list
SELECT * FROM jobs
 WHERE (:state::text IS NULL OR state = :state::text)
   AND (:session_id::text IS NULL OR session_id = :session_id::text)
 ORDER BY created_at DESC, job_id LIMIT :limit::int;

-- name: job_backdate
-- Moves a job's times into the past: how tests (and an operator) pass a
-- deadline, a resume claim's lease (its other calls' too), a submission
-- back-off or a progress interval without waiting.
WITH calls AS (
    UPDATE job_calls SET resume_until = resume_until - :seconds::float8
     WHERE job_id = :job_id::text
    RETURNING job_id
)
UPDATE jobs
   SET deadline_at = deadline_at - :seconds::float8,
       resume_until = resume_until - :seconds::float8,
       submit_after = submit_after - :seconds::float8,
       progress_sent_at = progress_sent_at - :seconds::float8,
       completed_at = completed_at - :seconds::float8
 WHERE job_id = :job_id::text
RETURNING job_id;

-- name: job_cancel_of_invocation
-- The invocation was cancelled: its open jobs end CANCELLED with :result (a
-- late completion then changes nothing: the first terminal result won). The
-- resumer acknowledges them without a run and calls each tool's cancel hook.
UPDATE jobs
   SET state = 'CANCELLED', result = :result::text,
       completed_at = extract(epoch FROM clock_timestamp()),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE app_name = :app_name::text AND user_id = :user_id::text
   AND session_id = :session_id::text AND invocation_id = :invocation_id::text
   AND state = 'STARTED'
RETURNING job_id;

-- ---------------------------------------------------------------- timers
-- A durable sleep is a job with timer = 1 whose deadline is its due time.

-- name: job_create_timer
-- Creates the timer if absent (its id names the call): due :until (epoch
-- seconds) or :seconds from now, both on the database clock. Submitted at
-- once: there is no outside work. An existing timer is returned unchanged.
WITH ins AS (
    INSERT INTO jobs (job_id, tool_name, request, state, deadline_at, timer,
                      submitted_at, created_at, updated_at)
    VALUES (:job_id::text, :tool_name::text, :request::text, 'STARTED',
            COALESCE(:until::float8, extract(epoch FROM clock_timestamp()) + :seconds::float8), 1,
            extract(epoch FROM clock_timestamp()),
            extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp()))
    ON CONFLICT (job_id) DO NOTHING
    RETURNING *
)
SELECT true AS created, ins.* FROM ins
UNION ALL
SELECT false AS created, j.* FROM jobs j
 WHERE j.job_id = :job_id::text AND NOT EXISTS (SELECT 1 FROM ins);

-- name: job_wake
-- The one wake statement of a poll: open timers due by the database clock
-- (index jobs_timers_due) end SUCCEEDED with their wake-up as the result;
-- FOR UPDATE SKIP LOCKED, so each wakes once; the job resumer answers their
-- calls. MATERIALIZED: see job_expire.
WITH picked AS MATERIALIZED (
    SELECT q.job_id FROM jobs q
     WHERE q.state = 'STARTED' AND q.timer = 1
       -- one reading of the clock (an InitPlan), so it bounds the index scan:
       -- clock_timestamp() itself is volatile and would be a per-row filter.
       AND q.deadline_at <= (SELECT extract(epoch FROM clock_timestamp()))
     ORDER BY q.deadline_at
     LIMIT :limit::int
     FOR UPDATE SKIP LOCKED
)
UPDATE jobs
   SET state = 'SUCCEEDED',
       result = json_build_object('status', 'woke', 'due', deadline_at,
                                  'woke_at', extract(epoch FROM clock_timestamp()))::text,
       completed_at = extract(epoch FROM clock_timestamp()),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE job_id IN (SELECT job_id FROM picked)
   AND state = 'STARTED'
RETURNING *;

-- name: job_wake_of_invocation
-- The earliest open timer of an invocation: when a sleeping run wakes.
SELECT MIN(deadline_at) AS wakes_at FROM jobs
 WHERE invocation_id = :invocation_id::text AND timer = 1 AND state = 'STARTED';

-- name: job_now
-- The database clock, epoch seconds.
SELECT extract(epoch FROM clock_timestamp())::float8 AS now;

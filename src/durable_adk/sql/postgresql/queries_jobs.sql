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
UPDATE jobs
   SET app_name = COALESCE(app_name, :app_name::text),
       user_id = COALESCE(user_id, :user_id::text),
       session_id = COALESCE(session_id, :session_id::text),
       invocation_id = COALESCE(invocation_id, :invocation_id::text),
       function_call_id = COALESCE(function_call_id, :function_call_id::text),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE job_id = :job_id::text
RETURNING *;

-- name: job_mark_submitted
-- The first caller wins the right to hand the work over.
UPDATE jobs
   SET submitted_at = extract(epoch FROM clock_timestamp()),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE job_id = :job_id::text AND submitted_at IS NULL
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
            OR NOT EXISTS (SELECT 1 FROM jobs s
                            WHERE s.invocation_id = q.invocation_id
                              AND s.session_id = q.session_id AND s.state = 'STARTED'))
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

-- name: job_mark_resumed
-- Records the run that carries the answers, for claims still held
-- (:claims is a JSON array of {"job_id", "epoch"}).
UPDATE jobs
   SET resumed_at = extract(epoch FROM clock_timestamp()), resume_run_id = :run_id::text,
       resume_until = NULL, updated_at = extract(epoch FROM clock_timestamp())
 WHERE job_id IN (SELECT c.job_id FROM jsonb_to_recordset(:claims::jsonb) AS c(job_id text, epoch bigint)
                   WHERE c.epoch = jobs.resume_epoch)
   AND resume_owner = :owner::text AND resumed_at IS NULL
RETURNING job_id;

-- name: job_release_resume
-- Gives claims back at once (the resumer could not hand them over).
UPDATE jobs
   SET resume_until = NULL, updated_at = extract(epoch FROM clock_timestamp())
 WHERE job_id IN (SELECT c.job_id FROM jsonb_to_recordset(:claims::jsonb) AS c(job_id text, epoch bigint)
                   WHERE c.epoch = jobs.resume_epoch)
   AND resume_owner = :owner::text AND resumed_at IS NULL
RETURNING job_id;

-- name: job_expire
-- Open jobs past their deadline become EXPIRED with the explicit result given.
-- Evaluated once (MATERIALIZED): inside IN (...) the planner may re-run a
-- LIMIT ... SKIP LOCKED subquery per row and claim more than :limit.
WITH picked AS MATERIALIZED (
    SELECT q.job_id FROM jobs q
     WHERE q.state = 'STARTED' AND q.deadline_at < extract(epoch FROM clock_timestamp())
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
-- deadline, a resume claim's lease or a progress interval without waiting.
UPDATE jobs
   SET deadline_at = deadline_at - :seconds::float8,
       resume_until = resume_until - :seconds::float8,
       progress_sent_at = progress_sent_at - :seconds::float8,
       completed_at = completed_at - :seconds::float8
 WHERE job_id = :job_id::text
RETURNING job_id;

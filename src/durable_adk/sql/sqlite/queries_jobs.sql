-- Job table queries for SQLite (same names in the other dialect).

-- ---------------------------------------------------------------- jobs
-- Every change is one conditional statement inside one write transaction
-- (BEGIN IMMEDIATE), so a duplicate, a late arrival or a concurrent caller
-- changes nothing it should not. Times are database clock. changes() is read
-- in the statement right after the write it counts, in the same transaction.

-- name: job_create
-- Creates the job if absent; an existing job is returned unchanged.
INSERT OR IGNORE INTO jobs (job_id, tool_name, request, state, deadline_at, created_at, updated_at)
VALUES (:job_id, :tool_name, :request, 'STARTED',
        (julianday('now') - 2440587.5) * 86400.0 + :deadline,
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0);
SELECT changes() > 0 AS created, * FROM jobs WHERE job_id = :job_id;

-- name: job_attach
-- Fills only the empty columns: a replayed or late attach never overwrites.
UPDATE jobs
   SET app_name = COALESCE(app_name, :app_name),
       user_id = COALESCE(user_id, :user_id),
       session_id = COALESCE(session_id, :session_id),
       invocation_id = COALESCE(invocation_id, :invocation_id),
       function_call_id = COALESCE(function_call_id, :function_call_id),
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id = :job_id
RETURNING *;

-- name: job_mark_submitted
-- The first caller wins the right to hand the work over.
UPDATE jobs
   SET submitted_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id = :job_id AND submitted_at IS NULL
RETURNING job_id;

-- name: job_complete
-- The first terminal result wins; later ones see the row as it stands.
UPDATE jobs
   SET state = :state, result = :result,
       completed_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id = :job_id AND state = 'STARTED';
SELECT CASE WHEN changes() > 0 THEN 'changed' ELSE 'unchanged' END AS outcome, *
  FROM jobs WHERE job_id = :job_id;

-- name: job_progress
-- Records progress of an open job, only when it differs from the last one.
UPDATE jobs
   SET progress = :progress, progress_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id = :job_id AND state = 'STARTED' AND progress IS NOT :progress
RETURNING job_id;

-- name: job_claim_progress
-- Progress to deliver: changed since last delivered, and the last delivery at
-- least :interval seconds ago. The claim marks it delivered (at most once).
UPDATE jobs
   SET progress_sent = progress, progress_sent_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id IN (
        SELECT q.job_id FROM jobs q
         WHERE q.state = 'STARTED' AND q.progress IS NOT NULL
           AND q.progress IS NOT q.progress_sent
           AND q.function_call_id IS NOT NULL AND q.session_id IS NOT NULL
           AND q.invocation_id IS NOT NULL AND q.user_id IS NOT NULL AND q.app_name IS NOT NULL
           AND (q.progress_sent_at IS NULL
                OR q.progress_sent_at <= (julianday('now') - 2440587.5) * 86400.0 - :interval)
         ORDER BY q.progress_at
         LIMIT :limit)
RETURNING *;

-- name: job_claim_resume
-- Ready rows: terminal, attached, not handed to a run, no live claim. A row
-- whose invocation still has an open sibling waits :gather seconds for it, so
-- calls of one turn that finish close together are answered together. The
-- write lock (BEGIN IMMEDIATE) serializes claims: two resumers never claim one row.
UPDATE jobs
   SET resume_owner = :owner, resume_epoch = resume_epoch + 1,
       resume_until = (julianday('now') - 2440587.5) * 86400.0 + :lease,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id IN (
        SELECT q.job_id FROM jobs q
         WHERE q.state <> 'STARTED' AND q.resumed_at IS NULL
           AND (:app_name IS NULL OR q.app_name = :app_name)
           AND q.function_call_id IS NOT NULL AND q.session_id IS NOT NULL
           AND q.invocation_id IS NOT NULL AND q.user_id IS NOT NULL AND q.app_name IS NOT NULL
           AND (q.resume_until IS NULL
                OR q.resume_until < (julianday('now') - 2440587.5) * 86400.0)
           AND (q.completed_at <= (julianday('now') - 2440587.5) * 86400.0 - :gather
                OR NOT EXISTS (SELECT 1 FROM jobs s
                                WHERE s.invocation_id = q.invocation_id
                                  AND s.session_id = q.session_id AND s.state = 'STARTED'))
         ORDER BY q.invocation_id, q.completed_at
         LIMIT :limit)
RETURNING *;

-- name: job_mark_resumed
-- Records the run that carries the answers, for claims still held
-- (:claims is a JSON array of {"job_id", "epoch"}).
UPDATE jobs
   SET resumed_at = (julianday('now') - 2440587.5) * 86400.0, resume_run_id = :run_id,
       resume_until = NULL, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id IN (SELECT json_extract(c.value, '$.job_id') FROM json_each(:claims) c
                   WHERE json_extract(c.value, '$.epoch') = jobs.resume_epoch)
   AND resume_owner = :owner AND resumed_at IS NULL
RETURNING job_id;

-- name: job_release_resume
-- Gives claims back at once (the resumer could not hand them over).
UPDATE jobs
   SET resume_until = NULL, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id IN (SELECT json_extract(c.value, '$.job_id') FROM json_each(:claims) c
                   WHERE json_extract(c.value, '$.epoch') = jobs.resume_epoch)
   AND resume_owner = :owner AND resumed_at IS NULL
RETURNING job_id;

-- name: job_expire
-- Open jobs past their deadline become EXPIRED with the explicit result given.
UPDATE jobs
   SET state = 'EXPIRED', result = :result,
       completed_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id IN (
        SELECT q.job_id FROM jobs q
         WHERE q.state = 'STARTED' AND q.deadline_at < (julianday('now') - 2440587.5) * 86400.0
         ORDER BY q.deadline_at
         LIMIT :limit)
RETURNING *;

-- name: job_get
SELECT * FROM jobs WHERE job_id = :job_id;

-- name: job_list
SELECT * FROM jobs
 WHERE (:state IS NULL OR state = :state)
   AND (:session_id IS NULL OR session_id = :session_id)
 ORDER BY created_at DESC, job_id LIMIT :limit;

-- name: job_backdate
-- Moves a job's times into the past: how tests (and an operator) pass a
-- deadline, a resume claim's lease or a progress interval without waiting.
UPDATE jobs
   SET deadline_at = deadline_at - :seconds,
       resume_until = resume_until - :seconds,
       progress_sent_at = progress_sent_at - :seconds,
       completed_at = completed_at - :seconds
 WHERE job_id = :job_id
RETURNING job_id;

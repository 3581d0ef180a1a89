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
-- A call other than the one on the row (another call id with the same
-- business identity) is kept in job_calls, once, to be answered too.
UPDATE jobs
   SET app_name = COALESCE(app_name, :app_name),
       user_id = COALESCE(user_id, :user_id),
       session_id = COALESCE(session_id, :session_id),
       invocation_id = COALESCE(invocation_id, :invocation_id),
       function_call_id = COALESCE(function_call_id, :function_call_id),
       app_version = COALESCE(app_version, (SELECT r.app_version FROM runs r WHERE r.invocation_id = :invocation_id ORDER BY r.pk DESC LIMIT 1)),
       app_fingerprint = COALESCE(app_fingerprint,
                                 (SELECT r.app_fingerprint FROM runs r WHERE r.invocation_id = :invocation_id ORDER BY r.pk DESC LIMIT 1)),
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id = :job_id;
INSERT OR IGNORE INTO job_calls (job_id, app_name, user_id, session_id, invocation_id,
                                 function_call_id, created_at)
SELECT job_id, :app_name, :user_id, :session_id, :invocation_id, :function_call_id,
       (julianday('now') - 2440587.5) * 86400.0
  FROM jobs
 WHERE job_id = :job_id
   AND NOT (app_name IS :app_name AND user_id IS :user_id AND session_id IS :session_id
            AND function_call_id IS :function_call_id);
-- 'ok': the row ends append_events_job_start too, whose refusals carry a status.
SELECT 'ok' AS status, * FROM jobs WHERE job_id = :job_id;

-- name: job_start inline
-- A long-running call's job: created if absent (job_create) and the call
-- attached to it (job_attach), in one transaction.
-- include: job_create
-- include: job_attach

-- name: append_events_job_start inline
-- A run's buffered events (append_events) and the job of a long-running call
-- among them (job_start) in one transaction: the call is durable exactly when
-- its job is, so no crash leaves one without the other. A refused append stops
-- the unit with its row (nothing written); else the result is the job's row.
-- include: append_events
-- include: job_create
-- include: job_attach

-- name: job_mark_submitted
-- Records that the outside system accepted the work; the first caller wins.
UPDATE jobs
   SET submitted_at = (julianday('now') - 2440587.5) * 86400.0, submit_after = NULL,
       submit_error = NULL, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id = :job_id AND submitted_at IS NULL
RETURNING job_id;

-- name: job_claim_submit
-- Takes the next submission attempt of open jobs whose work is not accepted
-- yet (one job, or any of the :tools, a JSON array of tool names): no attempt
-- running or backing off (submit_after passed), deadline not passed. The claim
-- holds the attempt for :lease seconds. The write lock serializes claimers.
UPDATE jobs
   SET submit_attempts = submit_attempts + 1,
       submit_after = (julianday('now') - 2440587.5) * 86400.0 + :lease,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id IN (
        SELECT q.job_id FROM jobs q
         WHERE q.state = 'STARTED' AND q.submitted_at IS NULL
           AND (:job_id IS NULL OR q.job_id = :job_id)
           AND (:tools IS NULL OR q.tool_name IN (SELECT value FROM json_each(:tools)))
           AND (q.submit_after IS NULL
                OR q.submit_after <= (julianday('now') - 2440587.5) * 86400.0)
           AND q.deadline_at > (julianday('now') - 2440587.5) * 86400.0
         ORDER BY q.submit_after IS NOT NULL, q.submit_after, q.created_at
         LIMIT :limit)
RETURNING *;

-- name: job_submit_failed
-- An attempt failed: keep the error, back off :retry_in seconds. Only the
-- attempt that is current (:attempt) sets the back-off.
UPDATE jobs
   SET submit_error = :error,
       submit_after = (julianday('now') - 2440587.5) * 86400.0 + :retry_in,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id = :job_id AND submitted_at IS NULL AND submit_attempts = :attempt
RETURNING job_id;

-- name: job_backdate_submit
-- Moves a job's submission attempt or back-off into the past, nothing else.
UPDATE jobs SET submit_after = submit_after - :seconds
 WHERE job_id = :job_id
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
                OR (NOT EXISTS (SELECT 1 FROM jobs s
                                 WHERE s.invocation_id = q.invocation_id
                                   AND s.session_id = q.session_id AND s.state = 'STARTED')
                    AND NOT EXISTS (SELECT 1 FROM job_calls sc
                                      JOIN jobs sj ON sj.job_id = sc.job_id
                                     WHERE sc.invocation_id = q.invocation_id
                                       AND sc.session_id = q.session_id
                                       AND sj.state = 'STARTED')))
         ORDER BY q.invocation_id, q.completed_at
         LIMIT :limit)
RETURNING *;

-- name: job_claim_resume_calls
-- The same for the other calls of finished jobs (job_calls): each call not yet
-- handed to a run, with no live claim, is held by one claimer under a lease.
UPDATE job_calls
   SET resume_owner = :owner, resume_epoch = resume_epoch + 1,
       resume_until = (julianday('now') - 2440587.5) * 86400.0 + :lease
 WHERE rowid IN (
        SELECT c.rowid FROM job_calls c JOIN jobs j ON j.job_id = c.job_id
         WHERE j.state <> 'STARTED' AND c.resumed_at IS NULL
           AND (:app_name IS NULL OR c.app_name = :app_name)
           AND (c.resume_until IS NULL
                OR c.resume_until < (julianday('now') - 2440587.5) * 86400.0)
           AND (j.completed_at <= (julianday('now') - 2440587.5) * 86400.0 - :gather
                OR (NOT EXISTS (SELECT 1 FROM jobs s
                                 WHERE s.invocation_id = c.invocation_id
                                   AND s.session_id = c.session_id AND s.state = 'STARTED')
                    AND NOT EXISTS (SELECT 1 FROM job_calls sc
                                      JOIN jobs sj ON sj.job_id = sc.job_id
                                     WHERE sc.invocation_id = c.invocation_id
                                       AND sc.session_id = c.session_id
                                       AND sj.state = 'STARTED')))
         ORDER BY c.invocation_id, j.completed_at
         LIMIT :limit)
RETURNING *;

-- name: job_mark_resumed
-- Records the run that carries the answers, for claims still held
-- (:claims is a JSON array of {"job_id", "epoch", "session_id", "call"}):
-- the job row's own call here, the other calls in job_mark_resumed_calls.
UPDATE jobs
   SET resumed_at = (julianday('now') - 2440587.5) * 86400.0, resume_run_id = :run_id,
       resume_until = NULL, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id IN (SELECT json_extract(c.value, '$.job_id') FROM json_each(:claims) c
                   WHERE json_extract(c.value, '$.epoch') = jobs.resume_epoch
                     AND json_extract(c.value, '$.session_id') = jobs.session_id
                     AND json_extract(c.value, '$.call') = jobs.function_call_id)
   AND resume_owner = :owner AND resumed_at IS NULL
RETURNING job_id;

-- name: job_mark_resumed_calls
UPDATE job_calls
   SET resumed_at = (julianday('now') - 2440587.5) * 86400.0, resume_run_id = :run_id,
       resume_until = NULL
 WHERE EXISTS (SELECT 1 FROM json_each(:claims) c
                WHERE json_extract(c.value, '$.job_id') = job_calls.job_id
                  AND json_extract(c.value, '$.session_id') = job_calls.session_id
                  AND json_extract(c.value, '$.call') = job_calls.function_call_id
                  AND json_extract(c.value, '$.epoch') = job_calls.resume_epoch)
   AND resume_owner = :owner AND resumed_at IS NULL
RETURNING job_id;

-- name: job_release_resume
-- Gives claims back at once (the resumer could not hand them over).
UPDATE jobs
   SET resume_until = NULL, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id IN (SELECT json_extract(c.value, '$.job_id') FROM json_each(:claims) c
                   WHERE json_extract(c.value, '$.epoch') = jobs.resume_epoch
                     AND json_extract(c.value, '$.session_id') = jobs.session_id
                     AND json_extract(c.value, '$.call') = jobs.function_call_id)
   AND resume_owner = :owner AND resumed_at IS NULL
RETURNING job_id;

-- name: job_release_resume_calls
UPDATE job_calls
   SET resume_until = NULL
 WHERE EXISTS (SELECT 1 FROM json_each(:claims) c
                WHERE json_extract(c.value, '$.job_id') = job_calls.job_id
                  AND json_extract(c.value, '$.session_id') = job_calls.session_id
                  AND json_extract(c.value, '$.call') = job_calls.function_call_id
                  AND json_extract(c.value, '$.epoch') = job_calls.resume_epoch)
   AND resume_owner = :owner AND resumed_at IS NULL
RETURNING job_id;

-- name: job_calls_of
-- The other calls attached to a job, oldest first.
SELECT * FROM job_calls WHERE job_id = :job_id ORDER BY created_at, function_call_id;

-- name: job_expire
-- Open jobs past their deadline become EXPIRED with the explicit result given.
UPDATE jobs
   SET state = 'EXPIRED', result = :result,
       completed_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id IN (
        SELECT q.job_id FROM jobs q
         WHERE q.state = 'STARTED' AND q.timer = 0
           AND q.deadline_at < (julianday('now') - 2440587.5) * 86400.0
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
-- deadline, a resume claim's lease (its other calls' too), a submission
-- back-off or a progress interval without waiting.
UPDATE job_calls SET resume_until = resume_until - :seconds WHERE job_id = :job_id;
UPDATE jobs
   SET deadline_at = deadline_at - :seconds,
       resume_until = resume_until - :seconds,
       submit_after = submit_after - :seconds,
       progress_sent_at = progress_sent_at - :seconds,
       completed_at = completed_at - :seconds
 WHERE job_id = :job_id
RETURNING job_id;

-- name: job_cancel_of_invocation
-- The invocation was cancelled: its open jobs end CANCELLED with :result (a
-- late completion then changes nothing: the first terminal result won). The
-- resumer acknowledges them without a run and calls each tool's cancel hook.
UPDATE jobs
   SET state = 'CANCELLED', result = :result,
       completed_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE app_name = :app_name AND user_id = :user_id AND session_id = :session_id
   AND invocation_id = :invocation_id AND state = 'STARTED'
RETURNING job_id;

-- ---------------------------------------------------------------- timers
-- A durable sleep is a job with timer = 1 whose deadline is its due time.

-- name: job_create_timer
-- Creates the timer if absent (its id names the call): due :until (epoch
-- seconds) or :seconds from now, both on the database clock. Submitted at
-- once: there is no outside work. An existing timer is returned unchanged.
INSERT OR IGNORE INTO jobs (job_id, tool_name, request, state, deadline_at, timer,
                            submitted_at, created_at, updated_at)
VALUES (:job_id, :tool_name, :request, 'STARTED',
        COALESCE(:until, (julianday('now') - 2440587.5) * 86400.0 + :seconds), 1,
        (julianday('now') - 2440587.5) * 86400.0,
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0);
SELECT changes() > 0 AS created, * FROM jobs WHERE job_id = :job_id;

-- name: job_wake
-- The one wake statement of a poll: open timers due by the database clock
-- (index jobs_timers_due) end SUCCEEDED with their wake-up as the result, in
-- the write lock, so each wakes once; the job resumer answers their calls.
UPDATE jobs
   SET state = 'SUCCEEDED',
       result = json_object('status', 'woke', 'due', deadline_at,
                            'woke_at', (julianday('now') - 2440587.5) * 86400.0),
       completed_at = (julianday('now') - 2440587.5) * 86400.0,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE job_id IN (
        SELECT q.job_id FROM jobs q
         WHERE q.state = 'STARTED' AND q.timer = 1
           AND q.deadline_at <= (julianday('now') - 2440587.5) * 86400.0
         ORDER BY q.deadline_at
         LIMIT :limit)
RETURNING *;

-- name: job_wake_of_invocation
-- The earliest open timer of an invocation: when a sleeping run wakes.
SELECT MIN(deadline_at) AS wakes_at FROM jobs
 WHERE invocation_id = :invocation_id AND timer = 1 AND state = 'STARTED';

-- name: job_now
-- The database clock, epoch seconds.
SELECT (julianday('now') - 2440587.5) * 86400.0 AS now;

-- Long-running jobs, part two: a submission is retried until the outside
-- system accepts it, and every call that attached to a job is answered.
--
-- submitted_at now means "accepted": it is set after submit() returned, not
-- before. Until then a submitter retries: submit_after is when the next
-- attempt may start (the running attempt's lease, then the back-off after a
-- failure), submit_attempts counts the attempts and submit_error keeps the
-- last failure. The job id is the idempotency key downstream, so an attempt
-- repeated after a crash is harmless.
ALTER TABLE jobs ADD COLUMN submit_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN submit_after REAL;
ALTER TABLE jobs ADD COLUMN submit_error TEXT;

-- The submitter's scan: open rows whose work is not yet accepted.
CREATE INDEX jobs_unsubmitted ON jobs (submit_after) WHERE state = 'STARTED' AND submitted_at IS NULL;

-- A job's first call is on its row. Every other call that attached to the same
-- job (another call id with the same business identity, maybe in another
-- invocation or session) is a row here, with a resume claim of its own, and is
-- answered once when the job ends.
CREATE TABLE job_calls (
    job_id            TEXT NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    app_name          TEXT NOT NULL,
    user_id           TEXT NOT NULL,
    session_id        TEXT NOT NULL,
    invocation_id     TEXT NOT NULL,
    function_call_id  TEXT NOT NULL,
    resume_owner      TEXT,
    resume_epoch      INTEGER NOT NULL DEFAULT 0,
    resume_until      REAL,
    resume_run_id     TEXT,
    resumed_at        REAL,
    created_at        REAL NOT NULL,
    PRIMARY KEY (job_id, app_name, user_id, session_id, function_call_id)
);

-- The resumer's scan: calls not yet handed to a run.
CREATE INDEX job_calls_open ON job_calls (job_id) WHERE resumed_at IS NULL;
CREATE INDEX job_calls_by_invocation ON job_calls (invocation_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (7, 'job_calls', (julianday('now') - 2440587.5) * 86400.0);

-- Long-running jobs: one row per long-running call, joining three facts that
-- arrive separately: the job (its id is the work's business identity, such as
-- report:2026-Q3:EMEA), the call it answers (session, invocation, function call
-- id) and its result. Only the first terminal result is kept. A row whose state
-- is terminal and whose call is known is answered once: a resumer claims it
-- under a lease (resume_owner, resume_epoch, resume_until) and records the run
-- that carries the answer (resume_run_id, resumed_at). Times are database clock.

CREATE TABLE jobs (
    job_id            TEXT PRIMARY KEY,
    tool_name         TEXT NOT NULL,
    request           TEXT,                          -- the call's arguments (JSON)
    app_name          TEXT,                          -- the call, filled by attach (only if empty)
    user_id           TEXT,
    session_id        TEXT,
    invocation_id     TEXT,
    function_call_id  TEXT,
    state             TEXT NOT NULL CHECK (state IN ('STARTED', 'SUCCEEDED', 'FAILED', 'EXPIRED', 'CANCELLED')),
    result            TEXT,                          -- JSON, set with the terminal state
    progress          TEXT,                          -- JSON, the last progress reported
    progress_at       REAL,
    progress_sent     TEXT,                          -- JSON, the last progress delivered
    progress_sent_at  REAL,
    deadline_at       REAL NOT NULL,
    submitted_at      REAL,                          -- the work was handed over (at most once)
    resume_owner      TEXT,
    resume_epoch      INTEGER NOT NULL DEFAULT 0,
    resume_until      REAL,
    resume_run_id     TEXT,
    resumed_at        REAL,
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL,
    completed_at      REAL
);

-- The resumer's scan: terminal rows not yet handed to a run.
CREATE INDEX jobs_ready ON jobs (completed_at) WHERE state <> 'STARTED' AND resumed_at IS NULL;
-- The expiry sweep and the progress sender: open rows.
CREATE INDEX jobs_open ON jobs (deadline_at) WHERE state = 'STARTED';
CREATE INDEX jobs_by_invocation ON jobs (invocation_id);
CREATE INDEX jobs_by_session ON jobs (app_name, user_id, session_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (4, 'jobs', (julianday('now') - 2440587.5) * 86400.0);

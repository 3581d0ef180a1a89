-- Operator control (issue 14): a CANCELLED status, cancel requests on a run,
-- and the audit trail of what people did to runs.
--
-- SQLite cannot change a CHECK constraint, so the runs table is rebuilt with
-- the same columns (in the same order), the cancel columns added at the end,
-- and its indexes made again.

CREATE TABLE runs_new (
    pk               INTEGER PRIMARY KEY AUTOINCREMENT,   -- queue order
    run_id           TEXT NOT NULL UNIQUE,
    app_name         TEXT NOT NULL,
    user_id          TEXT NOT NULL,
    session_id       TEXT NOT NULL,
    invocation_id    TEXT NOT NULL,
    request          TEXT NOT NULL,                       -- the message (JSON), so a run that never started can be replayed
    status           TEXT NOT NULL CHECK (status IN ('QUEUED', 'RUNNING', 'PAUSED', 'DONE', 'FAILED', 'PARKED', 'CANCELLED')),
    owner            TEXT,
    lease_until      REAL NOT NULL,
    epoch            INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  REAL NOT NULL DEFAULT 0,
    last_error       TEXT,
    classification   TEXT,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL,
    finished_at      REAL,
    cancel_requested_at REAL,                             -- an operator asked the owner to stop (database clock)
    cancel_requested_by TEXT
);

INSERT INTO runs_new (pk, run_id, app_name, user_id, session_id, invocation_id, request, status,
                      owner, lease_until, epoch, attempts, next_attempt_at, last_error,
                      classification, created_at, updated_at, finished_at)
SELECT pk, run_id, app_name, user_id, session_id, invocation_id, request, status,
       owner, lease_until, epoch, attempts, next_attempt_at, last_error,
       classification, created_at, updated_at, finished_at
  FROM runs;

DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;

CREATE UNIQUE INDEX runs_one_running_per_session
    ON runs (app_name, user_id, session_id) WHERE status = 'RUNNING';
CREATE INDEX runs_by_lease ON runs (status, lease_until);
CREATE INDEX runs_by_session ON runs (app_name, user_id, session_id, pk);
CREATE INDEX runs_by_invocation ON runs (invocation_id);

-- Who did what to a run, when and why (cancel, resolve, abandon, retry, answer).
CREATE TABLE operator_actions (
    pk             INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id         TEXT NOT NULL,
    app_name       TEXT NOT NULL,
    action         TEXT NOT NULL,                         -- cancel, resolve, abandon, retry, answer
    actor          TEXT NOT NULL,                         -- who
    reason         TEXT,                                  -- why
    status_before  TEXT NOT NULL,
    status_after   TEXT NOT NULL,
    epoch          INTEGER NOT NULL,                      -- the run's epoch after the action
    detail         TEXT,                                  -- JSON: the operator's result, the cancel outcome...
    created_at     REAL NOT NULL                          -- database clock
);

CREATE INDEX operator_actions_by_run ON operator_actions (run_id, pk);
CREATE INDEX operator_actions_by_app ON operator_actions (app_name, pk);

INSERT INTO schema_version (version, name, applied_at)
VALUES (10, 'operator', (julianday('now') - 2440587.5) * 86400.0);

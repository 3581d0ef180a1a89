-- The run ledger: one row per drive of an invocation, written before ADK is
-- called. Leases and back-off use the database clock. 'epoch' is the fencing
-- token: every claim bumps it, and every write made for the run names it.

CREATE TABLE runs (
    pk               INTEGER PRIMARY KEY AUTOINCREMENT,   -- queue order
    run_id           TEXT NOT NULL UNIQUE,
    app_name         TEXT NOT NULL,
    user_id          TEXT NOT NULL,
    session_id       TEXT NOT NULL,
    invocation_id    TEXT NOT NULL,
    request          TEXT NOT NULL,                       -- the message (JSON), so a run that never started can be replayed
    status           TEXT NOT NULL CHECK (status IN ('QUEUED', 'RUNNING', 'PAUSED', 'DONE', 'FAILED', 'PARKED')),
    owner            TEXT,
    lease_until      REAL NOT NULL,
    epoch            INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  REAL NOT NULL DEFAULT 0,
    last_error       TEXT,
    classification   TEXT,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL,
    finished_at      REAL
);

-- At most one RUNNING run per session, across every worker.
CREATE UNIQUE INDEX runs_one_running_per_session
    ON runs (app_name, user_id, session_id) WHERE status = 'RUNNING';
CREATE INDEX runs_by_lease ON runs (status, lease_until);
CREATE INDEX runs_by_session ON runs (app_name, user_id, session_id, pk);

CREATE TABLE dead_letters (
    pk              INTEGER PRIMARY KEY AUTOINCREMENT,
    kind            TEXT NOT NULL,                        -- 'run' (later: 'compensation', ...)
    run_id          TEXT,
    request         TEXT,
    classification  TEXT,
    last_events     TEXT,                                 -- JSON array of the last events
    error           TEXT NOT NULL,
    created_at      REAL NOT NULL
);

CREATE INDEX dead_letters_by_run ON dead_letters (run_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (2, 'runs', (julianday('now') - 2440587.5) * 86400.0);

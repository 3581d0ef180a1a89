-- Sessions as append-only event logs. State is a fold over the log; snapshots
-- cache that fold every N events. App and user state are shared by sessions and
-- kept materialized, updated in the same transaction as the event that changes them.
-- Times are seconds since the Unix epoch (REAL).

CREATE TABLE schema_version (
    version     INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    applied_at  REAL NOT NULL
);

CREATE TABLE sessions (
    pk             INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a cache keyed by pk cannot confuse a recreated session
    app_name       TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    initial_state  TEXT NOT NULL,                      -- session-scoped state given at creation (JSON)
    last_seq       INTEGER NOT NULL DEFAULT 0,         -- the fence: an append must name it
    create_time    REAL NOT NULL,
    update_time    REAL NOT NULL,
    UNIQUE (app_name, user_id, session_id)
);

CREATE INDEX sessions_by_update ON sessions (app_name, update_time);

CREATE TABLE events (
    session_pk     INTEGER NOT NULL REFERENCES sessions (pk) ON DELETE CASCADE,
    seq            INTEGER NOT NULL,                   -- 1, 2, 3... per session: append order
    event_id       TEXT NOT NULL,
    invocation_id  TEXT NOT NULL,
    author         TEXT NOT NULL,
    timestamp      REAL NOT NULL,
    delta          TEXT,                               -- session-scoped state delta (JSON) or NULL
    data           TEXT NOT NULL,                      -- the whole event (JSON)
    PRIMARY KEY (session_pk, seq),
    UNIQUE (session_pk, event_id)
) WITHOUT ROWID;

CREATE INDEX events_by_invocation ON events (session_pk, invocation_id);

CREATE TABLE state_snapshots (
    session_pk  INTEGER NOT NULL REFERENCES sessions (pk) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,                      -- the fold of events 1..seq
    state       TEXT NOT NULL,
    PRIMARY KEY (session_pk, seq)
) WITHOUT ROWID;

CREATE TABLE app_state (
    app_name     TEXT PRIMARY KEY,
    state        TEXT NOT NULL,
    update_time  REAL NOT NULL
);

CREATE TABLE user_state (
    app_name     TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    state        TEXT NOT NULL,
    update_time  REAL NOT NULL,
    PRIMARY KEY (app_name, user_id)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (1, 'sessions', (julianday('now') - 2440587.5) * 86400.0);
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
-- The side-effect journal: one row per outside effect, keyed by what the
-- effect IS (send-invoice:INV-77), never by the function call id. INTENT is
-- written before acting, DONE (with the result) after. Writes made for a run
-- carry its fencing epoch.

CREATE TABLE journal (
    key               TEXT PRIMARY KEY,
    tool_name         TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('INTENT', 'DONE')),
    result            TEXT,                          -- JSON, set with DONE
    run_id            TEXT,
    run_epoch         INTEGER,
    invocation_id     TEXT,
    function_call_id  TEXT,
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL
);

CREATE INDEX journal_by_invocation ON journal (invocation_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (3, 'journal', (julianday('now') - 2440587.5) * 86400.0);

-- The saga ledger: a saga's steps, written durably before the events that
-- report them, so a saga whose process died can still be finished: every
-- action that may have happened is found and compensated, newest first.

CREATE TABLE sagas (
    saga_id        TEXT PRIMARY KEY,                  -- '<invocation id>/<saga name>'
    name           TEXT NOT NULL,
    app_name       TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    invocation_id  TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('RUNNING', 'COMPENSATING', 'COMMITTED',
                                                   'COMPENSATED', 'COMPENSATION_FAILED')),
    reason         TEXT,
    owner          TEXT,                              -- the saga sweeper holding it
    lease_until    REAL NOT NULL DEFAULT 0,
    failed_at      REAL,                              -- when compensation began
    created_at     REAL NOT NULL,
    updated_at     REAL NOT NULL,
    finished_at    REAL
);

CREATE INDEX sagas_by_status ON sagas (status, updated_at);
CREATE INDEX sagas_by_invocation ON sagas (invocation_id);

CREATE TABLE saga_steps (
    pk             INTEGER PRIMARY KEY AUTOINCREMENT,  -- start order: compensation runs newest first
    saga_id        TEXT NOT NULL REFERENCES sagas (saga_id) ON DELETE CASCADE,
    step           TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('PENDING', 'DONE', 'COMPENSATED',
                                                   'COMPENSATION_FAILED')),
    action_key     TEXT NOT NULL,                      -- idempotency key of the action
    comp_key       TEXT NOT NULL,                      -- idempotency key of its compensation
    record         TEXT,                               -- what the compensator needs (JSON), set with DONE
    attempts       INTEGER NOT NULL DEFAULT 0,         -- compensation attempts
    last_error     TEXT,
    created_at     REAL NOT NULL,
    updated_at     REAL NOT NULL,
    UNIQUE (saga_id, step)
);

-- The saga sweeper asks whether a saga's run is still live.
CREATE INDEX runs_by_invocation ON runs (invocation_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (5, 'sagas', (julianday('now') - 2440587.5) * 86400.0);

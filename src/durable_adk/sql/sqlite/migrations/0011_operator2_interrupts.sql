-- Operator control, second part (issue 14): who resolved a journaled effect by
-- hand, and the interrupts inbox: one row per human-input or long-running call
-- a run paused on, written when the run pauses, answered at most once.

-- The operator who recorded a journaled effect's result by hand.
ALTER TABLE journal ADD COLUMN resolved_by TEXT;

CREATE TABLE interrupts (
    pk             INTEGER PRIMARY KEY AUTOINCREMENT,
    call_id        TEXT NOT NULL,                          -- the function call waiting for its answer
    app_name       TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    invocation_id  TEXT NOT NULL,
    run_id         TEXT NOT NULL,                          -- the run that paused on it
    kind           TEXT NOT NULL CHECK (kind IN ('confirmation', 'input', 'long_running')),
    name           TEXT NOT NULL,                          -- the call's function name
    args           TEXT,                                   -- JSON: the call's arguments (hint, payload, original call)
    status         TEXT NOT NULL CHECK (status IN ('OPEN', 'ANSWERED', 'EXPIRED', 'CLOSED')),
    deadline_at    REAL,                                   -- the default outcome (deny) applies after it (database clock)
    answered_by    TEXT,                                   -- who answered (or 'deadline')
    answer         TEXT,                                   -- JSON: the function response sent
    answer_run_id  TEXT,                                   -- the run that carries the answer on
    answered_at    REAL,
    created_at     REAL NOT NULL
);

CREATE UNIQUE INDEX interrupts_by_call ON interrupts (app_name, user_id, session_id, invocation_id, call_id);
CREATE INDEX interrupts_open ON interrupts (status, deadline_at);
CREATE INDEX interrupts_by_call_id ON interrupts (call_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (11, 'operator2_interrupts', (julianday('now') - 2440587.5) * 86400.0);

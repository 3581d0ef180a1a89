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

-- The side-effect journal: one row per outside effect, keyed by what the
-- effect IS (send-invoice:INV-77), never by the function call id. INTENT is
-- written before acting, DONE (with the result) after. Writes made for a run
-- carry its fencing epoch.

CREATE TABLE journal (
    key               text PRIMARY KEY,
    tool_name         text NOT NULL,
    status            text NOT NULL CHECK (status IN ('INTENT', 'DONE')),
    result            text,                          -- JSON, set with DONE
    run_id            text,
    run_epoch         bigint,
    invocation_id     text,
    function_call_id  text,
    created_at        double precision NOT NULL,
    updated_at        double precision NOT NULL
);

CREATE INDEX journal_by_invocation ON journal (invocation_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (3, 'journal', extract(epoch FROM clock_timestamp()));

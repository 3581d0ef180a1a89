-- Artifacts: ADK's files (reports, images) kept in the durable store with
-- every version, so a recovered run finds what its earlier steps saved.
-- Session-scoped artifacts carry their session id; user-scoped ones
-- ("user:..." file names) carry ''. A version written inside a run names the
-- run and its epoch: once the run was taken over the write is refused.

CREATE TABLE artifacts (
    app_name         TEXT NOT NULL,
    user_id          TEXT NOT NULL,
    session_id       TEXT NOT NULL,                   -- '' for user-scoped artifacts
    filename         TEXT NOT NULL,
    version          INTEGER NOT NULL,                -- 0, 1, 2, ... per file
    part             TEXT NOT NULL,                   -- the google.genai Part, JSON
    mime_type        TEXT,
    custom_metadata  TEXT NOT NULL DEFAULT '{}',      -- JSON object
    digest           TEXT NOT NULL,                   -- sha256 of part: a re-driven save is recognised
    run_id           TEXT,
    run_epoch        INTEGER,
    invocation_id    TEXT,
    created_at       REAL NOT NULL,
    PRIMARY KEY (app_name, user_id, session_id, filename, version)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (6, 'artifacts', (julianday('now') - 2440587.5) * 86400.0);

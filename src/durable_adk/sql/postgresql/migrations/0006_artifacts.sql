-- Artifacts: ADK's files (reports, images) kept in the durable store with
-- every version, so a recovered run finds what its earlier steps saved.
-- Session-scoped artifacts carry their session id; user-scoped ones
-- ("user:..." file names) carry ''. A version written inside a run names the
-- run and its epoch: once the run was taken over the write is refused.

CREATE TABLE artifacts (
    app_name         text NOT NULL,
    user_id          text NOT NULL,
    session_id       text NOT NULL,                   -- '' for user-scoped artifacts
    filename         text NOT NULL,
    version          bigint NOT NULL,                 -- 0, 1, 2, ... per file
    part             text NOT NULL,                   -- the google.genai Part, JSON
    mime_type        text,
    custom_metadata  text NOT NULL DEFAULT '{}',      -- JSON object
    digest           text NOT NULL,                   -- sha256 of part: a re-driven save is recognised
    run_id           text,
    run_epoch        bigint,
    invocation_id    text,
    created_at       double precision NOT NULL,
    PRIMARY KEY (app_name, user_id, session_id, filename, version)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (6, 'artifacts', extract(epoch FROM clock_timestamp()));

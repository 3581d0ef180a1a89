-- The run ledger: one row per drive of an invocation, written before ADK is
-- called. Leases and back-off use the database clock. 'epoch' is the fencing
-- token: every claim bumps it, and every write made for the run names it.

CREATE TABLE runs (
    pk               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- queue order
    run_id           text NOT NULL UNIQUE,
    app_name         text NOT NULL,
    user_id          text NOT NULL,
    session_id       text NOT NULL,
    invocation_id    text NOT NULL,
    request          text NOT NULL,                      -- the message (JSON), so a run that never started can be replayed
    status           text NOT NULL CHECK (status IN ('QUEUED', 'RUNNING', 'PAUSED', 'DONE', 'FAILED', 'PARKED')),
    owner            text,
    lease_until      double precision NOT NULL,
    epoch            bigint NOT NULL DEFAULT 0,
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  double precision NOT NULL DEFAULT 0,
    last_error       text,
    classification   text,
    created_at       double precision NOT NULL,
    updated_at       double precision NOT NULL,
    finished_at      double precision
);

-- At most one RUNNING run per session, across every worker.
CREATE UNIQUE INDEX runs_one_running_per_session
    ON runs (app_name, user_id, session_id) WHERE status = 'RUNNING';
CREATE INDEX runs_by_lease ON runs (status, lease_until);
CREATE INDEX runs_by_session ON runs (app_name, user_id, session_id, pk);

CREATE TABLE dead_letters (
    pk              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text NOT NULL,                       -- 'run' (later: 'compensation', ...)
    run_id          text,
    request         text,
    classification  text,
    last_events     text,                                -- JSON array of the last events
    error           text NOT NULL,
    created_at      double precision NOT NULL
);

CREATE INDEX dead_letters_by_run ON dead_letters (run_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (2, 'runs', extract(epoch FROM clock_timestamp()));

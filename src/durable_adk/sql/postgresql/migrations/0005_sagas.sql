-- The saga ledger: a saga's steps, written durably before the events that
-- report them, so a saga whose process died can still be finished: every
-- action that may have happened is found and compensated, newest first.

CREATE TABLE sagas (
    saga_id        text PRIMARY KEY,                  -- '<invocation id>/<saga name>'
    name           text NOT NULL,
    app_name       text NOT NULL,
    user_id        text NOT NULL,
    session_id     text NOT NULL,
    invocation_id  text NOT NULL,
    status         text NOT NULL CHECK (status IN ('RUNNING', 'COMPENSATING', 'COMMITTED',
                                                   'COMPENSATED', 'COMPENSATION_FAILED')),
    reason         text,
    owner          text,                              -- the saga sweeper holding it
    lease_until    double precision NOT NULL DEFAULT 0,
    failed_at      double precision,                              -- when compensation began
    created_at     double precision NOT NULL,
    updated_at     double precision NOT NULL,
    finished_at    double precision
);

CREATE INDEX sagas_by_status ON sagas (status, updated_at);
CREATE INDEX sagas_by_invocation ON sagas (invocation_id);

CREATE TABLE saga_steps (
    pk             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- start order: compensation runs newest first
    saga_id        text NOT NULL REFERENCES sagas (saga_id) ON DELETE CASCADE,
    step           text NOT NULL,
    status         text NOT NULL CHECK (status IN ('PENDING', 'DONE', 'COMPENSATED',
                                                   'COMPENSATION_FAILED')),
    action_key     text NOT NULL,                      -- idempotency key of the action
    comp_key       text NOT NULL,                      -- idempotency key of its compensation
    record         text,                               -- what the compensator needs (JSON), set with DONE
    attempts       integer NOT NULL DEFAULT 0,         -- compensation attempts
    last_error     text,
    created_at     double precision NOT NULL,
    updated_at     double precision NOT NULL,
    UNIQUE (saga_id, step)
);

-- The saga sweeper asks whether a saga's run is still live.
CREATE INDEX runs_by_invocation ON runs (invocation_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (5, 'sagas', extract(epoch FROM clock_timestamp()));

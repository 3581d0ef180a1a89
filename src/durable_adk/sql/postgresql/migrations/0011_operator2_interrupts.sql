-- Operator control, second part (issue 14): who resolved a journaled effect by
-- hand, and the interrupts inbox: one row per human-input or long-running call
-- a run paused on, written when the run pauses, answered at most once.

-- The operator who recorded a journaled effect's result by hand.
ALTER TABLE journal ADD COLUMN resolved_by text;

CREATE TABLE interrupts (
    pk             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    call_id        text NOT NULL,                          -- the function call waiting for its answer
    app_name       text NOT NULL,
    user_id        text NOT NULL,
    session_id     text NOT NULL,
    invocation_id  text NOT NULL,
    run_id         text NOT NULL,                          -- the run that paused on it
    kind           text NOT NULL CHECK (kind IN ('confirmation', 'input', 'long_running')),
    name           text NOT NULL,                          -- the call's function name
    args           text,                                   -- JSON: the call's arguments (hint, payload, original call)
    status         text NOT NULL CHECK (status IN ('OPEN', 'ANSWERED', 'EXPIRED', 'CLOSED')),
    deadline_at    double precision,                       -- the default outcome (deny) applies after it (database clock)
    answered_by    text,                                   -- who answered (or 'deadline')
    answer         text,                                   -- JSON: the function response sent
    answer_run_id  text,                                   -- the run that carries the answer on
    answered_at    double precision,
    created_at     double precision NOT NULL
);

CREATE UNIQUE INDEX interrupts_by_call ON interrupts (app_name, user_id, session_id, invocation_id, call_id);
CREATE INDEX interrupts_open ON interrupts (status, deadline_at);
CREATE INDEX interrupts_by_call_id ON interrupts (call_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (11, 'operator2_interrupts', extract(epoch FROM clock_timestamp()));

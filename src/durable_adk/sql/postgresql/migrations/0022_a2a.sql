-- Durable A2A (issue 44): an A2A task is a run of the ledger and its
-- continuations. The task as A2A sees it (its state, its version for
-- compare-and-swap, its body: the Task, protobuf JSON), the events that made
-- each version (read by resubscribers on any worker from the version they last
-- saw), the invocations a task drove, the message ids a context already took
-- (a re-sent message is answered with its task, never run twice) and the push
-- configs clients registered, owner-scoped.

CREATE TABLE a2a_tasks (
    task_id     text PRIMARY KEY,
    app_name    text NOT NULL,
    owner       text NOT NULL,                        -- who may read it ('' when unauthenticated)
    context_id  text NOT NULL,                        -- the session
    state       text NOT NULL,                        -- TASK_STATE_*, as in the body
    version     bigint NOT NULL,                      -- 1 at the first save, +1 at each
    body        text NOT NULL,                        -- the Task (protobuf JSON)
    created_at  double precision NOT NULL,
    updated_at  double precision NOT NULL
);
CREATE INDEX a2a_tasks_by_context ON a2a_tasks (app_name, owner, context_id, updated_at);
CREATE INDEX a2a_tasks_by_state ON a2a_tasks (app_name, state);

CREATE TABLE a2a_task_events (
    task_id     text NOT NULL,
    version     bigint NOT NULL,                      -- the task's version this event made
    body        text NOT NULL,                        -- a StreamResponse (protobuf JSON)
    created_at  double precision NOT NULL,
    PRIMARY KEY (task_id, version)
);

CREATE TABLE a2a_task_runs (
    task_id        text NOT NULL,
    app_name       text NOT NULL,
    user_id        text NOT NULL,
    session_id     text NOT NULL,
    invocation_id  text NOT NULL,
    created_at     double precision NOT NULL,
    PRIMARY KEY (task_id, invocation_id)
);
CREATE INDEX a2a_task_runs_by_invocation ON a2a_task_runs (invocation_id);

CREATE TABLE a2a_messages (
    app_name    text NOT NULL,
    owner       text NOT NULL,
    context_id  text NOT NULL,                        -- as the client sent it ('' for none)
    message_id  text NOT NULL,
    task_id     text NOT NULL,
    nonce       text NOT NULL,                        -- the taker's own mark: it took the id
    created_at  double precision NOT NULL,
    PRIMARY KEY (app_name, owner, context_id, message_id)
);

CREATE TABLE a2a_push_configs (
    task_id     text NOT NULL,
    owner       text NOT NULL,
    config_id   text NOT NULL,
    body        text NOT NULL,                        -- the TaskPushNotificationConfig (protobuf JSON)
    created_at  double precision NOT NULL,
    PRIMARY KEY (task_id, owner, config_id)
);

CREATE TABLE a2a_push_outbox (
    pk          bigserial PRIMARY KEY,
    app_name    text NOT NULL,
    task_id     text NOT NULL,
    owner       text NOT NULL,
    config_id   text NOT NULL,
    version     bigint NOT NULL,                         -- the task version whose event this is
    config      text NOT NULL,                         -- the push config (url, token), as registered
    body        text NOT NULL,                         -- the event (a StreamResponse, protobuf JSON)
    status      text NOT NULL,                         -- PENDING, SENT, DEAD
    attempts    bigint NOT NULL DEFAULT 0,
    next_attempt_at double precision NOT NULL,                     -- database clock
    last_error  text,
    created_at  double precision NOT NULL,
    sent_at     double precision,
    UNIQUE (task_id, owner, config_id, version)
);
CREATE INDEX a2a_push_due ON a2a_push_outbox (app_name, status, next_attempt_at);

INSERT INTO schema_version (version, name, applied_at)
VALUES (22, 'a2a', extract(epoch FROM clock_timestamp()));

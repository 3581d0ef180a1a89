-- Durable A2A (issue 44): an A2A task is a run of the ledger and its
-- continuations. The task as A2A sees it (its state, its version for
-- compare-and-swap, its body: the Task, protobuf JSON), the events that made
-- each version (read by resubscribers on any worker from the version they last
-- saw), the invocations a task drove, the message ids a context already took
-- (a re-sent message is answered with its task, never run twice) and the push
-- configs clients registered, owner-scoped.

CREATE TABLE a2a_tasks (
    task_id     TEXT PRIMARY KEY,
    app_name    TEXT NOT NULL,
    owner       TEXT NOT NULL,                        -- who may read it ('' when unauthenticated)
    context_id  TEXT NOT NULL,                        -- the session
    state       TEXT NOT NULL,                        -- TASK_STATE_*, as in the body
    version     INTEGER NOT NULL,                     -- 1 at the first save, +1 at each
    body        TEXT NOT NULL,                        -- the Task (protobuf JSON)
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE INDEX a2a_tasks_by_context ON a2a_tasks (app_name, owner, context_id, updated_at);
CREATE INDEX a2a_tasks_by_state ON a2a_tasks (app_name, state);

CREATE TABLE a2a_task_events (
    task_id     TEXT NOT NULL,
    version     INTEGER NOT NULL,                     -- the task's version this event made
    body        TEXT NOT NULL,                        -- a StreamResponse (protobuf JSON)
    created_at  REAL NOT NULL,
    PRIMARY KEY (task_id, version)
);

CREATE TABLE a2a_task_runs (
    task_id        TEXT NOT NULL,
    app_name       TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    invocation_id  TEXT NOT NULL,
    created_at     REAL NOT NULL,
    PRIMARY KEY (task_id, invocation_id)
);
CREATE INDEX a2a_task_runs_by_invocation ON a2a_task_runs (invocation_id);

CREATE TABLE a2a_messages (
    app_name    TEXT NOT NULL,
    owner       TEXT NOT NULL,
    context_id  TEXT NOT NULL,                        -- as the client sent it ('' for none)
    message_id  TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    nonce       TEXT NOT NULL,                        -- the taker's own mark: it took the id
    created_at  REAL NOT NULL,
    PRIMARY KEY (app_name, owner, context_id, message_id)
);

CREATE TABLE a2a_push_configs (
    task_id     TEXT NOT NULL,
    owner       TEXT NOT NULL,
    config_id   TEXT NOT NULL,
    body        TEXT NOT NULL,                        -- the TaskPushNotificationConfig (protobuf JSON)
    created_at  REAL NOT NULL,
    PRIMARY KEY (task_id, owner, config_id)
);

CREATE TABLE a2a_push_outbox (
    pk          INTEGER PRIMARY KEY AUTOINCREMENT,
    app_name    TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    owner       TEXT NOT NULL,
    config_id   TEXT NOT NULL,
    version     INTEGER NOT NULL,                         -- the task version whose event this is
    config      TEXT NOT NULL,                         -- the push config (url, token), as registered
    body        TEXT NOT NULL,                         -- the event (a StreamResponse, protobuf JSON)
    status      TEXT NOT NULL,                         -- PENDING, SENT, DEAD
    attempts    INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,                     -- database clock
    last_error  TEXT,
    created_at  REAL NOT NULL,
    sent_at     REAL,
    UNIQUE (task_id, owner, config_id, version)
);
CREATE INDEX a2a_push_due ON a2a_push_outbox (app_name, status, next_attempt_at);

INSERT INTO schema_version (version, name, applied_at)
VALUES (22, 'a2a', (julianday('now') - 2440587.5) * 86400.0);

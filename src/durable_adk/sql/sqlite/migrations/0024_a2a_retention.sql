-- The A2A rows in retention and in forgetting a user (issues 43 and 44). A
-- session's A2A tasks are found through the invocations they drove
-- (a2a_task_runs, by session); a task's events, push configs and outbox rows
-- through their keys (task first); the message ids a task took through the
-- index below. Each batch of the purge stays on an index.

-- The tasks of a session (the purge's and the forget's way to a session's tasks).
CREATE INDEX a2a_task_runs_by_session ON a2a_task_runs (app_name, user_id, session_id);
-- The message ids a task took (a2a_messages is keyed by the client's context and id).
CREATE INDEX a2a_messages_by_task ON a2a_messages (task_id);

INSERT INTO schema_version (version, name, applied_at)
VALUES (24, 'a2a_retention', (julianday('now') - 2440587.5) * 86400.0);

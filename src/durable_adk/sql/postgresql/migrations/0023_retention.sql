-- Retention and forgetting a user (issue 43). A session chosen for purging is
-- marked first (purging_at, database clock), in one statement that checks
-- nothing still needs it; from then on an append to it finds it missing, so
-- its events can be deleted in short batches without a long lock. The
-- session row goes last, when nothing of it is left. The indexes below keep
-- every batch of the purge on an index; forget_requests is the audit of
-- forgetting a user, written before anything is deleted.

ALTER TABLE sessions ADD COLUMN purging_at double precision;

-- The sessions being purged, per app and user (a small set: marked a batch at a time).
CREATE INDEX sessions_purging ON sessions (app_name, user_id) WHERE purging_at IS NOT NULL;
-- The sagas of a session: the purge checks none is unfinished, then deletes them.
CREATE INDEX sagas_by_session ON sagas (app_name, user_id, session_id);
-- The oldest finished run kept, per app (a metric of the purge).
CREATE INDEX runs_finished ON runs (app_name, finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE forget_requests (
    pk           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope        text NOT NULL,                     -- the app, or '*': every app
    user_id      text NOT NULL,
    actor        text NOT NULL,                     -- who asked
    reason       text,                              -- why
    status       text NOT NULL CHECK (status IN ('STARTED', 'DONE')),
    deleted      text NOT NULL DEFAULT '{}',        -- JSON: rows deleted per table so far
    created_at   double precision NOT NULL,         -- database clock
    finished_at  double precision
);

-- One request in progress per user and scope: a retry after a crash carries it on.
CREATE UNIQUE INDEX forget_requests_open ON forget_requests (scope, user_id)
    WHERE status = 'STARTED';

INSERT INTO schema_version (version, name, applied_at)
VALUES (23, 'retention', extract(epoch FROM clock_timestamp()));

-- Schedules belong to a version, and who serves is who is alive (issue 41).
-- A schedule row records the app version whose code last synced it (NULL:
-- an unversioned app, or synced before this migration); schedule_sets holds,
-- per app, the version whose declared set is in force, a digest of that set
-- and an epoch every sync bumps, so two syncs never interleave and a worker
-- notices in one read that the set changed. workers holds the serving
-- processes' beats (`durable-adk versions` lists who serves): a stopped
-- worker leaves (left_at), a killed one stops beating.

ALTER TABLE schedules ADD COLUMN app_version text;

CREATE TABLE schedule_sets (
    app_name     text PRIMARY KEY,
    app_version  text,                                    -- the version whose set is in force; NULL: unversioned
    digest       text NOT NULL,                           -- of that set's definitions
    epoch        bigint NOT NULL,                         -- bumped by every sync
    synced_by    text,                                    -- the worker of the last sync
    synced_at    double precision NOT NULL                -- database clock
);

CREATE TABLE workers (
    app_name         text NOT NULL,
    worker_id        text NOT NULL,
    app_version      text,
    app_fingerprint  text,
    serves           text,                                -- the versions whose runs it takes (JSON array)
    beat_s           double precision NOT NULL,           -- seconds between its beats
    last_beat_at     double precision NOT NULL,           -- database clock
    started_at       double precision NOT NULL,
    left_at          double precision,                    -- when it stopped serving; NULL: serving
    PRIMARY KEY (app_name, worker_id)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (19, 'schedule_versions', extract(epoch FROM clock_timestamp()));

-- Schedules belong to a version, and who serves is who is alive (issue 41).
-- A schedule row records the app version whose code last synced it (NULL:
-- an unversioned app, or synced before this migration); schedule_sets holds,
-- per app, the version whose declared set is in force, a digest of that set
-- and an epoch every sync bumps, so two syncs never interleave and a worker
-- notices in one read that the set changed. workers holds the serving
-- processes' beats (`durable-adk versions` lists who serves): a stopped
-- worker leaves (left_at), a killed one stops beating.

ALTER TABLE schedules ADD COLUMN app_version TEXT;

CREATE TABLE schedule_sets (
    app_name     TEXT PRIMARY KEY,
    app_version  TEXT,                                    -- the version whose set is in force; NULL: unversioned
    digest       TEXT NOT NULL,                           -- of that set's definitions
    epoch        INTEGER NOT NULL,                        -- bumped by every sync
    synced_by    TEXT,                                    -- the worker of the last sync
    synced_at    REAL NOT NULL                            -- database clock
);

CREATE TABLE workers (
    app_name         TEXT NOT NULL,
    worker_id        TEXT NOT NULL,
    app_version      TEXT,
    app_fingerprint  TEXT,
    serves           TEXT,                                -- the versions whose runs it takes (JSON array)
    beat_s           REAL NOT NULL,                       -- seconds between its beats
    last_beat_at     REAL NOT NULL,                       -- database clock
    started_at       REAL NOT NULL,
    left_at          REAL,                                -- when it stopped serving; NULL: serving
    PRIMARY KEY (app_name, worker_id)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (19, 'schedule_versions', (julianday('now') - 2440587.5) * 86400.0);

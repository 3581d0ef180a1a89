-- Versioned runs (issue 25): every run, job, saga and interrupt records the
-- app version it was started under (the version string the app declares and a
-- fingerprint of its definition); a sweeper says which version it serves; an
-- operator may drain a version. NULL: recorded before versions existed, or by
-- an app that declares none.

ALTER TABLE runs ADD COLUMN app_version TEXT;
ALTER TABLE runs ADD COLUMN app_fingerprint TEXT;
ALTER TABLE jobs ADD COLUMN app_version TEXT;
ALTER TABLE jobs ADD COLUMN app_fingerprint TEXT;
ALTER TABLE sagas ADD COLUMN app_version TEXT;
ALTER TABLE sagas ADD COLUMN app_fingerprint TEXT;
ALTER TABLE interrupts ADD COLUMN app_version TEXT;
ALTER TABLE interrupts ADD COLUMN app_fingerprint TEXT;
-- What a sweeper's worker serves: its own version and the earlier ones it continues (JSON array).
ALTER TABLE sweepers ADD COLUMN app_version TEXT;
ALTER TABLE sweepers ADD COLUMN app_fingerprint TEXT;
ALTER TABLE sweepers ADD COLUMN serves TEXT;

-- `durable-adk versions` counts runs by version and status.
CREATE INDEX runs_by_version ON runs (app_name, app_version, status);

-- Versions an operator drained: no new run starts on them; their runs finish.
CREATE TABLE app_versions (
    app_name     TEXT NOT NULL,
    app_version  TEXT NOT NULL,
    drained_at   REAL,                                    -- database clock; NULL: taking runs
    drained_by   TEXT,
    reason       TEXT,
    PRIMARY KEY (app_name, app_version)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (16, 'versions', (julianday('now') - 2440587.5) * 86400.0);

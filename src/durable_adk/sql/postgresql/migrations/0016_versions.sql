-- Versioned runs (issue 25): every run, job, saga and interrupt records the
-- app version it was started under (the version string the app declares and a
-- fingerprint of its definition); a sweeper says which version it serves; an
-- operator may drain a version. NULL: recorded before versions existed, or by
-- an app that declares none.

ALTER TABLE runs ADD COLUMN app_version text;
ALTER TABLE runs ADD COLUMN app_fingerprint text;
ALTER TABLE jobs ADD COLUMN app_version text;
ALTER TABLE jobs ADD COLUMN app_fingerprint text;
ALTER TABLE sagas ADD COLUMN app_version text;
ALTER TABLE sagas ADD COLUMN app_fingerprint text;
ALTER TABLE interrupts ADD COLUMN app_version text;
ALTER TABLE interrupts ADD COLUMN app_fingerprint text;
-- What a sweeper's worker serves: its own version and the earlier ones it continues (JSON array).
ALTER TABLE sweepers ADD COLUMN app_version text;
ALTER TABLE sweepers ADD COLUMN app_fingerprint text;
ALTER TABLE sweepers ADD COLUMN serves text;

-- `durable-adk versions` counts runs by version and status.
CREATE INDEX runs_by_version ON runs (app_name, app_version, status);

-- Versions an operator drained: no new run starts on them; their runs finish.
CREATE TABLE app_versions (
    app_name     text NOT NULL,
    app_version  text NOT NULL,
    drained_at   double precision,                                    -- database clock; NULL: taking runs
    drained_by   text,
    reason       text,
    PRIMARY KEY (app_name, app_version)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (16, 'versions', extract(epoch FROM clock_timestamp()));

-- Recovery sweepers (issue 12): one row per sweeper (app, worker), stamped by
-- the database clock at the end of each pass, so a runner can tell whether any
-- process recovers its app's runs and say so when none does.

CREATE TABLE sweepers (
    app_name       TEXT NOT NULL,
    worker_id      TEXT NOT NULL,
    interval_s     REAL,                                  -- seconds between its passes; NULL: a one-off pass (durable-adk recover)
    last_sweep_at  REAL NOT NULL,                         -- database clock
    PRIMARY KEY (app_name, worker_id)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (12, 'adoption_sweepers', (julianday('now') - 2440587.5) * 86400.0);

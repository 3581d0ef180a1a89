-- Schedules (issue 26): a row per schedule an app declares, as last synced
-- from its code, with its next tick and when a worker should next look at it;
-- a row per tick, keyed by (app, schedule, tick key), written with the id of
-- the run it starts chosen in advance, so a tick is fired exactly once.

CREATE TABLE schedules (
    pk             INTEGER PRIMARY KEY AUTOINCREMENT,
    app_name       TEXT NOT NULL,
    name           TEXT NOT NULL,
    spec           TEXT NOT NULL,                         -- the definition (JSON) as last synced from code
    next_tick_at   REAL NOT NULL,                         -- the next tick not yet recorded (UTC seconds)
    next_fire_at   REAL NOT NULL,                         -- when a worker should next claim it (database clock)
    paused         INTEGER NOT NULL DEFAULT 0,
    orphaned_at    REAL,                                  -- when a sync found it gone from the code
    epoch          INTEGER NOT NULL DEFAULT 0,            -- bumped by every claim and every change
    owner          TEXT,                                  -- the worker of the last claim
    last_tick_at   REAL,                                  -- the last tick recorded
    last_run_id    TEXT,                                  -- the run of the last tick submitted
    missed         INTEGER NOT NULL DEFAULT 0,            -- ticks not fired by the catch-up policy
    created_at     REAL NOT NULL,
    updated_at     REAL NOT NULL,
    UNIQUE (app_name, name)
);

-- The poller's one claim: due schedules of an app, in order of their time.
CREATE INDEX schedules_due ON schedules (app_name, next_fire_at)
    WHERE paused = 0 AND orphaned_at IS NULL;

CREATE TABLE schedule_ticks (
    pk             INTEGER PRIMARY KEY AUTOINCREMENT,
    app_name       TEXT NOT NULL,
    schedule_name  TEXT NOT NULL,
    tick_key       TEXT NOT NULL,                         -- 'at:<UTC time>' or 'trigger:<id>'
    tick_at        REAL NOT NULL,                         -- the tick's time (UTC seconds)
    kind           TEXT NOT NULL CHECK (kind IN ('tick', 'trigger')),
    run_id         TEXT NOT NULL UNIQUE,                  -- chosen when the tick is recorded
    user_id        TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('PENDING', 'SUBMITTED', 'SKIPPED')),
    actor          TEXT,                                  -- who triggered it (trigger ticks)
    detail         TEXT,                                  -- why it was skipped
    created_at     REAL NOT NULL,
    updated_at     REAL NOT NULL,
    UNIQUE (app_name, schedule_name, tick_key)
);

CREATE INDEX schedule_ticks_open ON schedule_ticks (app_name, schedule_name, tick_at)
    WHERE state = 'PENDING';
CREATE INDEX schedule_ticks_recent ON schedule_ticks (app_name, schedule_name, pk);

INSERT INTO schema_version (version, name, applied_at)
VALUES (15, 'schedules', (julianday('now') - 2440587.5) * 86400.0);

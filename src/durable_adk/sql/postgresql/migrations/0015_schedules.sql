-- Schedules (issue 26): a row per schedule an app declares, as last synced
-- from its code, with its next tick and when a worker should next look at it;
-- a row per tick, keyed by (app, schedule, tick key), written with the id of
-- the run it starts chosen in advance, so a tick is fired exactly once.

CREATE TABLE schedules (
    pk             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_name       text NOT NULL,
    name           text NOT NULL,
    spec           text NOT NULL,                         -- the definition (JSON) as last synced from code
    next_tick_at   double precision NOT NULL,             -- the next tick not yet recorded (UTC seconds)
    next_fire_at   double precision NOT NULL,             -- when a worker should next claim it (database clock)
    paused         integer NOT NULL DEFAULT 0,
    orphaned_at    double precision,                      -- when a sync found it gone from the code
    epoch          bigint NOT NULL DEFAULT 0,             -- bumped by every claim and every change
    owner          text,                                  -- the worker of the last claim
    last_tick_at   double precision,                      -- the last tick recorded
    last_run_id    text,                                  -- the run of the last tick submitted
    missed         bigint NOT NULL DEFAULT 0,             -- ticks not fired by the catch-up policy
    created_at     double precision NOT NULL,
    updated_at     double precision NOT NULL,
    UNIQUE (app_name, name)
);

-- The poller's one claim: due schedules of an app, in order of their time.
CREATE INDEX schedules_due ON schedules (app_name, next_fire_at)
    WHERE paused = 0 AND orphaned_at IS NULL;

CREATE TABLE schedule_ticks (
    pk             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_name       text NOT NULL,
    schedule_name  text NOT NULL,
    tick_key       text NOT NULL,                         -- 'at:<UTC time>' or 'trigger:<id>'
    tick_at        double precision NOT NULL,             -- the tick's time (UTC seconds)
    kind           text NOT NULL CHECK (kind IN ('tick', 'trigger')),
    run_id         text NOT NULL UNIQUE,                  -- chosen when the tick is recorded
    user_id        text NOT NULL,
    session_id     text NOT NULL,
    state          text NOT NULL CHECK (state IN ('PENDING', 'SUBMITTED', 'SKIPPED')),
    actor          text,                                  -- who triggered it (trigger ticks)
    detail         text,                                  -- why it was skipped
    created_at     double precision NOT NULL,
    updated_at     double precision NOT NULL,
    UNIQUE (app_name, schedule_name, tick_key)
);

CREATE INDEX schedule_ticks_open ON schedule_ticks (app_name, schedule_name, tick_at)
    WHERE state = 'PENDING';
CREATE INDEX schedule_ticks_recent ON schedule_ticks (app_name, schedule_name, pk);

INSERT INTO schema_version (version, name, applied_at)
VALUES (15, 'schedules', extract(epoch FROM clock_timestamp()));

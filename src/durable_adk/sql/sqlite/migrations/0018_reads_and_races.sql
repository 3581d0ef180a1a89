-- Unreadable events and racing operators (issue 47).

-- An abandoned run says so in its own row. A second abandon, or a retry, that
-- waited for the abandon's lock re-checks the row it waited for; PostgreSQL
-- re-reads that row, not the other tables its conditions read (those keep the
-- statement's snapshot), so "not abandoned" must be a column of the row for
-- abandon to stay final and be recorded once.
ALTER TABLE runs ADD COLUMN abandoned_at REAL;

UPDATE runs
   SET abandoned_at = (SELECT min(a.created_at) FROM operator_actions a
                        WHERE a.run_id = runs.run_id AND a.action = 'abandon')
 WHERE EXISTS (SELECT 1 FROM operator_actions a
                WHERE a.run_id = runs.run_id AND a.action = 'abandon');

-- How many times an operator rewrote an event of the session (a repair of an
-- event the reader cannot parse): a copy of the log cached before is dropped.
ALTER TABLE sessions ADD COLUMN repairs INTEGER NOT NULL DEFAULT 0;

-- The audit of event repairs: who, when, why, and the event as it was stored.
CREATE TABLE event_repairs (
    pk           INTEGER PRIMARY KEY AUTOINCREMENT,
    app_name     TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    event_id     TEXT NOT NULL,
    action       TEXT NOT NULL,                  -- drop, replace
    actor        TEXT NOT NULL,                  -- who
    reason       TEXT,                           -- why
    original     TEXT NOT NULL,                  -- the event's row data as it was stored
    replacement  TEXT NOT NULL,                  -- the readable stand-in written in its place
    created_at   REAL NOT NULL                   -- database clock
);

CREATE INDEX event_repairs_by_session ON event_repairs (app_name, user_id, session_id, pk);

INSERT INTO schema_version (version, name, applied_at)
VALUES (18, 'reads_and_races', (julianday('now') - 2440587.5) * 86400.0);

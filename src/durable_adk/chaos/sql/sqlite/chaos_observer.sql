-- The chaos soak's observer (durable_adk.chaos.soak), installed only into
-- the soak's own databases, never by migrations. Every change of a run's epoch,
-- owner or status is logged with the database clock at the moment of the
-- change, so the soak knows when each epoch of each run was claimed (the ledger
-- itself keeps only the current one). A trigger's inner statement ends on the
-- line of its END, so the script splitter keeps the trigger whole.
CREATE TABLE IF NOT EXISTS chaos_claims (
    pk      INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id  TEXT NOT NULL,
    epoch   INTEGER NOT NULL,
    owner   TEXT,
    status  TEXT NOT NULL,
    at      REAL NOT NULL
);

CREATE TRIGGER IF NOT EXISTS chaos_claims_on_insert AFTER INSERT ON runs
BEGIN
    INSERT INTO chaos_claims (run_id, epoch, owner, status, at)
    VALUES (NEW.run_id, NEW.epoch, NEW.owner, NEW.status,
            (julianday('now') - 2440587.5) * 86400.0); END;

CREATE TRIGGER IF NOT EXISTS chaos_claims_on_update AFTER UPDATE ON runs
WHEN NEW.epoch IS NOT OLD.epoch OR NEW.status IS NOT OLD.status OR NEW.owner IS NOT OLD.owner
BEGIN
    INSERT INTO chaos_claims (run_id, epoch, owner, status, at)
    VALUES (NEW.run_id, NEW.epoch, NEW.owner, NEW.status,
            (julianday('now') - 2440587.5) * 86400.0); END;

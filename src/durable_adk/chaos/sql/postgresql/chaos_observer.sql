-- The chaos soak's observer (durable_adk.chaos.soak), installed only into
-- the soak's own databases, never by migrations. Every change of a run's epoch,
-- owner or status is logged with the database clock at the moment of the
-- change, so the soak knows when each epoch of each run was claimed (the ledger
-- itself keeps only the current one).
CREATE TABLE IF NOT EXISTS chaos_claims (
    pk      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id  text NOT NULL,
    epoch   bigint NOT NULL,
    owner   text,
    status  text NOT NULL,
    at      double precision NOT NULL
);

CREATE OR REPLACE FUNCTION chaos_log_claim() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.epoch IS DISTINCT FROM OLD.epoch
       OR NEW.status IS DISTINCT FROM OLD.status OR NEW.owner IS DISTINCT FROM OLD.owner THEN
        INSERT INTO chaos_claims (run_id, epoch, owner, status, at)
        VALUES (NEW.run_id, NEW.epoch, NEW.owner, NEW.status,
                extract(epoch FROM clock_timestamp()));
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS chaos_claims_on_insert ON runs;
CREATE TRIGGER chaos_claims_on_insert AFTER INSERT ON runs
    FOR EACH ROW EXECUTE FUNCTION chaos_log_claim();
DROP TRIGGER IF EXISTS chaos_claims_on_update ON runs;
CREATE TRIGGER chaos_claims_on_update AFTER UPDATE ON runs
    FOR EACH ROW EXECUTE FUNCTION chaos_log_claim();

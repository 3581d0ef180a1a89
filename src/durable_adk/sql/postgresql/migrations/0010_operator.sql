-- Operator control (issue 14): a CANCELLED status, cancel requests on a run,
-- and the audit trail of what people did to runs.

ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('QUEUED', 'RUNNING', 'PAUSED', 'DONE', 'FAILED', 'PARKED', 'CANCELLED'));
ALTER TABLE runs ADD COLUMN cancel_requested_at double precision;  -- an operator asked the owner to stop
ALTER TABLE runs ADD COLUMN cancel_requested_by text;

-- Who did what to a run, when and why (cancel, resolve, abandon, retry, answer).
CREATE TABLE operator_actions (
    pk             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id         text NOT NULL,
    app_name       text NOT NULL,
    action         text NOT NULL,                         -- cancel, resolve, abandon, retry, answer
    actor          text NOT NULL,                         -- who
    reason         text,                                  -- why
    status_before  text NOT NULL,
    status_after   text NOT NULL,
    epoch          bigint NOT NULL,                       -- the run's epoch after the action
    detail         text,                                  -- JSON: the operator's result, the cancel outcome...
    created_at     double precision NOT NULL              -- database clock
);

CREATE INDEX operator_actions_by_run ON operator_actions (run_id, pk);
CREATE INDEX operator_actions_by_app ON operator_actions (app_name, pk);

INSERT INTO schema_version (version, name, applied_at)
VALUES (10, 'operator', extract(epoch FROM clock_timestamp()));

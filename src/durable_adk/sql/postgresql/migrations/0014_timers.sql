-- Durable sleep (issue 26): a timer is a job whose result is known in advance
-- and which becomes ready at its due time (deadline_at, database clock). The
-- wake pass completes due timers (job_wake) and the job resumer answers their
-- calls, and the expiry sweep leaves timers alone. One partial index keeps the
-- wake claim one indexed statement however many runs sleep.

-- timer = 1: the wake-up of a durable sleep
ALTER TABLE jobs ADD COLUMN timer integer NOT NULL DEFAULT 0;
CREATE INDEX jobs_timers_due ON jobs (deadline_at) WHERE state = 'STARTED' AND timer = 1;

INSERT INTO schema_version (version, name, applied_at)
VALUES (14, 'timers', extract(epoch FROM clock_timestamp()));

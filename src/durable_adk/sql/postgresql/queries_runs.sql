-- Run ledger queries for PostgreSQL (same names in the other dialect).

-- ---------------------------------------------------------------- run ledger
-- Times come from the database clock. A claim bumps 'epoch' (the fencing
-- token) and 'attempts', and sets the earliest next recovery:
-- next_attempt_at = now + lease + backoff * 2^(attempts before this claim).

-- name: run_submit inline
INSERT INTO runs (run_id, app_name, user_id, session_id, invocation_id, request, status,
                  owner, lease_until, created_at, updated_at)
VALUES (:run_id::text, :app_name::text, :user_id::text, :session_id::text, :invocation_id::text,
        :request::text, 'QUEUED', :owner::text,
        extract(epoch FROM clock_timestamp()) + :lease::float8,
        extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp()))
RETURNING *;

-- name: run_start inline
-- A new run in one statement, for the common case: the session row is made if
-- missing, and the run is recorded RUNNING (claimed: epoch 1, attempt 1) when its
-- session has no run RUNNING or QUEUED, else QUEUED behind them. Two starts that
-- both find the session free trip the partial unique index: the caller then
-- submits QUEUED and waits its turn.
WITH sess AS (
    INSERT INTO sessions (app_name, user_id, session_id, initial_state, create_time, update_time)
    VALUES (:app_name::text, :user_id::text, :session_id::text, '{}', :now::float8, :now::float8)
    ON CONFLICT (app_name, user_id, session_id) DO NOTHING
    RETURNING pk
), busy AS (
    SELECT EXISTS (SELECT 1 FROM runs
                    WHERE app_name = :app_name::text AND user_id = :user_id::text
                      AND session_id = :session_id::text AND status IN ('RUNNING', 'QUEUED')) AS b,
           extract(epoch FROM clock_timestamp()) AS now
), ins AS (
    INSERT INTO runs (run_id, app_name, user_id, session_id, invocation_id, request, status,
                      owner, lease_until, epoch, attempts, next_attempt_at, created_at, updated_at)
    SELECT :run_id::text, :app_name::text, :user_id::text, :session_id::text, :invocation_id::text,
           :request::text, CASE WHEN b THEN 'QUEUED' ELSE 'RUNNING' END, :owner::text,
           now + :lease::float8, CASE WHEN b THEN 0 ELSE 1 END, CASE WHEN b THEN 0 ELSE 1 END,
           CASE WHEN b THEN 0 ELSE now + :lease::float8 + :backoff::float8 END, now, now
      FROM busy
    RETURNING *
)
SELECT ins.*, (SELECT pk FROM sess) AS created_session_pk,
       (SELECT state::text FROM app_state WHERE app_name = :app_name::text) AS app_state,
       (SELECT state::text FROM user_state
         WHERE app_name = :app_name::text AND user_id = :user_id::text) AS user_state
  FROM ins;

-- name: run_claim_queued inline
-- Starts our own queued run when it heads its session's queue and the session is
-- free. A concurrent claim for the same session trips the partial unique index.
UPDATE runs
   SET status = 'RUNNING', epoch = epoch + 1, attempts = attempts + 1,
       lease_until = extract(epoch FROM clock_timestamp()) + :lease::float8,
       next_attempt_at = extract(epoch FROM clock_timestamp()) + :lease::float8
                         + :backoff::float8 * (1::bigint << LEAST(attempts, 20)),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE run_id = :run_id::text AND status = 'QUEUED' AND owner = :owner::text
   AND NOT EXISTS (SELECT 1 FROM runs r
                    WHERE r.app_name = runs.app_name AND r.user_id = runs.user_id
                      AND r.session_id = runs.session_id AND r.status = 'RUNNING')
   AND NOT EXISTS (SELECT 1 FROM runs r
                    WHERE r.app_name = runs.app_name AND r.user_id = runs.user_id
                      AND r.session_id = runs.session_id AND r.status = 'QUEUED' AND r.pk < runs.pk)
RETURNING *;

-- name: run_renew inline
UPDATE runs
   SET lease_until = extract(epoch FROM clock_timestamp()) + :lease::float8,
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE run_id = :run_id::text AND owner = :owner::text AND epoch = :epoch::bigint
   AND status IN ('QUEUED', 'RUNNING')
RETURNING lease_until;

-- name: run_finish inline
UPDATE runs
   SET status = :status::text, last_error = :error::text,
       classification = COALESCE(:classification::text, classification),
       finished_at = extract(epoch FROM clock_timestamp()),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE run_id = :run_id::text AND owner = :owner::text AND epoch = :epoch::bigint
   AND status = 'RUNNING'
RETURNING status;

-- name: run_release inline
-- A drive met a transient fault and hands the run back: it stays RUNNING with its
-- lease expired now and its next recovery after a back-off of
-- backoff * 2^(attempts - 1); the sweeper's run_claim_expired then takes it (and
-- counts the attempt; past max_attempts the sweeper parks it).
UPDATE runs
   SET lease_until = extract(epoch FROM clock_timestamp()),
       next_attempt_at = extract(epoch FROM clock_timestamp())
                         + :backoff::float8 * (1::bigint << LEAST(GREATEST(attempts - 1, 0), 20)),
       last_error = :error::text,
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE run_id = :run_id::text AND owner = :owner::text AND epoch = :epoch::bigint
   AND status = 'RUNNING'
RETURNING status;

-- name: run_claim_expired
-- Recovery: RUNNING rows whose owner stopped renewing, past their back-off, and
-- QUEUED rows whose waiting caller died and whose turn has come. SKIP LOCKED:
-- two sweepers never wait on, or both take, the same row.
-- Evaluated once (MATERIALIZED): inside IN (...) the planner may re-run a
-- LIMIT ... SKIP LOCKED subquery per row and claim more than :limit.
WITH picked AS MATERIALIZED (
    SELECT q.pk FROM runs q
     WHERE q.lease_until < extract(epoch FROM clock_timestamp())
       AND q.next_attempt_at <= extract(epoch FROM clock_timestamp())
       AND (:app_name::text IS NULL OR q.app_name = :app_name::text)
       AND (q.status = 'RUNNING'
            OR (q.status = 'QUEUED'
                AND NOT EXISTS (SELECT 1 FROM runs r
                                 WHERE r.app_name = q.app_name AND r.user_id = q.user_id
                                   AND r.session_id = q.session_id AND r.status = 'RUNNING')
                AND NOT EXISTS (SELECT 1 FROM runs r
                                 WHERE r.app_name = q.app_name AND r.user_id = q.user_id
                                   AND r.session_id = q.session_id AND r.status = 'QUEUED'
                                   AND r.pk < q.pk)))
     ORDER BY q.pk
     LIMIT :limit::int
     FOR UPDATE SKIP LOCKED
)
UPDATE runs
   SET status = 'RUNNING', owner = :owner::text, epoch = epoch + 1, attempts = attempts + 1,
       lease_until = extract(epoch FROM clock_timestamp()) + :lease::float8,
       next_attempt_at = extract(epoch FROM clock_timestamp()) + :lease::float8
                         + :backoff::float8 * (1::bigint << LEAST(attempts, 20)),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE pk IN (SELECT pk FROM picked)
   AND lease_until < extract(epoch FROM clock_timestamp())
   AND status IN ('RUNNING', 'QUEUED')
RETURNING *;

-- name: run_park
WITH r AS (
    UPDATE runs
       SET status = 'PARKED', last_error = :error::text, classification = :classification::text,
           finished_at = extract(epoch FROM clock_timestamp()),
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE run_id = :run_id::text AND owner = :owner::text AND epoch = :epoch::bigint
       AND status = 'RUNNING'
    RETURNING run_id, request
), dl AS (
    INSERT INTO dead_letters (kind, run_id, request, classification, last_events, error, created_at)
    SELECT 'run', r.run_id, r.request, :classification::text, :last_events::text, :error::text,
           extract(epoch FROM clock_timestamp())
      FROM r
    RETURNING 1
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM r) THEN 'ok' ELSE 'fenced' END AS status,
       (SELECT count(*) FROM dl) AS dead_letters;

-- name: run_retry
-- An operator tries a parked or failed run again: it re-enters its session's
-- queue with an expired lease and fresh attempts, so the next sweep recovers it.
-- A run that is neither PARKED nor FAILED is left as it is (calling twice is harmless).
UPDATE runs
   SET status = 'QUEUED', owner = NULL, attempts = 0, next_attempt_at = 0,
       lease_until = 0, last_error = NULL, finished_at = NULL,
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE run_id = :run_id::text AND status IN ('PARKED', 'FAILED')
RETURNING *;

-- name: run_get
SELECT * FROM runs WHERE run_id = :run_id::text;

-- name: run_list
SELECT * FROM runs
 WHERE (:status::text IS NULL OR status = :status::text)
 ORDER BY pk DESC LIMIT :limit::int;

-- name: run_backdate
-- Moves a run's lease and back-off into the past: how tests (and an operator
-- who knows a worker is gone) expire a lease without waiting.
UPDATE runs
   SET lease_until = lease_until - :seconds::float8,
       next_attempt_at = next_attempt_at - :seconds::float8
 WHERE run_id = :run_id::text
RETURNING lease_until;

-- name: dead_letter_list
SELECT * FROM dead_letters
 WHERE (:run_id::text IS NULL OR run_id = :run_id::text)
 ORDER BY pk DESC LIMIT :limit::int;

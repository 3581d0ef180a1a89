-- Run ledger queries for PostgreSQL (same names in the other dialect).

-- ---------------------------------------------------------------- run ledger
-- Times come from the database clock. A claim bumps 'epoch' (the fencing
-- token) and 'attempts', and sets the earliest next recovery:
-- next_attempt_at = now + lease + backoff * 2^(attempts before this claim).

-- name: run_submit inline intake
-- A run continuing an invocation (a resume, an answer) keeps the app version
-- of the invocation's newest run, whoever submits it; a new invocation takes
-- the submitting worker's.
INSERT INTO runs (run_id, app_name, user_id, session_id, invocation_id, request, status,
                  owner, lease_until, created_at, updated_at, app_version, app_fingerprint)
SELECT :run_id::text, :app_name::text, :user_id::text, :session_id::text, :invocation_id::text,
       :request::text, 'QUEUED', :owner::text,
       extract(epoch FROM clock_timestamp()) + :lease::float8,
       extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp()),
       CASE WHEN prev.pk IS NULL THEN :app_version::text ELSE prev.app_version END,
       CASE WHEN prev.pk IS NULL THEN :app_fingerprint::text ELSE prev.app_fingerprint END
  FROM (SELECT 1) AS one
  LEFT JOIN (SELECT pk, app_version, app_fingerprint FROM runs
              WHERE app_name = :app_name::text AND invocation_id = :invocation_id::text
              ORDER BY pk DESC LIMIT 1) AS prev ON true
RETURNING *;

-- name: run_submit_answer inline intake
-- A run carrying answers to paused calls, in one statement: a claim per pause
-- it answers (:claims, JSON [[call_id, ask], ...]), then the run. A claim
-- already taken fails the statement on the claims' key: nothing is written.
WITH claims AS (
    INSERT INTO answer_claims (app_name, user_id, session_id, invocation_id, call_id, ask,
                               run_id, created_at)
    SELECT :app_name::text, :user_id::text, :session_id::text, :invocation_id::text,
           c.value->>0, (c.value->>1)::int, :run_id::text, extract(epoch FROM clock_timestamp())
      FROM jsonb_array_elements(:claims::jsonb) AS c
    RETURNING 1
)
INSERT INTO runs (run_id, app_name, user_id, session_id, invocation_id, request, status,
                  owner, lease_until, created_at, updated_at, app_version, app_fingerprint)
SELECT :run_id::text, :app_name::text, :user_id::text, :session_id::text, :invocation_id::text,
       :request::text, 'QUEUED', :owner::text,
       extract(epoch FROM clock_timestamp()) + :lease::float8,
       extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp()),
       CASE WHEN prev.pk IS NULL THEN :app_version::text ELSE prev.app_version END,
       CASE WHEN prev.pk IS NULL THEN :app_fingerprint::text ELSE prev.app_fingerprint END
  FROM (SELECT 1) AS one
  LEFT JOIN (SELECT pk, app_version, app_fingerprint FROM runs
              WHERE app_name = :app_name::text AND invocation_id = :invocation_id::text
              ORDER BY pk DESC LIMIT 1) AS prev ON true
RETURNING *;

-- name: answer_claim_of
-- Who holds the claim on one pause: the run carrying its answer, and where it stands.
SELECT c.run_id, r.status
  FROM answer_claims c LEFT JOIN runs r ON r.run_id = c.run_id
 WHERE c.app_name = :app_name::text AND c.user_id = :user_id::text
   AND c.session_id = :session_id::text AND c.invocation_id = :invocation_id::text
   AND c.call_id = :call_id::text AND c.ask = :ask::int;

-- name: answer_claim_release
-- Frees the claim of a run that ended without delivering its answer (cancelled
-- or failed before the answer was stored), so the pause can be answered again.
DELETE FROM answer_claims
 WHERE app_name = :app_name::text AND user_id = :user_id::text
   AND session_id = :session_id::text AND invocation_id = :invocation_id::text
   AND call_id = :call_id::text AND ask = :ask::int AND run_id = :run_id::text;

-- name: run_start inline intake
-- A new run in one statement, for the common case: the session row is made if
-- missing, and the run is recorded RUNNING (claimed: epoch 1, attempt 1) when its
-- session has no run RUNNING or QUEUED, else QUEUED behind them. Two starts that
-- both find the session free trip the partial unique index: the caller then
-- submits QUEUED and waits its turn. "Busy" is asked as two questions, one per
-- status: the RUNNING one is answered by runs_one_running_per_session alone, with
-- or without statistics (as one IN, a never-analyzed table was read through
-- runs_by_version, every run of the app: bench/common.py, analyze_databases).
WITH sess AS (
    INSERT INTO sessions (app_name, user_id, session_id, initial_state, create_time, update_time)
    VALUES (:app_name::text, :user_id::text, :session_id::text, :initial_state::text, :now::float8, :now::float8)
    ON CONFLICT (app_name, user_id, session_id) DO NOTHING
    RETURNING pk
), busy AS (
    SELECT EXISTS (SELECT 1 FROM runs
                    WHERE app_name = :app_name::text AND user_id = :user_id::text
                      AND session_id = :session_id::text AND status = 'RUNNING')
           OR EXISTS (SELECT 1 FROM runs
                       WHERE app_name = :app_name::text AND user_id = :user_id::text
                         AND session_id = :session_id::text AND status = 'QUEUED') AS b,
           extract(epoch FROM clock_timestamp()) AS now
), ins AS (
    INSERT INTO runs (run_id, app_name, user_id, session_id, invocation_id, request, status,
                      owner, lease_until, epoch, attempts, next_attempt_at, created_at, updated_at,
                      app_version, app_fingerprint)
    SELECT :run_id::text, :app_name::text, :user_id::text, :session_id::text, :invocation_id::text,
           :request::text, CASE WHEN b THEN 'QUEUED' ELSE 'RUNNING' END, :owner::text,
           now + :lease::float8, CASE WHEN b THEN 0 ELSE 1 END, CASE WHEN b THEN 0 ELSE 1 END,
           CASE WHEN b THEN 0 ELSE now + :lease::float8 + :backoff::float8 END, now, now,
           :app_version::text, :app_fingerprint::text
      FROM busy
    RETURNING *
)
SELECT ins.*, (SELECT pk FROM sess) AS created_session_pk,
       (SELECT state::text FROM app_state WHERE app_name = :app_name::text) AS app_state,
       (SELECT state::text FROM user_state
         WHERE app_name = :app_name::text AND user_id = :user_id::text) AS user_state
  FROM ins;

-- name: run_claim_queued inline lease claim
-- Starts our own queued run when it heads its session's queue and the session is
-- free, if its app version is one this worker serves (:serves, a JSON array). A
-- concurrent claim for the same session trips the partial unique index.
UPDATE runs
   SET status = 'RUNNING', epoch = epoch + 1, attempts = attempts + 1,
       lease_until = extract(epoch FROM clock_timestamp()) + :lease::float8,
       next_attempt_at = extract(epoch FROM clock_timestamp()) + :lease::float8
                         + :backoff::float8 * (1::bigint << LEAST(attempts, 20)),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE run_id = :run_id::text AND status = 'QUEUED' AND owner = :owner::text
   AND (app_version IS NULL
        OR app_version IN (SELECT jsonb_array_elements_text(:serves::jsonb)))
   AND NOT EXISTS (SELECT 1 FROM runs r
                    WHERE r.app_name = runs.app_name AND r.user_id = runs.user_id
                      AND r.session_id = runs.session_id AND r.status = 'RUNNING')
   AND NOT EXISTS (SELECT 1 FROM runs r
                    WHERE r.app_name = runs.app_name AND r.user_id = runs.user_id
                      AND r.session_id = runs.session_id AND r.status = 'QUEUED' AND r.pk < runs.pk)
RETURNING *;

-- name: run_renew inline lease
UPDATE runs
   SET lease_until = extract(epoch FROM clock_timestamp()) + :lease::float8,
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE run_id = :run_id::text AND owner = :owner::text AND epoch = :epoch::bigint
   AND status IN ('QUEUED', 'RUNNING')
RETURNING lease_until, cancel_requested_at, cancel_requested_by;

-- name: run_finish inline
-- A run's end, and with it the inbox of its invocation (:inbox, NULL for most runs:
-- see inbox_at_finish). The epoch is :run_epoch, as in append_events_finish, whose
-- inbox part this is too.
WITH fin AS (
    UPDATE runs
       SET status = :status::text, last_error = :error::text,
           classification = COALESCE(:classification::text, classification),
           finished_at = extract(epoch FROM clock_timestamp()),
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE run_id = :run_id::text AND owner = :owner::text AND epoch = :run_epoch::bigint
       AND status = 'RUNNING'
    RETURNING status, app_name, user_id, session_id,
              -- whether a run of the session waits its turn (the ledger then wakes it)
              EXISTS (SELECT 1 FROM runs q
                       WHERE q.app_name = runs.app_name AND q.user_id = runs.user_id
                         AND q.session_id = runs.session_id AND q.status = 'QUEUED')
                AS queued_behind
)
-- use: inbox_at_finish
SELECT * FROM fin;

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

-- name: claim_expired fragment
-- Recovery's claim, as the CTEs picked and claimed (run_claim_expired and
-- run_claim_expired_read select from claimed): RUNNING rows whose owner stopped
-- renewing, past their back-off, and QUEUED rows whose waiting caller died and
-- whose turn has come. SKIP LOCKED: two sweepers never wait on, or both take, the
-- same row. Evaluated once (MATERIALIZED): inside IN (...) the planner may re-run
-- a LIMIT ... SKIP LOCKED subquery per row and claim more than :limit.
WITH picked AS MATERIALIZED (
    SELECT q.pk FROM runs q
     WHERE q.lease_until < extract(epoch FROM clock_timestamp())
       AND q.next_attempt_at <= extract(epoch FROM clock_timestamp())
       AND (:app_name::text IS NULL OR q.app_name = :app_name::text)
       AND q.cancel_requested_at IS NULL  -- asked to stop: cancel_expired ends it
       -- only versions this worker serves (NULL: recorded before versions)
       AND (q.app_version IS NULL
            OR q.app_version IN (SELECT jsonb_array_elements_text(:serves::jsonb)))
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
), claimed AS (
    UPDATE runs
       SET status = 'RUNNING', owner = :owner::text, epoch = epoch + 1, attempts = attempts + 1,
           lease_until = extract(epoch FROM clock_timestamp()) + :lease::float8,
           next_attempt_at = extract(epoch FROM clock_timestamp()) + :lease::float8
                             + :backoff::float8 * (1::bigint << LEAST(attempts, 20)),
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE pk IN (SELECT pk FROM picked)
       AND lease_until < extract(epoch FROM clock_timestamp())
       AND status IN ('RUNNING', 'QUEUED')
    RETURNING *
)

-- name: run_claim_expired lease claim
-- Recovery's claim (the claim_expired fragment): the runs it took.
-- use: claim_expired
SELECT * FROM claimed;

-- name: run_claim_expired_read lease claim
-- run_claim_expired, and in the same round trip each claimed run's session as
-- load_session_tail reads it from its first event: the recovery classifies from
-- it and ADK's re-drive is served from it (docs/runs.md, "Recovery").
-- The events are read in the statement's snapshot, taken before the claim's
-- UPDATE ran: an append committed after it would be missed. So the session row
-- is also locked (held, FOR KEY SHARE: an append holds its session FOR UPDATE
-- until it commits, so this waits for one in progress, and a row changed since
-- the snapshot is read as its newest commit left it), and session_settled says
-- whether that newest row still has the snapshot's last_seq and repairs. The
-- lock is held until the claim commits, so no append commits in between: when
-- settled, the read holds every event committed before the claim did; when not
-- (or when the session row is not there), the caller reads the session again.
-- Lock order: the run's row, then its session's; append_events_finish takes them
-- the other way. The old owner's finish of a run this claims, sent as its lease
-- ran out, can deadlock with it: PostgreSQL aborts one (the claim: DatabaseBusy,
-- nothing claimed, the next pass claims; or the finish, refused by now anyway).
-- session_log is JSON text, so no sealed value of it is opened by the store:
-- {"initial_state", "app_state", "user_state", "events": [[seq, data], ...]}.
-- use: claim_expired
, held AS MATERIALIZED (
    SELECT s.pk, s.last_seq, s.repairs
      FROM sessions s
      JOIN claimed c ON s.app_name = c.app_name AND s.user_id = c.user_id
                    AND s.session_id = c.session_id
     WHERE s.purging_at IS NULL
       FOR KEY SHARE OF s
)
SELECT c.*,
       s.pk AS session_pk, s.last_seq AS session_last_seq, s.update_time AS session_update_time,
       s.repairs AS session_repairs,
       COALESCE(h.last_seq = s.last_seq AND h.repairs = s.repairs, false) AS session_settled,
       CASE WHEN s.pk IS NOT NULL THEN json_build_object(
           'initial_state', s.initial_state,
           'app_state', (SELECT state::text FROM app_state WHERE app_name = c.app_name),
           'user_state', (SELECT state::text FROM user_state
                           WHERE app_name = c.app_name AND user_id = c.user_id),
           'events', COALESCE((SELECT json_agg(json_build_array(e.seq, e.data) ORDER BY e.seq)
                                 FROM events e WHERE e.session_pk = s.pk), '[]'::json)
       )::text END AS session_log
  FROM claimed c
  LEFT JOIN sessions s ON s.app_name = c.app_name AND s.user_id = c.user_id
                      AND s.session_id = c.session_id AND s.purging_at IS NULL
  LEFT JOIN held h ON h.pk = s.pk;

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
-- A run that is neither PARKED nor FAILED, or was abandoned (final), is left as it is
-- (calling twice is harmless).
UPDATE runs
   SET status = 'QUEUED', owner = NULL, attempts = 0, next_attempt_at = 0,
       lease_until = 0, last_error = NULL, finished_at = NULL,
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE run_id = :run_id::text AND status IN ('PARKED', 'FAILED')
   AND abandoned_at IS NULL
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

-- ------------------------------------------------------- operator control
-- What people do to runs (issue 14). Each action changes the run and writes
-- its line in operator_actions in one statement, so the audit trail holds
-- every change made and nothing else. A refused action changes nothing (no row).

-- name: run_cancel
-- Cancels a run: QUEUED, PAUSED and PARKED runs, and RUNNING runs whose owner
-- stopped renewing, become CANCELLED at once; a RUNNING run with a live lease
-- gets cancel_requested_at, and its owner stops at its next heartbeat. A run
-- already ended, or already asked, is left as it is (no row).
WITH cur AS (
    SELECT r.pk, r.run_id, r.app_name, r.status, r.epoch,
           CASE WHEN r.status = 'RUNNING' AND r.lease_until >= extract(epoch FROM clock_timestamp())
                THEN 'RUNNING' ELSE 'CANCELLED' END AS next_status
      FROM runs r
     WHERE r.run_id = :run_id::text
       AND (r.status IN ('QUEUED', 'PAUSED', 'PARKED')
            OR (r.status = 'RUNNING' AND r.cancel_requested_at IS NULL))
       FOR UPDATE
), u AS (
    UPDATE runs
       SET status = cur.next_status,
           cancel_requested_at = extract(epoch FROM clock_timestamp()),
           cancel_requested_by = :actor::text,
           last_error = CASE WHEN cur.next_status = 'CANCELLED'
                             THEN 'cancelled by ' || :actor::text || COALESCE(': ' || :reason::text, '')
                             ELSE runs.last_error END,
           finished_at = CASE WHEN cur.next_status = 'CANCELLED'
                              THEN extract(epoch FROM clock_timestamp()) ELSE runs.finished_at END,
           updated_at = extract(epoch FROM clock_timestamp())
      FROM cur
     WHERE runs.pk = cur.pk
    RETURNING runs.*
), a AS (
    INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                                  status_after, epoch, detail, created_at)
    SELECT cur.run_id, cur.app_name, 'cancel', :actor::text, :reason::text, cur.status,
           cur.next_status, cur.epoch,
           CASE WHEN cur.next_status = 'RUNNING' THEN '{"outcome": "requested"}'
                ELSE '{"outcome": "cancelled"}' END,
           extract(epoch FROM clock_timestamp())
      FROM cur
    RETURNING 1
)
SELECT u.* FROM u;

-- name: run_cancel_requested
-- The owner's check at each heartbeat: has an operator asked it to stop?
SELECT cancel_requested_at, cancel_requested_by FROM runs
 WHERE run_id = :run_id::text AND owner = :owner::text AND epoch = :epoch::bigint
   AND status = 'RUNNING';

-- name: run_finish_cancelled inline
-- The owner stopped a run whose cancellation was asked for.
UPDATE runs
   SET status = 'CANCELLED',
       last_error = 'cancelled by ' || COALESCE(cancel_requested_by, 'an operator'),
       finished_at = extract(epoch FROM clock_timestamp()),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE run_id = :run_id::text AND owner = :owner::text AND epoch = :epoch::bigint
   AND status = 'RUNNING'
RETURNING status;

-- name: run_cancel_expired
-- Recovery's side of a cancel: a RUNNING run asked to stop whose owner died
-- (its lease ran out) is CANCELLED, never re-driven.
UPDATE runs
   SET status = 'CANCELLED',
       last_error = 'cancelled by ' || COALESCE(cancel_requested_by, 'an operator'),
       finished_at = extract(epoch FROM clock_timestamp()),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE status = 'RUNNING' AND cancel_requested_at IS NOT NULL
   AND lease_until < extract(epoch FROM clock_timestamp())
   AND (:app_name::text IS NULL OR app_name = :app_name::text)
RETURNING run_id;

-- name: run_operator_claim
-- An operator takes a PARKED or FAILED run (as it was read, at :epoch; never
-- an abandoned one) to write for it: RUNNING, held by the operator, a new epoch. Unique violation
-- when another run of the session is RUNNING.
UPDATE runs
   SET status = 'RUNNING', owner = :owner::text, epoch = epoch + 1,
       lease_until = extract(epoch FROM clock_timestamp()) + :lease::double precision,
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE run_id = :run_id::text AND epoch = :epoch::bigint AND status IN ('PARKED', 'FAILED')
   AND abandoned_at IS NULL
RETURNING *;

-- name: run_operator_release
-- An operator's claim given back unchanged (the resolution could not be written).
UPDATE runs
   SET status = :status::text, updated_at = extract(epoch FROM clock_timestamp())
 WHERE run_id = :run_id::text AND owner = :owner::text AND epoch = :epoch::bigint
   AND status = 'RUNNING'
RETURNING *;

-- name: run_operator_requeue
-- After a resolution was written: the run goes back in its session's queue
-- (expired lease, fresh attempts) for the next sweep to drive on, and the
-- action is recorded.
WITH u AS (
    UPDATE runs
       SET status = 'QUEUED', owner = NULL, attempts = 0, next_attempt_at = 0,
           lease_until = 0, last_error = NULL, finished_at = NULL,
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE run_id = :run_id::text AND owner = :owner::text AND epoch = :epoch::bigint
       AND status = 'RUNNING'
    RETURNING runs.*
), a AS (
    INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                                  status_after, epoch, detail, created_at)
    SELECT u.run_id, u.app_name, :action::text, :actor::text, :reason::text,
           :status_before::text, 'QUEUED', u.epoch, :detail::text,
           extract(epoch FROM clock_timestamp())
      FROM u
    RETURNING 1
)
SELECT u.* FROM u;

-- name: run_abandon
-- An operator closes a PARKED run (or a FAILED one not yet abandoned) as
-- FAILED with their reason; the error it had is kept in the action's detail.
-- "Not abandoned" is the row's own abandoned_at: a second abandon (or a retry)
-- that waited for this one's lock re-checks the row it waited for, while a
-- subquery on operator_actions would still read the statement's snapshot.
WITH cur AS (
    SELECT r.pk, r.run_id, r.app_name, r.status, r.epoch, r.last_error
      FROM runs r
     WHERE r.run_id = :run_id::text
       AND (r.status = 'PARKED'
            OR (r.status = 'FAILED'
                AND r.abandoned_at IS NULL))
       FOR UPDATE
), u AS (
    UPDATE runs
       SET status = 'FAILED', last_error = 'abandoned by ' || :actor::text || ': ' || :reason::text,
           abandoned_at = extract(epoch FROM clock_timestamp()),
           finished_at = COALESCE(runs.finished_at, extract(epoch FROM clock_timestamp())),
           updated_at = extract(epoch FROM clock_timestamp())
      FROM cur
     WHERE runs.pk = cur.pk
    RETURNING runs.*
), a AS (
    INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                                  status_after, epoch, detail, created_at)
    SELECT cur.run_id, cur.app_name, 'abandon', :actor::text, :reason::text, cur.status,
           'FAILED', cur.epoch, json_build_object('previous_error', cur.last_error)::text,
           extract(epoch FROM clock_timestamp())
      FROM cur
    RETURNING 1
)
SELECT u.* FROM u;

-- name: run_retry_recorded
-- run_retry with its line in the audit trail: a PARKED or FAILED run re-enters
-- its session's queue; any other run is left as it is (no row).
WITH cur AS (
    SELECT r.pk, r.run_id, r.app_name, r.status, r.epoch, r.last_error
      FROM runs r
     WHERE r.run_id = :run_id::text AND r.status IN ('PARKED', 'FAILED')
       AND r.abandoned_at IS NULL
       FOR UPDATE
), u AS (
    UPDATE runs
       SET status = 'QUEUED', owner = NULL, attempts = 0, next_attempt_at = 0,
           lease_until = 0, last_error = NULL, finished_at = NULL,
           updated_at = extract(epoch FROM clock_timestamp())
      FROM cur
     WHERE runs.pk = cur.pk
    RETURNING runs.*
), a AS (
    INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                                  status_after, epoch, detail, created_at)
    SELECT cur.run_id, cur.app_name, 'retry', :actor::text, :reason::text, cur.status,
           'QUEUED', cur.epoch, json_build_object('previous_error', cur.last_error)::text,
           extract(epoch FROM clock_timestamp())
      FROM cur
    RETURNING 1
)
SELECT u.* FROM u;

-- name: operator_action_record
-- An action that changed no run row itself (an answer given through the
-- session, say), written against the run's current row.
INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                              status_after, epoch, detail, created_at)
SELECT run_id, app_name, :action::text, :actor::text, :reason::text, status, status, epoch,
       :detail::text, extract(epoch FROM clock_timestamp())
  FROM runs WHERE run_id = :run_id::text
RETURNING *;

-- name: operator_action_list
SELECT * FROM operator_actions
 WHERE (:run_id::text IS NULL OR run_id = :run_id::text)
   AND (:app_name::text IS NULL OR app_name = :app_name::text)
 ORDER BY pk DESC LIMIT :limit::bigint;

-- name: run_list_of_app
SELECT * FROM runs
 WHERE (:status::text IS NULL OR status = :status::text)
   AND (:app_name::text IS NULL OR app_name = :app_name::text)
 ORDER BY pk DESC LIMIT :limit::bigint;

-- name: dead_letter_list_of_app
SELECT d.* FROM dead_letters d
 WHERE (:run_id::text IS NULL OR d.run_id = :run_id::text)
   AND (:app_name::text IS NULL
        OR EXISTS (SELECT 1 FROM runs r WHERE r.run_id = d.run_id AND r.app_name = :app_name::text))
 ORDER BY d.pk DESC LIMIT :limit::bigint;

-- name: run_renew_many inline lease
-- One worker's heartbeat: renews every lease it holds in one statement, whatever
-- their number. :leases is a JSON object {run_id: epoch}; a run missing from the
-- result is no longer ours (taken over or ended). The rows are found through
-- run_id's unique index (= ANY of the keys) and each one's epoch looked up in the
-- object, so the plan stays linear whatever the statistics say: a join against
-- the array's elements was planned as a nested loop over both sides (25 million
-- comparisons, 10 s, for 5,000 leases; BENCHMARKS.md, "Runs in flight"). Plain
-- JSON and array functions, which CockroachDB and YugabyteDB run too.
UPDATE runs
   SET lease_until = extract(epoch FROM clock_timestamp()) + :lease::float8,
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE runs.run_id = ANY (ARRAY(SELECT jsonb_object_keys(:leases::jsonb)))
   AND runs.epoch = (:leases::jsonb ->> runs.run_id)::bigint
   AND runs.owner = :owner::text AND runs.status IN ('QUEUED', 'RUNNING')
RETURNING runs.run_id, runs.epoch, runs.cancel_requested_at, runs.cancel_requested_by;

-- name: run_renew_owned inline lease
-- The lease watchdog's renewal while the event loop is blocked: every live lease
-- the worker holds, whether its keeper knows it or not. A claim that committed
-- but whose answer waits for the loop leases a run no keeper holds yet; this keeps
-- it, and the keeper credits the renewal when it takes the lease. Only leases not
-- yet expired: a run handed back (its lease ended at once) stays handed back.
-- Found through runs_by_lease: the live leases are the runs in flight.
UPDATE runs
   SET lease_until = extract(epoch FROM clock_timestamp()) + :lease::float8,
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE status IN ('QUEUED', 'RUNNING')
   AND lease_until > extract(epoch FROM clock_timestamp())
   AND owner = :owner::text
RETURNING run_id, epoch, cancel_requested_at, cancel_requested_by;

-- name: turn_notify
-- Wakes the workers listening (LISTEN durable_adk_turns) whose queued runs wait
-- for this session's turn. Sent only when notifications are on (the store's
-- notify option); waiting runs poll at a back-off besides, so a database without
-- LISTEN/NOTIFY (CockroachDB, YugabyteDB) loses nothing but latency.
SELECT pg_notify('durable_adk_turns', :session::text);

-- name: run_invocation_cancelled
-- Whether the invocation was cancelled: a run of it that drove it, or paused
-- or parked on it, was cancelled (a QUEUED answer run cancelled before it
-- drove leaves the invocation open). Its run id and who cancelled it.
SELECT r.run_id, COALESCE(r.cancel_requested_by, 'an operator') AS cancelled_by
  FROM runs r
 WHERE r.invocation_id = :invocation_id::text AND r.app_name = :app_name::text
   AND r.user_id = :user_id::text AND r.session_id = :session_id::text
   AND r.status = 'CANCELLED'
   AND EXISTS (SELECT 1 FROM operator_actions a
                WHERE a.run_id = r.run_id AND a.action = 'cancel'
                  AND a.status_before <> 'QUEUED')
 LIMIT 1;

-- name: run_cancel_paused_of_invocation
-- The invocation was cancelled: the runs that paused on it are CANCELLED too.
UPDATE runs
   SET status = 'CANCELLED', last_error = :reason::text,
       finished_at = extract(epoch FROM clock_timestamp()),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE app_name = :app_name::text AND user_id = :user_id::text
   AND session_id = :session_id::text AND invocation_id = :invocation_id::text
   AND status IN ('PAUSED', 'QUEUED') AND run_id <> :run_id::text
RETURNING run_id;

-- name: run_park_paused_of_invocation
-- A continuation of the invocation was parked for drift before it acted (the
-- code of this worker lacks what the invocation's log refers to): the runs
-- that paused on it end PARKED with it, naming it, so none is left PAUSED with
-- its answer taken. The continuation's dead letter is the one record to act on.
UPDATE runs
   SET status = 'PARKED', last_error = :reason::text, classification = 'CONTINUATION_PARKED',
       finished_at = extract(epoch FROM clock_timestamp()),
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE app_name = :app_name::text AND user_id = :user_id::text
   AND session_id = :session_id::text AND invocation_id = :invocation_id::text
   AND status = 'PAUSED' AND run_id <> :run_id::text
RETURNING run_id;

-- name: run_version_of_invocation
-- The version an invocation's continuations are recorded under: its newest
-- run's (run_submit_answer takes the same), so a worker can tell a caller
-- whose answer waits for a worker of another version.
SELECT app_version FROM runs
 WHERE app_name = :app_name::text AND invocation_id = :invocation_id::text
 ORDER BY pk DESC LIMIT 1;

-- name: answer_claims_release_of_run
-- Gives back every answer claim of a run that ended without storing its answer.
DELETE FROM answer_claims WHERE run_id = :run_id::text;

-- name: run_request_cancel_of_invocation
-- The invocation was cancelled: a continuation of it still RUNNING is asked to
-- stop (its owner sees the request at its next heartbeat, as an operator's).
UPDATE runs
   SET cancel_requested_at = extract(epoch FROM clock_timestamp()),
       cancel_requested_by = :by::text,
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE app_name = :app_name::text AND user_id = :user_id::text
   AND session_id = :session_id::text AND invocation_id = :invocation_id::text
   AND status = 'RUNNING' AND run_id <> :run_id::text AND cancel_requested_at IS NULL
RETURNING run_id;

-- name: run_hand_over inline
-- A queued run this worker submitted but does not serve (a continuation of an
-- invocation of another app version): its lease ends now, so the recovery of
-- a worker of its version takes it when its turn comes. Ended a millisecond
-- back, as on SQLite (whose clock has that resolution), so a claim at once
-- (which wants lease_until < now) takes it.
UPDATE runs
   SET lease_until = extract(epoch FROM clock_timestamp()) - 0.001,
       next_attempt_at = extract(epoch FROM clock_timestamp()) - 0.001,
       updated_at = extract(epoch FROM clock_timestamp())
 WHERE run_id = :run_id::text AND owner = :owner::text AND epoch = :epoch::bigint
   AND status = 'QUEUED'
RETURNING *;

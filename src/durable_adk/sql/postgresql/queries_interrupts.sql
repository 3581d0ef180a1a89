-- The interrupts inbox (issue 14): the human-input and long-running calls runs
-- paused on, indexed when a run pauses, answered at most once.

-- name: interrupt_open
-- Indexes an open call of a paused invocation; a call already indexed is left as it is,
-- but for its kind (an open row indexed before a kind rule changed takes the new kind).
INSERT INTO interrupts (call_id, app_name, user_id, session_id, invocation_id, run_id, kind,
                        name, args, status, deadline_at, created_at, app_version,
                        app_fingerprint)
VALUES (:call_id::text, :app_name::text, :user_id::text, :session_id::text,
        :invocation_id::text, :run_id::text, :kind::text, :name::text, :args::text, 'OPEN',
        extract(epoch FROM clock_timestamp()) + :deadline::float8,
        extract(epoch FROM clock_timestamp()),
        (SELECT r.app_version FROM runs r WHERE r.run_id = :run_id::text ORDER BY r.pk DESC LIMIT 1),
        (SELECT r.app_fingerprint FROM runs r WHERE r.run_id = :run_id::text ORDER BY r.pk DESC LIMIT 1))
ON CONFLICT (app_name, user_id, session_id, invocation_id, call_id) DO UPDATE
   SET kind = excluded.kind
 WHERE interrupts.status = 'OPEN' AND interrupts.kind <> excluded.kind;

-- name: inbox_at_finish fragment
-- The inbox of a run's invocation, brought in line with its session in the
-- statement that finishes the run (run_finish, append_events_finish: after their
-- CTE fin, the finish), so that a run is never PAUSED without its open calls in
-- the inbox, nor DONE with its pause still open. :inbox (NULL for a run whose
-- invocation made no call that waits on a person) is JSON: the invocation's keys,
-- done (1: the run ended it DONE, so the runs that paused on it end DONE too,
-- and those parked with a continuation parked for drift: CONTINUATION_PARKED),
-- pending (the ids of its calls still open) and open (those calls to index:
-- call_id, kind, name, args as JSON text, deadline in seconds or null). An indexed
-- call the session shows answered leaves the inbox; one already indexed stays as
-- it is, but for its kind (interrupt_open). Nothing is written unless fin was.
-- skip when :inbox IS NULL
, inbox_paused AS (
    UPDATE runs
       SET status = 'DONE', finished_at = extract(epoch FROM clock_timestamp()),
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE :inbox::text IS NOT NULL AND EXISTS (SELECT 1 FROM fin)
       AND ((:inbox::text)::jsonb ->> 'done') = '1'
       AND app_name = (:inbox::text)::jsonb ->> 'app_name'
       AND user_id = (:inbox::text)::jsonb ->> 'user_id'
       AND session_id = (:inbox::text)::jsonb ->> 'session_id'
       AND invocation_id = (:inbox::text)::jsonb ->> 'invocation_id'
       AND (status = 'PAUSED'
            OR (status = 'PARKED' AND classification = 'CONTINUATION_PARKED'))
       AND run_id <> :run_id::text
    RETURNING 1
-- skip when :inbox IS NULL
), inbox_open AS (
    INSERT INTO interrupts (call_id, app_name, user_id, session_id, invocation_id, run_id,
                            kind, name, args, status, deadline_at, created_at, app_version,
                            app_fingerprint)
    SELECT o.value ->> 'call_id', (:inbox::text)::jsonb ->> 'app_name',
           (:inbox::text)::jsonb ->> 'user_id', (:inbox::text)::jsonb ->> 'session_id',
           (:inbox::text)::jsonb ->> 'invocation_id', :run_id::text, o.value ->> 'kind',
           o.value ->> 'name', o.value ->> 'args', 'OPEN',
           extract(epoch FROM clock_timestamp()) + (o.value ->> 'deadline')::float8,
           extract(epoch FROM clock_timestamp()),
           (SELECT r.app_version FROM runs r WHERE r.run_id = :run_id::text
             ORDER BY r.pk DESC LIMIT 1),
           (SELECT r.app_fingerprint FROM runs r WHERE r.run_id = :run_id::text
             ORDER BY r.pk DESC LIMIT 1)
      FROM jsonb_array_elements((:inbox::text)::jsonb -> 'open') AS o
     WHERE EXISTS (SELECT 1 FROM fin)
    ON CONFLICT (app_name, user_id, session_id, invocation_id, call_id) DO UPDATE
       SET kind = excluded.kind
     WHERE interrupts.status = 'OPEN' AND interrupts.kind <> excluded.kind
    RETURNING 1
-- skip when :inbox IS NULL
), inbox_settled AS (
    UPDATE interrupts
       SET status = 'ANSWERED', answered_by = COALESCE(answered_by, 'session'),
           answered_at = COALESCE(answered_at, extract(epoch FROM clock_timestamp()))
     WHERE :inbox::text IS NOT NULL AND EXISTS (SELECT 1 FROM fin)
       AND app_name = (:inbox::text)::jsonb ->> 'app_name'
       AND user_id = (:inbox::text)::jsonb ->> 'user_id'
       AND session_id = (:inbox::text)::jsonb ->> 'session_id'
       AND invocation_id = (:inbox::text)::jsonb ->> 'invocation_id'
       AND status = 'OPEN'
       AND call_id NOT IN (
             SELECT jsonb_array_elements_text((:inbox::text)::jsonb -> 'pending'))
    RETURNING 1
)

-- name: interrupt_list
SELECT * FROM interrupts
 WHERE (:status::text IS NULL OR status = :status::text)
   AND (:app_name::text IS NULL OR app_name = :app_name::text)
   AND (:session_id::text IS NULL OR session_id = :session_id::text)
   AND (:kind::text IS NULL OR kind = :kind::text)
 ORDER BY pk LIMIT :limit::bigint;

-- name: interrupt_by_call
SELECT *, extract(epoch FROM clock_timestamp()) AS db_now FROM interrupts
 WHERE call_id = :call_id::text
   AND (:app_name::text IS NULL OR app_name = :app_name::text)
   AND (:session_id::text IS NULL OR session_id = :session_id::text)
 ORDER BY pk DESC LIMIT 50;

-- name: interrupt_settle
-- A call the session shows answered (by any path) leaves the inbox.
UPDATE interrupts
   SET status = 'ANSWERED', answered_by = COALESCE(answered_by, 'session'),
       answered_at = COALESCE(answered_at, extract(epoch FROM clock_timestamp()))
 WHERE pk = :pk::bigint AND status = 'OPEN';

-- name: interrupt_close_of_run
-- The run that paused on them was cancelled: its open calls leave the inbox.
UPDATE interrupts SET status = 'CLOSED', answered_at = extract(epoch FROM clock_timestamp())
 WHERE run_id = :run_id::text AND status = 'OPEN';

-- name: interrupt_due
SELECT * FROM interrupts
 WHERE status = 'OPEN' AND deadline_at IS NOT NULL
   AND deadline_at <= extract(epoch FROM clock_timestamp())
   AND (:app_name::text IS NULL OR app_name = :app_name::text)
 ORDER BY deadline_at LIMIT :limit::bigint;

-- name: interrupt_answer
-- Answers one OPEN interrupt, exactly once: the interrupt is marked (ANSWERED
-- by a person before its deadline; EXPIRED by the deadline sweeper after it),
-- a run carrying the answer goes in the session's queue, and the answer is
-- recorded in the audit trail of the run that paused, all in one statement.
-- The pause's answer claim (answer_claims) is taken too: an answer sent through
-- the run API at the same instant fails the statement on the claims' key.
-- No row: refused (nothing changed).
WITH i AS (
    SELECT * FROM interrupts
     WHERE pk = :pk::bigint AND status = 'OPEN'
       AND CASE WHEN :by_deadline::int = 1
                THEN deadline_at <= extract(epoch FROM clock_timestamp())
                ELSE deadline_at IS NULL
                     OR deadline_at > extract(epoch FROM clock_timestamp()) END
       FOR UPDATE
), u AS (
    UPDATE interrupts
       SET status = CASE WHEN :by_deadline::int = 1 THEN 'EXPIRED' ELSE 'ANSWERED' END,
           answered_by = :actor::text, answer = :answer::text, answer_run_id = :new_run_id::text,
           answered_at = extract(epoch FROM clock_timestamp())
      FROM i
     WHERE interrupts.pk = i.pk
    RETURNING interrupts.pk
), r AS (
    -- The answer's run takes its invocation's version (the newest run's: a
    -- moved run's continuation keeps the version it was moved to) and
    -- fingerprint, so it is claimed, handed over and checked for drift as its
    -- invocation is.
    INSERT INTO runs (run_id, app_name, user_id, session_id, invocation_id, request, status,
                      owner, lease_until, created_at, updated_at, app_version, app_fingerprint)
    SELECT :new_run_id::text, i.app_name, i.user_id, i.session_id, i.invocation_id,
           :request::text, 'QUEUED', :owner::text,
           extract(epoch FROM clock_timestamp()) + :lease::float8,
           extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp()),
           prev.app_version, prev.app_fingerprint
      FROM i
      LEFT JOIN LATERAL (SELECT app_version, app_fingerprint FROM runs
                          WHERE runs.invocation_id = i.invocation_id
                            AND runs.app_name = i.app_name
                          ORDER BY runs.pk DESC LIMIT 1) prev ON true
    RETURNING *
), cl AS (
    INSERT INTO answer_claims (app_name, user_id, session_id, invocation_id, call_id, ask,
                               run_id, created_at)
    SELECT i.app_name, i.user_id, i.session_id, i.invocation_id, i.call_id, :ask::int,
           :new_run_id::text, extract(epoch FROM clock_timestamp())
      FROM i
    RETURNING 1
), a AS (
    INSERT INTO operator_actions (run_id, app_name, action, actor, reason, status_before,
                                  status_after, epoch, detail, created_at)
    SELECT p.run_id, p.app_name, 'answer', :actor::text, :reason::text, p.status, p.status,
           p.epoch, :detail::text, extract(epoch FROM clock_timestamp())
      FROM runs p JOIN i ON p.run_id = i.run_id
    RETURNING 1
)
SELECT r.* FROM r;

-- name: interrupt_backdate
-- Moves an interrupt's deadline into the past (tests, operators).
UPDATE interrupts SET deadline_at = extract(epoch FROM clock_timestamp()) - :seconds::float8
 WHERE call_id = :call_id::text AND status = 'OPEN';

-- name: interrupt_close_of_invocation
-- The invocation was cancelled: every open call of it leaves the inbox,
-- whichever of its runs paused on it.
UPDATE interrupts SET status = 'CLOSED', answered_at = extract(epoch FROM clock_timestamp())
 WHERE app_name = :app_name::text AND user_id = :user_id::text
   AND session_id = :session_id::text AND invocation_id = :invocation_id::text
   AND status = 'OPEN';

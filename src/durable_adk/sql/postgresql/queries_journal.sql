-- Journal queries for PostgreSQL (same names in the other dialect).

-- ---------------------------------------------------------------- journal
-- An entry is owned by the attempt that holds it: its run and fencing epoch
-- (run_id, run_epoch), its call, and a token of its own (holder). Who may do
-- what, decided in one statement each:
--
--   the caller is live   :run_id IS NULL, or its run is RUNNING at :run_epoch
--                        with an unexpired lease (database clock);
--   the owner is live    the entry has a holder, and its run is RUNNING at its
--                        epoch (whatever the lease: an owner past its lease may
--                        be acting right now, until someone takes its run
--                        over), or, outside any run, its hold has not run out;
--   an intent is         abandoned when its owner is not live, or released
--                        (holder NULL: its act raised, nobody is acting).
--
-- A caller that is not live is refused ('fenced') before anything else, so a
-- zombie learns nothing and calls nothing outside.

-- name: journal_get
SELECT * FROM journal WHERE key = :key::text;

-- name: journal_begin inline
-- Fence check, then: no entry -> write the intent ('acquired': act); an
-- abandoned intent -> take it over ('taken': look up, then act); else refuse
-- with 'fenced', 'wrong_tool', 'done' (with the result) or 'held' (wait). The
-- takeover is one conditional UPDATE: it applies only if the row still names
-- the owner this statement found dead (holder, run, epoch, hold all
-- unchanged), so of two takers one wins and the other gets 'retry'; so does
-- the loser of two first intents (ON CONFLICT DO NOTHING).
WITH cur AS (
    SELECT j.*,
           CASE
             WHEN j.holder IS NULL THEN TRUE
             WHEN j.run_id IS NULL THEN j.held_until < extract(epoch FROM clock_timestamp())
             ELSE NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = j.run_id
                                 AND r.epoch = j.run_epoch AND r.status = 'RUNNING')
           END AS abandoned
      FROM journal j WHERE j.key = :key::text
), verdict AS (
    SELECT CASE
             WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING'
                       AND lease_until >= extract(epoch FROM clock_timestamp())) THEN 'fenced'
             WHEN NOT EXISTS (SELECT 1 FROM cur) THEN 'new'
             WHEN (SELECT tool_name FROM cur) <> :tool_name::text THEN 'wrong_tool'
             WHEN (SELECT status FROM cur) = 'DONE' THEN 'done'
             WHEN (SELECT abandoned FROM cur) IS NOT FALSE THEN 'abandoned'
             ELSE 'held'
           END AS status
), ins AS (
    INSERT INTO journal (key, tool_name, status, run_id, run_epoch, invocation_id,
                         function_call_id, holder, held_until, created_at, updated_at,
                         key_template)
    SELECT :key::text, :tool_name::text, 'INTENT', :run_id::text, :run_epoch::bigint,
           :invocation_id::text, :function_call_id::text, :holder::text,
           CASE WHEN :run_id::text IS NULL
                THEN extract(epoch FROM clock_timestamp()) + :hold::float8 END,
           extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp()),
           :key_template::text
      FROM verdict WHERE status = 'new'
    ON CONFLICT (key) DO NOTHING
    RETURNING 1
), upd AS (
    UPDATE journal
       SET run_id = :run_id::text, run_epoch = :run_epoch::bigint,
           function_call_id = :function_call_id::text, holder = :holder::text,
           held_until = CASE WHEN :run_id::text IS NULL
                             THEN extract(epoch FROM clock_timestamp()) + :hold::float8 END,
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE key = :key::text AND status = 'INTENT'
       AND (SELECT status FROM verdict) = 'abandoned'
       AND holder IS NOT DISTINCT FROM (SELECT holder FROM cur)
       AND run_id IS NOT DISTINCT FROM (SELECT run_id FROM cur)
       AND run_epoch IS NOT DISTINCT FROM (SELECT run_epoch FROM cur)
       AND held_until IS NOT DISTINCT FROM (SELECT held_until FROM cur)
    RETURNING 1
)
SELECT CASE v.status
         WHEN 'new' THEN CASE WHEN EXISTS (SELECT 1 FROM ins) THEN 'acquired' ELSE 'retry' END
         WHEN 'abandoned' THEN CASE WHEN EXISTS (SELECT 1 FROM upd) THEN 'taken' ELSE 'retry' END
         ELSE v.status
       END AS status,
       c.tool_name AS entry_tool, c.result AS result, c.run_id AS owner_run_id,
       c.run_epoch AS owner_epoch, c.function_call_id AS owner_call_id
  FROM verdict v LEFT JOIN cur c ON TRUE;

-- name: append_events_journal_begin inline
-- A run's buffered events (append_events) and a journaled tool's intent
-- (journal_begin) as one statement: the function call is durable exactly when
-- its intent is, so no crash leaves one without the other. The journal's part
-- runs only when the events were written; its verdict is then the result
-- (as journal_begin's), else the events' refusal ('missing', 'duplicate',
-- 'fenced', 'stale', as append_events).
WITH
-- use: events_batch
-- use: events_batch_verdict
-- use: events_batch_writes
, cur AS (
    SELECT j.*,
           CASE
             WHEN j.holder IS NULL THEN TRUE
             WHEN j.run_id IS NULL THEN j.held_until < extract(epoch FROM clock_timestamp())
             ELSE NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = j.run_id
                                 AND r.epoch = j.run_epoch AND r.status = 'RUNNING')
           END AS abandoned
      FROM journal j WHERE j.key = :key::text
), jv AS (
    SELECT CASE
             WHEN (SELECT status FROM verdict) <> 'ok' THEN (SELECT status FROM verdict)
             WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING'
                       AND lease_until >= extract(epoch FROM clock_timestamp())) THEN 'fenced'
             WHEN NOT EXISTS (SELECT 1 FROM cur) THEN 'new'
             WHEN (SELECT tool_name FROM cur) <> :tool_name::text THEN 'wrong_tool'
             WHEN (SELECT status FROM cur) = 'DONE' THEN 'done'
             WHEN (SELECT abandoned FROM cur) IS NOT FALSE THEN 'abandoned'
             ELSE 'held'
           END AS status
), jins AS (
    INSERT INTO journal (key, tool_name, status, run_id, run_epoch, invocation_id,
                         function_call_id, holder, held_until, created_at, updated_at,
                         key_template)
    SELECT :key::text, :tool_name::text, 'INTENT', :run_id::text, :run_epoch::bigint,
           :invocation_id::text, :function_call_id::text, :holder::text,
           CASE WHEN :run_id::text IS NULL
                THEN extract(epoch FROM clock_timestamp()) + :hold::float8 END,
           extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp()),
           :key_template::text
      FROM jv WHERE status = 'new'
    ON CONFLICT (key) DO NOTHING
    RETURNING 1
), jupd AS (
    UPDATE journal
       SET run_id = :run_id::text, run_epoch = :run_epoch::bigint,
           function_call_id = :function_call_id::text, holder = :holder::text,
           held_until = CASE WHEN :run_id::text IS NULL
                             THEN extract(epoch FROM clock_timestamp()) + :hold::float8 END,
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE key = :key::text AND status = 'INTENT'
       AND (SELECT status FROM jv) = 'abandoned'
       AND holder IS NOT DISTINCT FROM (SELECT holder FROM cur)
       AND run_id IS NOT DISTINCT FROM (SELECT run_id FROM cur)
       AND run_epoch IS NOT DISTINCT FROM (SELECT run_epoch FROM cur)
       AND held_until IS NOT DISTINCT FROM (SELECT held_until FROM cur)
    RETURNING 1
)
SELECT CASE v.status
         WHEN 'new' THEN CASE WHEN EXISTS (SELECT 1 FROM jins) THEN 'acquired' ELSE 'retry' END
         WHEN 'abandoned' THEN CASE WHEN EXISTS (SELECT 1 FROM jupd) THEN 'taken' ELSE 'retry' END
         ELSE v.status
       END AS status,
       (SELECT status FROM verdict) = 'ok' AS appended,
       COALESCE((SELECT last_seq FROM upd), (SELECT last_seq FROM s)) AS last_seq,
       c.tool_name AS entry_tool, c.result AS result, c.run_id AS owner_run_id,
       c.run_epoch AS owner_epoch, c.function_call_id AS owner_call_id
  FROM jv v LEFT JOIN cur c ON TRUE;

-- name: journal_watch
-- A waiter's poll (and the holder's check before acting after a lookup):
-- 'fenced' (the caller is not live), 'mine' (the caller holds the intent),
-- 'held' (a live owner holds it) or 'go' (anything else: begin again).
SELECT CASE
         WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id::text
                   AND epoch = :run_epoch::bigint AND status = 'RUNNING'
                   AND lease_until >= extract(epoch FROM clock_timestamp())) THEN 'fenced'
         WHEN j.status = 'INTENT' AND j.holder = :holder::text THEN 'mine'
         WHEN j.status = 'INTENT' AND j.holder IS NOT NULL AND j.run_id IS NULL
              AND j.held_until >= extract(epoch FROM clock_timestamp()) THEN 'held'
         WHEN j.status = 'INTENT' AND j.holder IS NOT NULL AND j.run_id IS NOT NULL
              AND EXISTS (SELECT 1 FROM runs r WHERE r.run_id = j.run_id
                             AND r.epoch = j.run_epoch AND r.status = 'RUNNING') THEN 'held'
         ELSE 'go'
       END AS status
  FROM (SELECT 1) AS one LEFT JOIN journal j ON j.key = :key::text;

-- name: journal_done inline
-- The holder records the result. Fenced by the epoch only (not the lease):
-- the act has happened, and until the run is taken over nobody else may
-- record it; after that the new owner's lookup does.
WITH cur AS (
    SELECT * FROM journal WHERE key = :key::text
), verdict AS (
    SELECT CASE
             WHEN NOT EXISTS (SELECT 1 FROM cur) THEN 'missing'
             WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING') THEN 'fenced'
             WHEN (SELECT status FROM cur) = 'DONE' THEN 'done'
             WHEN (SELECT holder FROM cur) IS DISTINCT FROM :holder::text THEN 'lost'
             ELSE 'ok'
           END AS status
), upd AS (
    UPDATE journal
       SET status = 'DONE', result = :result::text, run_id = :run_id::text,
           run_epoch = :run_epoch::bigint, function_call_id = :function_call_id::text,
           holder = NULL, held_until = NULL,
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE key = :key::text AND status = 'INTENT' AND holder = :holder::text
       AND (SELECT status FROM verdict) = 'ok'
    RETURNING 1
)
SELECT CASE WHEN v.status = 'ok' AND NOT EXISTS (SELECT 1 FROM upd) THEN 'lost'
            ELSE v.status END AS status
  FROM verdict v;

-- name: journal_found inline
-- A caller met an intent held by another attempt (live, or dead with its
-- run's lease still running), asked the outside system, and the effect is
-- there: record it DONE, whoever holds the intent. Fenced by the caller's
-- epoch only, like the holder's DONE: what it records has happened. Refused:
-- 'fenced', 'missing' (the intent was forgotten: begin again), 'wrong_tool',
-- 'done' (with the stored result: a second recorder changes nothing), 'retry'
-- (another writer changed the row first: begin again). A holder still acting
-- finds the entry DONE when it records, and answers with the stored result.
WITH cur AS (
    SELECT * FROM journal WHERE key = :key::text
), verdict AS (
    SELECT CASE
             WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING') THEN 'fenced'
             WHEN NOT EXISTS (SELECT 1 FROM cur) THEN 'missing'
             WHEN (SELECT tool_name FROM cur) <> :tool_name::text THEN 'wrong_tool'
             WHEN (SELECT status FROM cur) = 'DONE' THEN 'done'
             ELSE 'ok'
           END AS status
), upd AS (
    UPDATE journal
       SET status = 'DONE', result = :result::text, run_id = :run_id::text,
           run_epoch = :run_epoch::bigint, function_call_id = :function_call_id::text,
           holder = NULL, held_until = NULL,
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE key = :key::text AND status = 'INTENT'
       AND (SELECT status FROM verdict) = 'ok'
    RETURNING result
)
SELECT CASE WHEN v.status = 'ok' AND NOT EXISTS (SELECT 1 FROM upd) THEN 'retry'
            ELSE v.status END AS status,
       COALESCE((SELECT result FROM upd), (SELECT result FROM cur)) AS result
  FROM verdict v;

-- name: journal_release inline
-- The holder's act (or lookup) raised: the intent stays, nobody is acting.
UPDATE journal
   SET holder = NULL, held_until = NULL, updated_at = extract(epoch FROM clock_timestamp())
 WHERE key = :key::text AND status = 'INTENT' AND holder = :holder::text
RETURNING key;

-- name: journal_forget inline
-- The holder's act was refused by the outside service's fence check (it did
-- not act) on an intent this attempt wrote itself: no effect was ever made
-- under it, so the entry goes, as if never written.
DELETE FROM journal
 WHERE key = :key::text AND status = 'INTENT' AND holder = :holder::text
RETURNING key;

-- name: journal_hold inline
-- Outside a run, the holder renews its hold while it acts.
UPDATE journal
   SET held_until = extract(epoch FROM clock_timestamp()) + :hold::float8
 WHERE key = :key::text AND status = 'INTENT' AND holder = :holder::text
RETURNING key;

-- name: journal_list
SELECT * FROM journal
 WHERE (:invocation_id::text IS NULL OR invocation_id = :invocation_id::text)
 ORDER BY created_at DESC LIMIT :limit::int;

-- name: journal_resolve
-- An operator records the result of an effect whose outcome was unknown: an
-- INTENT nobody acts on (its run is not RUNNING at its epoch; outside a run,
-- its hold was released or ran out) becomes DONE with that result. Refused:
-- 'missing' (no entry), 'done' (already DONE: nothing changed), 'held' (a
-- live attempt still acts on it).
WITH one AS (SELECT 1 AS x),
j AS (SELECT * FROM journal WHERE key = :key::text FOR UPDATE),
chk AS (
    SELECT CASE
             WHEN j.key IS NULL THEN 'missing'
             WHEN j.status = 'DONE' THEN 'done'
             WHEN j.holder IS NOT NULL AND j.run_id IS NULL
                  AND j.held_until >= extract(epoch FROM clock_timestamp()) THEN 'held'
             WHEN j.holder IS NOT NULL AND j.run_id IS NOT NULL AND EXISTS (
                    SELECT 1 FROM runs r WHERE r.run_id = j.run_id AND r.epoch = j.run_epoch
                                           AND r.status = 'RUNNING') THEN 'held'
             ELSE 'ok'
           END AS status,
           j.result AS result, j.resolved_by AS resolved_by
      FROM one LEFT JOIN j ON true
), u AS (
    UPDATE journal
       SET status = 'DONE', result = :result::text, holder = NULL, held_until = NULL,
           resolved_by = :actor::text, updated_at = extract(epoch FROM clock_timestamp())
      FROM chk
     WHERE journal.key = :key::text AND journal.status = 'INTENT' AND chk.status = 'ok'
    RETURNING journal.result, journal.resolved_by
)
SELECT chk.status, COALESCE((SELECT u.result FROM u), chk.result) AS result,
       COALESCE((SELECT u.resolved_by FROM u), chk.resolved_by) AS resolved_by
  FROM chk;

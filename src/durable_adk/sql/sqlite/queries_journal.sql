-- Journal queries for SQLite (same names in the other dialect).

-- ---------------------------------------------------------------- journal
-- An entry is owned by the attempt that holds it: its run and fencing epoch
-- (run_id, run_epoch), its call, and a token of its own (holder). Who may do
-- what, decided in one unit of work each:
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
SELECT * FROM journal WHERE key = :key;

-- name: journal_begin guarded inline
-- Fence check, then: no entry -> write the intent ('acquired': act); an
-- abandoned intent -> take it over ('taken': look up, then act); else refuse
-- with 'fenced', 'wrong_tool', 'done' (with the result) or 'held' (wait). The
-- unit holds the write lock from its first statement, so the check and the
-- write see the same row: two takers never both win.
SELECT CASE
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING'
                                     AND lease_until >= (julianday('now') - 2440587.5) * 86400.0)
              THEN 'fenced'
         WHEN j.key IS NULL THEN 'ok'
         WHEN j.tool_name <> :tool_name THEN 'wrong_tool'
         WHEN j.status = 'DONE' THEN 'done'
         WHEN j.holder IS NULL THEN 'ok'
         WHEN j.run_id IS NULL
              AND j.held_until >= (julianday('now') - 2440587.5) * 86400.0 THEN 'held'
         WHEN j.run_id IS NOT NULL AND EXISTS (
                SELECT 1 FROM runs r WHERE r.run_id = j.run_id AND r.epoch = j.run_epoch
                                       AND r.status = 'RUNNING') THEN 'held'
         ELSE 'ok'
       END AS status,
       j.tool_name AS entry_tool, j.result AS result, j.run_id AS owner_run_id,
       j.run_epoch AS owner_epoch, j.function_call_id AS owner_call_id
  FROM (SELECT 1) AS one LEFT JOIN journal j ON j.key = :key;
UPDATE journal
   SET run_id = :run_id, run_epoch = :run_epoch, function_call_id = :function_call_id,
       holder = :holder,
       held_until = CASE WHEN :run_id IS NULL
                         THEN (julianday('now') - 2440587.5) * 86400.0 + :hold END,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE key = :key AND status = 'INTENT';
INSERT INTO journal (key, tool_name, status, run_id, run_epoch, invocation_id, function_call_id,
                     holder, held_until, created_at, updated_at, key_template)
SELECT :key, :tool_name, 'INTENT', :run_id, :run_epoch, :invocation_id, :function_call_id,
       :holder,
       CASE WHEN :run_id IS NULL THEN (julianday('now') - 2440587.5) * 86400.0 + :hold END,
       (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0,
       :key_template
 WHERE NOT EXISTS (SELECT 1 FROM journal WHERE key = :key);
-- changes() counts the INSERT just above: 1 for a new entry, 0 for a takeover.
SELECT CASE WHEN changes() = 1 THEN 'acquired' ELSE 'taken' END AS status;

-- name: append_events_journal_begin inline
-- A run's buffered events (append_events) and a journaled tool's intent
-- (journal_begin) in one transaction: the function call is durable exactly
-- when its intent is, so no crash leaves one without the other. A refused
-- append stops the unit with its row (nothing written); else the result is
-- journal_begin's.
-- include: append_events
-- include: journal_begin

-- name: journal_watch
-- A waiter's poll (and the holder's check before acting after a lookup):
-- 'fenced' (the caller is not live), 'mine' (the caller holds the intent),
-- 'held' (a live owner holds it) or 'go' (anything else: begin again).
SELECT CASE
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING'
                                     AND lease_until >= (julianday('now') - 2440587.5) * 86400.0)
              THEN 'fenced'
         WHEN j.status = 'INTENT' AND j.holder = :holder THEN 'mine'
         WHEN j.status = 'INTENT' AND j.holder IS NOT NULL AND j.run_id IS NULL
              AND j.held_until >= (julianday('now') - 2440587.5) * 86400.0 THEN 'held'
         WHEN j.status = 'INTENT' AND j.holder IS NOT NULL AND j.run_id IS NOT NULL
              AND EXISTS (SELECT 1 FROM runs r WHERE r.run_id = j.run_id
                             AND r.epoch = j.run_epoch AND r.status = 'RUNNING') THEN 'held'
         ELSE 'go'
       END AS status
  FROM (SELECT 1) AS one LEFT JOIN journal j ON j.key = :key;

-- name: journal_done guarded inline
-- The holder records the result. Fenced by the epoch only (not the lease):
-- the act has happened, and until the run is taken over nobody else may
-- record it; after that the new owner's lookup does.
SELECT CASE
         WHEN NOT EXISTS (SELECT 1 FROM journal WHERE key = :key) THEN 'missing'
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING') THEN 'fenced'
         WHEN EXISTS (SELECT 1 FROM journal WHERE key = :key AND status = 'DONE') THEN 'done'
         WHEN NOT EXISTS (SELECT 1 FROM journal WHERE key = :key AND holder = :holder)
              THEN 'lost'
         ELSE 'ok'
       END AS status;
UPDATE journal
   SET status = 'DONE', result = :result, run_id = :run_id, run_epoch = :run_epoch,
       function_call_id = :function_call_id, holder = NULL, held_until = NULL,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE key = :key AND status = 'INTENT' AND holder = :holder;
SELECT 'ok' AS status;

-- name: journal_found guarded inline
-- A caller met an intent held by another attempt (live, or dead with its
-- run's lease still running), asked the outside system, and the effect is
-- there: record it DONE, whoever holds the intent. Fenced by the caller's
-- epoch only, like the holder's DONE: what it records has happened. Refused:
-- 'fenced', 'missing' (the intent was forgotten: begin again), 'wrong_tool',
-- 'done' (with the stored result: a second recorder changes nothing). A
-- holder still acting finds the entry DONE when it records, and answers with
-- the stored result.
SELECT CASE
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING') THEN 'fenced'
         WHEN j.key IS NULL THEN 'missing'
         WHEN j.tool_name <> :tool_name THEN 'wrong_tool'
         WHEN j.status = 'DONE' THEN 'done'
         ELSE 'ok'
       END AS status,
       j.result AS result
  FROM (SELECT 1) AS one LEFT JOIN journal j ON j.key = :key;
UPDATE journal
   SET status = 'DONE', result = :result, run_id = :run_id, run_epoch = :run_epoch,
       function_call_id = :function_call_id, holder = NULL, held_until = NULL,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE key = :key AND status = 'INTENT';
SELECT 'ok' AS status, result FROM journal WHERE key = :key;

-- name: journal_release inline
-- The holder's act (or lookup) raised: the intent stays, nobody is acting.
UPDATE journal
   SET holder = NULL, held_until = NULL,
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE key = :key AND status = 'INTENT' AND holder = :holder
RETURNING key;

-- name: journal_forget inline
-- The holder's act was refused by the outside service's fence check (it did
-- not act) on an intent this attempt wrote itself: no effect was ever made
-- under it, so the entry goes, as if never written.
DELETE FROM journal
 WHERE key = :key AND status = 'INTENT' AND holder = :holder
RETURNING key;

-- name: journal_hold inline
-- Outside a run, the holder renews its hold while it acts.
UPDATE journal
   SET held_until = (julianday('now') - 2440587.5) * 86400.0 + :hold
 WHERE key = :key AND status = 'INTENT' AND holder = :holder
RETURNING key;

-- name: journal_list
SELECT * FROM journal
 WHERE (:invocation_id IS NULL OR invocation_id = :invocation_id)
 ORDER BY created_at DESC LIMIT :limit;

-- name: journal_resolve guarded
-- An operator records the result of an effect whose outcome was unknown: an
-- INTENT nobody acts on (its run is not RUNNING at its epoch; outside a run,
-- its hold was released or ran out) becomes DONE with that result. Refused:
-- 'missing' (no entry), 'done' (already DONE: nothing changed), 'held' (a
-- live attempt still acts on it).
SELECT CASE
         WHEN j.key IS NULL THEN 'missing'
         WHEN j.status = 'DONE' THEN 'done'
         WHEN j.holder IS NOT NULL AND j.run_id IS NULL
              AND j.held_until >= (julianday('now') - 2440587.5) * 86400.0 THEN 'held'
         WHEN j.holder IS NOT NULL AND j.run_id IS NOT NULL AND EXISTS (
                SELECT 1 FROM runs r WHERE r.run_id = j.run_id AND r.epoch = j.run_epoch
                                       AND r.status = 'RUNNING') THEN 'held'
         ELSE 'ok'
       END AS status,
       j.result AS result, j.resolved_by AS resolved_by
  FROM (SELECT 1) AS one LEFT JOIN journal j ON j.key = :key;
UPDATE journal
   SET status = 'DONE', result = :result, holder = NULL, held_until = NULL,
       resolved_by = :actor, updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE key = :key AND status = 'INTENT';
SELECT 'ok' AS status, result, resolved_by FROM journal WHERE key = :key;

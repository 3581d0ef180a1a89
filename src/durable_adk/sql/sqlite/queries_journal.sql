-- Journal queries for SQLite (same names in the other dialect).

-- ---------------------------------------------------------------- journal
-- A write made for a run names its epoch; once the run was taken over the
-- write is refused ('fenced'), like the run's session appends.

-- name: journal_get
SELECT * FROM journal WHERE key = :key;

-- name: journal_intent guarded inline
SELECT CASE
         WHEN EXISTS (SELECT 1 FROM journal WHERE key = :key) THEN 'exists'
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING') THEN 'fenced'
         ELSE 'ok'
       END AS status;
INSERT INTO journal (key, tool_name, status, run_id, run_epoch, invocation_id, function_call_id,
                     created_at, updated_at)
VALUES (:key, :tool_name, 'INTENT', :run_id, :run_epoch, :invocation_id, :function_call_id,
        (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0);
SELECT 'ok' AS status;

-- name: journal_done guarded inline
SELECT CASE
         WHEN NOT EXISTS (SELECT 1 FROM journal WHERE key = :key) THEN 'missing'
         WHEN EXISTS (SELECT 1 FROM journal WHERE key = :key AND status = 'DONE') THEN 'done'
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING') THEN 'fenced'
         ELSE 'ok'
       END AS status;
UPDATE journal
   SET status = 'DONE', result = :result, run_id = COALESCE(:run_id, run_id),
       run_epoch = COALESCE(:run_epoch, run_epoch),
       function_call_id = COALESCE(:function_call_id, function_call_id),
       updated_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE key = :key AND status = 'INTENT';
SELECT 'ok' AS status;

-- name: journal_list
SELECT * FROM journal
 WHERE (:invocation_id IS NULL OR invocation_id = :invocation_id)
 ORDER BY created_at DESC LIMIT :limit;

-- Journal queries for PostgreSQL (same names in the other dialect).

-- ---------------------------------------------------------------- journal
-- A write made for a run names its epoch; once the run was taken over the
-- write is refused ('fenced'), like the run's session appends.

-- name: journal_get
SELECT * FROM journal WHERE key = :key::text;

-- name: journal_intent inline
WITH verdict AS (
    SELECT CASE
             WHEN EXISTS (SELECT 1 FROM journal WHERE key = :key::text) THEN 'exists'
             WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING') THEN 'fenced'
             ELSE 'ok'
           END AS status
), ins AS (
    INSERT INTO journal (key, tool_name, status, run_id, run_epoch, invocation_id,
                         function_call_id, created_at, updated_at)
    SELECT :key::text, :tool_name::text, 'INTENT', :run_id::text, :run_epoch::bigint,
           :invocation_id::text, :function_call_id::text,
           extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp())
      FROM verdict WHERE status = 'ok'
    ON CONFLICT (key) DO NOTHING
    RETURNING 1
)
SELECT CASE WHEN v.status = 'ok' AND NOT EXISTS (SELECT 1 FROM ins) THEN 'exists'
            ELSE v.status END AS status
  FROM verdict v;

-- name: journal_done inline
WITH verdict AS (
    SELECT CASE
             WHEN NOT EXISTS (SELECT 1 FROM journal WHERE key = :key::text) THEN 'missing'
             WHEN EXISTS (SELECT 1 FROM journal WHERE key = :key::text AND status = 'DONE')
                  THEN 'done'
             WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING') THEN 'fenced'
             ELSE 'ok'
           END AS status
), upd AS (
    UPDATE journal
       SET status = 'DONE', result = :result::text, run_id = COALESCE(:run_id::text, run_id),
           run_epoch = COALESCE(:run_epoch::bigint, run_epoch),
           function_call_id = COALESCE(:function_call_id::text, function_call_id),
           updated_at = extract(epoch FROM clock_timestamp())
     WHERE key = :key::text AND status = 'INTENT'
       AND (SELECT status FROM verdict) = 'ok'
    RETURNING 1
)
SELECT CASE WHEN v.status = 'ok' AND NOT EXISTS (SELECT 1 FROM upd) THEN 'done'
            ELSE v.status END AS status
  FROM verdict v;

-- name: journal_list
SELECT * FROM journal
 WHERE (:invocation_id::text IS NULL OR invocation_id = :invocation_id::text)
 ORDER BY created_at DESC LIMIT :limit::int;

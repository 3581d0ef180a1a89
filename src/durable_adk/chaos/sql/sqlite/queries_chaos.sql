-- Read-only queries of the chaos soak (durable_adk.chaos.soak): what the
-- ledger, the soak's observer table and the session logs hold at the end.

-- name: chaos_claims
SELECT run_id, epoch, owner, status, at FROM chaos_claims ORDER BY pk;

-- name: chaos_runs
SELECT run_id, user_id, session_id, invocation_id, status, owner, epoch, attempts,
       last_error, classification, created_at, finished_at, app_version
FROM runs WHERE app_name = :app_name ORDER BY pk;

-- name: chaos_sagas
SELECT saga_id, name, invocation_id, status FROM sagas WHERE app_name = :app_name ORDER BY created_at;

-- name: chaos_events
SELECT s.user_id, s.session_id, e.seq, e.invocation_id, e.author, e.data
FROM events e JOIN sessions s ON s.pk = e.session_pk
WHERE s.app_name = :app_name
ORDER BY s.pk, e.seq;

-- name: chaos_ticks
SELECT schedule_name, tick_key, tick_at, kind, run_id, session_id, state
FROM schedule_ticks WHERE app_name = :app_name ORDER BY tick_at, pk;

-- Repairs of stored events the reader cannot parse (issue 47): an operator
-- replaces one with a readable stand-in, audited, the original kept.

-- name: event_repair_target
-- The session and the stored row of one of its events, by event id (session_pk:
-- the row names its encrypted columns, which the store then opens).
SELECT s.pk, s.pk AS session_pk, s.repairs, e.seq, e.event_id, e.invocation_id, e.author, e.timestamp,
       e.delta, e.data
  FROM sessions s
  JOIN events e ON e.session_pk = s.pk AND e.event_id = :event_id::text
 WHERE s.app_name = :app_name::text AND s.user_id = :user_id::text
   AND s.session_id = :session_id::text;

-- name: event_repair
-- Writes the stand-in over the row, only if the row still holds what the
-- operator inspected (a concurrent repair that got there first leaves no row
-- here: the UPDATE's condition is re-checked on the row it waited for), counts
-- the repair on the session (cached copies of its log are dropped) and records
-- it with the original text (:stored: the row's data as read; :data: the
-- stand-in as the events table keeps it, sealed with keys; :original and
-- :replacement: the audit line's copies, sealed for it).
WITH e AS (
    UPDATE events SET data = :data::text
     WHERE session_pk = :session_pk::bigint AND seq = :seq::bigint
       AND event_id = :event_id::text AND data = :stored::text
    RETURNING seq
), s AS (
    UPDATE sessions SET repairs = repairs + 1
     WHERE pk = :session_pk::bigint AND EXISTS (SELECT 1 FROM e)
    RETURNING pk
)
INSERT INTO event_repairs (app_name, user_id, session_id, seq, event_id, action, actor, reason,
                           original, replacement, created_at)
SELECT :app_name::text, :user_id::text, :session_id::text, e.seq, :event_id::text,
       :action::text, :actor::text, :reason::text, :original::text, :replacement::text,
       extract(epoch FROM clock_timestamp())
  FROM e
RETURNING *;

-- name: event_repair_list
-- The repairs of a session's events, newest first.
SELECT * FROM event_repairs
 WHERE app_name = :app_name::text AND user_id = :user_id::text
   AND session_id = :session_id::text
 ORDER BY pk DESC LIMIT :limit::bigint;

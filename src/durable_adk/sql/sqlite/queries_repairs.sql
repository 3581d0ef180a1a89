-- Repairs of stored events the reader cannot parse (issue 47): an operator
-- replaces one with a readable stand-in, audited, the original kept.

-- name: event_repair_target
-- The session and the stored row of one of its events, by event id (session_pk:
-- the row names its encrypted columns, which the store then opens).
SELECT s.pk, s.pk AS session_pk, s.repairs, e.seq, e.event_id, e.invocation_id, e.author, e.timestamp,
       e.delta, e.data
  FROM sessions s
  JOIN events e ON e.session_pk = s.pk AND e.event_id = :event_id
 WHERE s.app_name = :app_name AND s.user_id = :user_id AND s.session_id = :session_id;

-- name: event_repair guarded
-- Writes the stand-in over the row, only if the row still holds what the
-- operator inspected, counts the repair on the session (cached copies of its
-- log are dropped) and records it with the original text (:stored: the row's
-- data as read; :data: the stand-in as the events table keeps it, sealed with
-- keys; :original and :replacement: the audit line's copies, sealed for it).
SELECT CASE WHEN EXISTS (SELECT 1 FROM events
                          WHERE session_pk = :session_pk AND seq = :seq
                            AND event_id = :event_id AND data = :stored)
            THEN 'ok' ELSE 'changed' END AS status;
UPDATE events SET data = :data
 WHERE session_pk = :session_pk AND seq = :seq AND event_id = :event_id;
UPDATE sessions SET repairs = repairs + 1 WHERE pk = :session_pk;
INSERT INTO event_repairs (app_name, user_id, session_id, seq, event_id, action, actor, reason,
                           original, replacement, created_at)
VALUES (:app_name, :user_id, :session_id, :seq, :event_id, :action, :actor, :reason,
        :original, :replacement, (julianday('now') - 2440587.5) * 86400.0)
RETURNING *;

-- name: event_repair_list
-- The repairs of a session's events, newest first.
SELECT * FROM event_repairs
 WHERE app_name = :app_name AND user_id = :user_id AND session_id = :session_id
 ORDER BY pk DESC LIMIT :limit;

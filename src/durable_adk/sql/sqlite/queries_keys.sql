-- Encryption at rest (issue 43): users' data keys, stored wrapped. The
-- rotation's per-column queries are made from durable_adk.store.sealing.codec.COLUMNS
-- (durable_adk.store.rotation), not written here.

-- name: user_key_get
SELECT key_ref, wrap_key, wrapped FROM user_keys WHERE app_name = :app_name AND user_id = :user_id;

-- name: user_key_by_ref
SELECT app_name, user_id, wrap_key, wrapped FROM user_keys WHERE key_ref = :key_ref;

-- name: user_key_put
-- The first writer's key wins; a second gets no row and reads the first's.
INSERT INTO user_keys (app_name, user_id, key_ref, wrap_key, wrapped, created_at)
VALUES (:app_name, :user_id, :key_ref, :wrap_key, :wrapped, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (app_name, user_id) DO NOTHING
RETURNING key_ref, wrap_key, wrapped;

-- name: user_key_delete
DELETE FROM user_keys WHERE app_name = :app_name AND user_id = :user_id RETURNING key_ref;

-- name: user_keys_stale
-- Users' data keys wrapped under another key than :primary (what rotation re-wraps).
SELECT app_name, user_id, key_ref, wrap_key, wrapped FROM user_keys
 WHERE wrap_key <> :primary ORDER BY app_name, user_id LIMIT :limit;

-- name: user_key_rewrap
UPDATE user_keys SET wrap_key = :wrap_key, wrapped = :wrapped
 WHERE app_name = :app_name AND user_id = :user_id AND wrapped = :old
RETURNING key_ref;

-- name: user_keys_by_wrap
SELECT wrap_key, COUNT(*) AS n FROM user_keys GROUP BY wrap_key;

-- Artifact queries for SQLite (same names in the other dialect).
-- A file is (app_name, user_id, session_id, filename); session_id is '' for a
-- user-scoped file. Versions count up from 0.

-- name: artifact_save guarded
-- 'fenced': written for a run that was taken over (or ended); 'same': this
-- invocation already saved these very bytes as the latest version (a re-driven
-- step), whose number is returned instead of a new one.
SELECT CASE
         WHEN :run_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :run_epoch
                                     AND status = 'RUNNING') THEN 'fenced'
         WHEN :invocation_id IS NOT NULL AND EXISTS (
                SELECT 1 FROM artifacts a
                 WHERE a.app_name = :app_name AND a.user_id = :user_id
                   AND a.session_id = :session_id AND a.filename = :filename
                   AND a.digest = :digest AND a.invocation_id = :invocation_id
                   AND a.version = (SELECT MAX(version) FROM artifacts
                                     WHERE app_name = :app_name AND user_id = :user_id
                                       AND session_id = :session_id AND filename = :filename))
              THEN 'same'
         ELSE 'ok'
       END AS status,
       (SELECT MAX(version) FROM artifacts
         WHERE app_name = :app_name AND user_id = :user_id
           AND session_id = :session_id AND filename = :filename) AS version;
INSERT INTO artifacts (app_name, user_id, session_id, filename, version, part, mime_type,
                       custom_metadata, digest, run_id, run_epoch, invocation_id, created_at)
VALUES (:app_name, :user_id, :session_id, :filename,
        (SELECT COALESCE(MAX(version) + 1, 0) FROM artifacts
          WHERE app_name = :app_name AND user_id = :user_id
            AND session_id = :session_id AND filename = :filename),
        :part, :mime_type, :custom_metadata, :digest, :run_id, :run_epoch, :invocation_id,
        (julianday('now') - 2440587.5) * 86400.0);
SELECT 'ok' AS status, MAX(version) AS version FROM artifacts
 WHERE app_name = :app_name AND user_id = :user_id
   AND session_id = :session_id AND filename = :filename;

-- name: artifact_get
-- One version (the latest when :version is NULL).
SELECT * FROM artifacts
 WHERE app_name = :app_name AND user_id = :user_id
   AND session_id = :session_id AND filename = :filename
   AND (:version IS NULL OR version = :version)
 ORDER BY version DESC LIMIT 1;

-- name: artifact_versions
SELECT app_name, user_id, session_id, filename, version, mime_type, custom_metadata, digest,
       created_at
  FROM artifacts
 WHERE app_name = :app_name AND user_id = :user_id
   AND session_id = :session_id AND filename = :filename
 ORDER BY version;

-- name: artifact_keys
-- The session's files and the user's (user-scoped) files.
SELECT DISTINCT filename FROM artifacts
 WHERE app_name = :app_name AND user_id = :user_id
   AND (session_id = :session_id OR session_id = '')
 ORDER BY filename;

-- name: artifact_delete
DELETE FROM artifacts
 WHERE app_name = :app_name AND user_id = :user_id
   AND session_id = :session_id AND filename = :filename;

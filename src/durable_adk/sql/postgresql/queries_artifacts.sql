-- Artifact queries for PostgreSQL (same names in the other dialect).
-- A file is (app_name, user_id, session_id, filename); session_id is '' for a
-- user-scoped file. Versions count up from 0.

-- name: artifact_save
-- 'fenced': written for a run that was taken over (or ended); 'same': this
-- invocation already saved these very bytes as the latest version (a re-driven
-- step), whose number is returned instead of a new one. Two saves of one file
-- at the same instant may pick the same number: the loser's insert hits the
-- primary key and the caller tries again.
WITH latest AS (
    SELECT version, digest, invocation_id FROM artifacts
     WHERE app_name = :app_name::text AND user_id = :user_id::text
       AND session_id = :session_id::text AND filename = :filename::text
     ORDER BY version DESC LIMIT 1
), verdict AS (
    SELECT CASE
             WHEN :run_id::text IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM runs WHERE run_id = :run_id::text
                       AND epoch = :run_epoch::bigint AND status = 'RUNNING') THEN 'fenced'
             WHEN :invocation_id::text IS NOT NULL AND EXISTS (
                    SELECT 1 FROM latest WHERE digest = :digest::text
                                           AND invocation_id = :invocation_id::text)
                  THEN 'same'
             ELSE 'ok'
           END AS status
), ins AS (
    INSERT INTO artifacts (app_name, user_id, session_id, filename, version, part, mime_type,
                           custom_metadata, digest, run_id, run_epoch, invocation_id, created_at)
    SELECT :app_name::text, :user_id::text, :session_id::text, :filename::text,
           COALESCE((SELECT version FROM latest) + 1, 0), :part::text, :mime_type::text,
           :custom_metadata::text, :digest::text, :run_id::text, :run_epoch::bigint,
           :invocation_id::text, extract(epoch FROM clock_timestamp())
      FROM verdict WHERE status = 'ok'
    RETURNING version
)
SELECT v.status,
       COALESCE((SELECT version FROM ins), (SELECT version FROM latest)) AS version
  FROM verdict v;

-- name: artifact_get
-- One version (the latest when :version is NULL).
SELECT * FROM artifacts
 WHERE app_name = :app_name::text AND user_id = :user_id::text
   AND session_id = :session_id::text AND filename = :filename::text
   AND (:version::bigint IS NULL OR version = :version::bigint)
 ORDER BY version DESC LIMIT 1;

-- name: artifact_versions
SELECT app_name, user_id, session_id, filename, version, mime_type, custom_metadata, digest,
       created_at
  FROM artifacts
 WHERE app_name = :app_name::text AND user_id = :user_id::text
   AND session_id = :session_id::text AND filename = :filename::text
 ORDER BY version;

-- name: artifact_keys
-- The session's files and the user's (user-scoped) files.
SELECT DISTINCT filename FROM artifacts
 WHERE app_name = :app_name::text AND user_id = :user_id::text
   AND (session_id = :session_id::text OR session_id = '')
 ORDER BY filename;

-- name: artifact_delete
DELETE FROM artifacts
 WHERE app_name = :app_name::text AND user_id = :user_id::text
   AND session_id = :session_id::text AND filename = :filename::text;

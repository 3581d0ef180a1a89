-- The database's histories as the workers saw them (issue 46). A PostgreSQL
-- primary's WAL timeline changes when a standby is promoted (or a backup is
-- restored to a point in time); each worker records the timeline it finds at
-- start and after an outage. A second row says a failover happened, and when:
-- with asynchronous replication, commits acknowledged just before it may be
-- lost (an intent, an answer), so for a while the journal asks the outside
-- service by key before it acts. SQLite has no timelines: the table stays empty.
CREATE TABLE db_timelines (
    timeline       text PRIMARY KEY,
    first_seen_at  double precision NOT NULL
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (25, 'timelines', (julianday('now') - 2440587.5) * 86400.0);

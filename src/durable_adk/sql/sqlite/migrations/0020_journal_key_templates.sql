-- Drift of key templates (issue 41): a journal entry records the key template
-- of the tool that wrote it (@journaled's key=, e.g. 'charge:{order_id}'). A
-- worker whose code keys the same tool with another template parks a run
-- whose journal holds such an entry before anything acts: a re-drive would
-- compute a new key, find no entry and act a second time. NULL: written before
-- this migration, or by an act with no template (a saga stage); such entries
-- are compared by the key the new code computes from the call's arguments.

ALTER TABLE journal ADD COLUMN key_template TEXT;

INSERT INTO schema_version (version, name, applied_at)
VALUES (20, 'journal_key_templates', (julianday('now') - 2440587.5) * 86400.0);

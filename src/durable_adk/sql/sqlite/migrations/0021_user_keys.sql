-- Encryption at rest (issue 43): users' own data keys, for crypto-shredding.
-- A user's data key is random and stored only wrapped (sealed by a keyring
-- key, whose id is wrap_key); the keyring keys themselves are never stored.
-- key_ref is the id the user's sealed values name. Destroying a row
-- (shred_user) leaves every value sealed under its key unreadable.

CREATE TABLE user_keys (
    app_name    TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    key_ref     TEXT NOT NULL UNIQUE,                 -- 'u-' + random hex: what sealed values name
    wrap_key    TEXT NOT NULL,                        -- the keyring key that wraps it
    wrapped     TEXT NOT NULL,                        -- nonce + AES-GCM of the data key (base64)
    created_at  REAL NOT NULL,
    PRIMARY KEY (app_name, user_id)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (21, 'user_keys', (julianday('now') - 2440587.5) * 86400.0);

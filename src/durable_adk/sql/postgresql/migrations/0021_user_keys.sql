-- Encryption at rest (issue 43): users' own data keys, for crypto-shredding.
-- A user's data key is random and stored only wrapped (sealed by a keyring
-- key, whose id is wrap_key); the keyring keys themselves are never stored.
-- key_ref is the id the user's sealed values name. Destroying a row
-- (shred_user) leaves every value sealed under its key unreadable.

CREATE TABLE user_keys (
    app_name    text NOT NULL,
    user_id     text NOT NULL,
    key_ref     text NOT NULL UNIQUE,                 -- 'u-' + random hex: what sealed values name
    wrap_key    text NOT NULL,                        -- the keyring key that wraps it
    wrapped     text NOT NULL,                        -- nonce + AES-GCM of the data key (base64)
    created_at  double precision NOT NULL,
    PRIMARY KEY (app_name, user_id)
);

INSERT INTO schema_version (version, name, applied_at)
VALUES (21, 'user_keys', extract(epoch FROM clock_timestamp()));

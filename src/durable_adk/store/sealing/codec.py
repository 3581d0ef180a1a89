"""Encryption at rest: the codec every payload column passes through (docs/data.md).

What it guarantees, once a :class:`Keyring` is given to the store
(``open_store(url, keyring=...)``, ``durable-adk serve --key-file``, or
``DURABLE_ADK_KEY_FILE``):

* every column listed in :data:`COLUMNS` (what carries user or outside data:
  events and their state deltas, snapshots, a session's initial state, run
  requests, dead letters, journal results, job requests, results and
  progress, interrupt payloads and answers, saga step records, artifacts,
  A2A task bodies, their events, push configs and the push outbox) is
  written as an envelope ``dadk:enc:v1:<key id>:<table.column>:<nonce+ciphertext,
  base64>``,
  sealed with AES-256-GCM (pyca ``cryptography``) under the keyring's first
  key, with the row's identity (table, column and primary key) as associated
  data: a ciphertext copied into another row, or another column, fails to
  open;
* every key of the keyring opens what it sealed: the first encrypts, the
  others only decrypt, until ``durable-adk keys rotate`` has moved their
  rows to the first (:mod:`durable_adk.store.rotation`);
* a value written before encryption was turned on (anything not starting
  with the marker: JSON text never does) is read as it is;
* a value whose key this process does not hold, or that does not open
  (wrong key, moved, damaged), raises :class:`~durable_adk.errors.KeyUnavailable`
  naming the key id: nothing is guessed and nothing is written back;
* the shared ``app:`` and ``user:`` state (:data:`STATE_COLUMNS`) is sealed
  value by value, each with its row and its state key as associated data,
  so the database still merges a delta into it key by key;
* with ``per_user=True``, the columns of rows that name their user are
  sealed under that user's own data key instead: a random key stored only
  wrapped (sealed by the keyring's first key) in ``user_keys``. Destroying it
  (:func:`durable_adk.store.rotation.shred_user`) leaves every value sealed
  under it unreadable everywhere, backups included.

The keys themselves are never written to the database: only the user data
keys are, and only wrapped.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from durable_adk import errors


class Store(Protocol):
    """What the codec needs of a store (:class:`durable_adk.store.base.Store`)."""

    codec: Codec | None

    async def fetchrow(self, query: str, params: Mapping[str, Any] | None = None) -> Any: ...


__all__ = [
    "COLUMNS",
    "KEY_FILE_ENV",
    "MARK",
    "STATE_COLUMNS",
    "USER_KEY_PREFIX",
    "Codec",
    "Column",
    "Keyring",
    "envelope_key",
    "keyring_from_env",
    "lenient_reads",
    "open_rows",
    "open_state",
    "open_value",
    "placeholder",
    "placeholder_note",
    "seal_params",
    "seal_state",
    "seal_value",
    "state_envelope",
    "user_key_id",
]

MARK = "dadk:enc:v1:"
"""How every sealed value begins (version 1: AES-256-GCM, 12-byte nonce)."""

USER_KEY_PREFIX = "u-"
"""Key ids of users' own data keys begin so; keyring key ids may not."""

KEY_FILE_ENV = "DURABLE_ADK_KEY_FILE"
"""The environment variable naming a key file, read when no keyring is given."""

CRYPTO_EXTRA = (
    "encryption at rest needs the 'cryptography' package: install durable-adk with its "
    "crypto extra (pip install 'durable-adk[crypto]')"
)

_KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_NONCE = 12


@dataclass(frozen=True, slots=True)
class Column:
    """One encrypted column: where it is and what names its row.

    Attributes:
        table: The table.
        column: The column.
        identity: The columns that name the row (its key): the associated data.
        order: Columns giving a stable order for batches (a unique key).
        source: The FROM clause rows are read from (with the alias ``t``).
        user: Expressions of ``source`` for the row's app and user when the
            row names its user (per-user keys apply), else empty.
        keyed: The column holds a JSON object whose values are sealed one
            by one (the shared ``app:``/``user:`` state, merged key by key by
            the database); the last name of ``identity`` stands for the
            object's key, which is part of each value's associated data.
    """

    table: str
    column: str
    identity: tuple[str, ...]
    order: tuple[str, ...]
    source: str = ""
    user: tuple[str, str] | tuple[()] = ()
    keyed: bool = False

    @property
    def name(self) -> str:
        return f"{self.table}.{self.column}"


def _col(
    table: str,
    columns: Sequence[str],
    identity: Sequence[str],
    order: Sequence[str],
    *,
    user: tuple[str, str] | tuple[()] = ("t.app_name", "t.user_id"),
    join: str = "",
) -> list[Column]:
    source = f"{table} t{join}"
    return [Column(table, c, tuple(identity), tuple(order), source, user) for c in columns]


_BY_SESSION = " JOIN sessions s ON s.pk = t.session_pk"

COLUMNS: tuple[Column, ...] = (
    *_col(
        "events",
        ("data", "delta"),
        ("session_pk", "seq"),
        ("session_pk", "seq"),
        user=("s.app_name", "s.user_id"),
        join=_BY_SESSION,
    ),
    *_col(
        "state_snapshots",
        ("state",),
        ("session_pk", "seq"),
        ("session_pk", "seq"),
        user=("s.app_name", "s.user_id"),
        join=_BY_SESSION,
    ),
    *_col("sessions", ("initial_state",), ("app_name", "user_id", "session_id"), ("pk",)),
    *_col("runs", ("request",), ("run_id",), ("pk",)),
    # A dead letter's request is copied from its run's row by SQL: both name the run.
    *_col("dead_letters", ("request", "last_events"), ("run_id",), ("pk",), user=()),
    *_col("journal", ("result",), ("key",), ("key",), user=()),
    *_col("jobs", ("request", "result", "progress", "progress_sent"), ("job_id",), ("job_id",)),
    *_col(
        "interrupts",
        ("args", "answer"),
        ("app_name", "user_id", "session_id", "invocation_id", "call_id"),
        ("pk",),
    ),
    *_col("saga_steps", ("record",), ("saga_id", "step"), ("pk",), user=()),
    # What an operator gave with an action: an answer's response, a resolve's
    # tool results (the detail the library writes from code; the detail SQL
    # writes itself, a cancel's outcome or the previous error, stays clear
    # until ``keys rotate`` seals it). The reason stays clear (docs/data.md).
    *_col("operator_actions", ("detail",), ("run_id", "action"), ("pk",), user=()),
    # A2A (docs/a2a.md): a task as the protocol sees it (the caller's messages,
    # the answers), the events that made its versions, push configs (the
    # client's URL and token) and the push outbox's copies of an event and a
    # config, made by SQL from those rows: each copy names the same task and
    # version, or task, owner and config, so it opens as its source's.
    # The A2A rows name no ADK user: they keep the keyring key (per-user keys
    # do not apply; forgetting a user deletes them).
    *_col("a2a_tasks", ("body",), ("task_id",), ("task_id",), user=()),
    *_col("a2a_task_events", ("body",), ("task_id", "version"), ("task_id", "version"), user=()),
    *_col(
        "a2a_push_configs",
        ("body",),
        ("task_id", "owner", "config_id"),
        ("task_id", "owner", "config_id"),
        user=(),
    ),
    *_col("a2a_push_outbox", ("config",), ("task_id", "owner", "config_id"), ("pk",), user=()),
    *_col("a2a_push_outbox", ("body",), ("task_id", "version"), ("pk",), user=()),
    # An operator's repair of an unreadable event (docs/sessions.md): the audit
    # line's copies of the original as it was read and of the stand-in.
    *_col(
        "event_repairs",
        ("original", "replacement"),
        ("app_name", "user_id", "session_id", "seq", "event_id"),
        ("pk",),
    ),
    # An artifact's version number is chosen by the insert itself: its row is
    # named by its file and the digest of its bytes (equal digests: equal bytes).
    *_col(
        "artifacts",
        ("part", "custom_metadata"),
        ("app_name", "user_id", "session_id", "filename", "digest"),
        ("app_name", "user_id", "session_id", "filename", "version"),
    ),
)
"""Every encrypted column. Anything else (ids, statuses, times, who answered)
stays in clear: the ledger skeleton an operator reads without the key."""

STATE_COLUMNS: tuple[Column, ...] = (
    Column("app_state", "state", ("app_name", "key"), ("app_name",), "app_state t", (), True),
    Column(
        "user_state",
        "state",
        ("app_name", "user_id", "key"),
        ("app_name", "user_id"),
        "user_state t",
        ("t.app_name", "t.user_id"),
        True,
    ),
)
"""The shared ``app:`` and ``user:`` state: JSON objects the database merges key
by key (``||`` on PostgreSQL, ``dadk_merge`` on SQLite), so each value is sealed
on its own, with the row and the state key as associated data, and the object
stays an object (:func:`seal_state`, :func:`open_state`)."""

_BY_NAME = {c.name: c for c in (*COLUMNS, *STATE_COLUMNS)}

SEALED_PARAMS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "run_submit": ("runs", ("request",)),
    "run_submit_answer": ("runs", ("request",)),
    "run_start": ("runs", ("request",)),  # and the session it makes: see SEALED_TOO
    "run_park": ("dead_letters", ("last_events",)),
    "dead_letter_add": ("dead_letters", ("request", "last_events")),
    "dead_letter_add_once": ("dead_letters", ("request", "last_events")),
    "journal_done": ("journal", ("result",)),
    "journal_found": ("journal", ("result",)),
    "journal_resolve": ("journal", ("result",)),
    "job_create": ("jobs", ("request",)),
    "job_create_timer": ("jobs", ("request",)),
    "job_start": ("jobs", ("request",)),
    "append_events_job_start": ("jobs", ("request",)),
    "job_complete": ("jobs", ("result",)),
    "job_progress": ("jobs", ("progress",)),
    "saga_step_done": ("saga_steps", ("record",)),
    "artifact_save": ("artifacts", ("part", "custom_metadata")),
    "operator_action_record": ("operator_actions", ("detail",)),
    "run_operator_requeue": ("operator_actions", ("detail",)),
    "interrupt_open": ("interrupts", ("args",)),
}
"""The named units whose parameters carry encrypted columns under the columns' own
names, with the row's identity beside them: :meth:`Store.fetch` seals these. The
units that pack values into JSON, or name a row otherwise (events, an inbox, an
answer), seal them where they are made."""

SEALED_TOO: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "run_start": ("sessions", ("initial_state",)),
}
"""A second table a unit of :data:`SEALED_PARAMS` writes a sealed column of."""


def column(table: str, name: str) -> Column:
    """The encrypted column ``table.name`` (KeyError if it is not one)."""
    return _BY_NAME[f"{table}.{name}"]


def _aad(col: Column, identity: Sequence[Any]) -> bytes:
    if len(identity) != len(col.identity):
        raise ValueError(f"{col.name}: identity {col.identity} takes {len(col.identity)} values")
    return json.dumps([col.table, col.column, *(str(v) for v in identity)]).encode()


def envelope_key(value: object) -> str | None:
    """The key id a stored value is sealed under, or None for a clear value."""
    if not isinstance(value, str) or not value.startswith(MARK):
        return None
    key_id, _, _ = value[len(MARK) :].partition(":")
    return key_id


def _parts(value: str) -> tuple[str, str, str]:
    """(key id, table.column, payload) of an envelope."""
    key_id, _, rest = value[len(MARK) :].partition(":")
    tag, _, payload = rest.partition(":")
    return key_id, tag, payload


PLACEHOLDER_KEY = "durable_adk_encrypted"
"""The one key of :func:`placeholder`'s object."""


def placeholder(key_id: str) -> dict[str, Any]:
    """What a view without the key shows in place of a value (a JSON object)."""
    return {PLACEHOLDER_KEY: {"key_id": key_id, "note": f"key {key_id} not held by this process"}}


def placeholder_note(value: object) -> str | None:
    """The note of a :func:`placeholder` (parsed), or None for any other value."""
    if isinstance(value, dict) and set(value) == {PLACEHOLDER_KEY}:
        inner = value[PLACEHOLDER_KEY]
        return f"encrypted: {inner.get('note')}" if isinstance(inner, dict) else None
    return None


def _aead(secret: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # the crypto extra is missing
        raise errors.InvalidArgument(f"{CRYPTO_EXTRA} ({exc})") from exc
    return AESGCM(secret)


class Keyring:
    """The keys of a store: the first encrypts, every one decrypts.

    A key file holds one key a line, ``<key id> <32 bytes, base64>``, the
    newest first; blank lines and lines starting with ``#`` are skipped.
    ``durable-adk keys new ID`` prints such a line. Rotation: put the new key
    at the top of the file, restart the processes, run ``durable-adk keys
    rotate``; drop the old key's line once ``keys status`` shows no row on it.
    """

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        if not keys:
            raise errors.InvalidArgument("a keyring needs at least one key")
        seen: dict[str, Any] = {}
        for key_id, secret in keys:
            if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
                raise errors.InvalidArgument(
                    f"key id {key_id!r}: use 1-64 letters, digits, '_', '.' or '-'"
                )
            if key_id.startswith(USER_KEY_PREFIX):
                raise errors.InvalidArgument(
                    f"key id {key_id!r}: ids starting {USER_KEY_PREFIX!r} name users' data keys"
                )
            if key_id in seen:
                raise errors.InvalidArgument(f"key id {key_id!r} is given twice")
            if not isinstance(secret, bytes) or len(secret) != 32:
                raise errors.InvalidArgument(f"key {key_id!r}: a key is 32 bytes (AES-256)")
            seen[key_id] = _aead(secret)
        self._aeads = seen
        self.ids: tuple[str, ...] = tuple(seen)

    @property
    def primary(self) -> str:
        """The id of the key that encrypts."""
        return self.ids[0]

    def aead(self, key_id: str) -> Any | None:
        return self._aeads.get(key_id)

    @classmethod
    def from_text(cls, text: str, *, source: str = "key text") -> Keyring:
        """A keyring from a key file's text (see the class docstring).

        Raises:
            InvalidArgument: A line is not ``<id> <base64 of 32 bytes>``, an
                id repeats, or there is no key; the message names the line,
                never the key.
        """
        keys: list[tuple[str, bytes]] = []
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 2:
                raise errors.InvalidArgument(
                    f"{source}, line {number}: expected '<key id> <base64 key>'"
                )
            try:
                secret = base64.b64decode(parts[1], validate=True)
            except (binascii.Error, ValueError):
                raise errors.InvalidArgument(
                    f"{source}, line {number}: key {parts[0]!r} is not base64"
                ) from None
            keys.append((parts[0], secret))
        if not keys:
            raise errors.InvalidArgument(f"{source} holds no key")
        return cls(keys)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Keyring:
        """A keyring read from a key file (InvalidArgument naming the file if it is bad)."""
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise errors.InvalidArgument(f"key file {os.fspath(path)!r}: {exc.strerror}") from exc
        return cls.from_text(text, source=f"key file {os.fspath(path)!r}")

    @staticmethod
    def new_line(key_id: str) -> str:
        """A fresh key file line for ``key_id`` (32 random bytes)."""
        Keyring([(key_id, b"\0" * 32)])  # checks the id (and that the extra is there)
        return f"{key_id} {base64.b64encode(secrets.token_bytes(32)).decode()}"


def keyring_from_env() -> Keyring | None:
    """The keyring of the file ``DURABLE_ADK_KEY_FILE`` names, or None when unset."""
    path = os.environ.get(KEY_FILE_ENV)
    return Keyring.from_file(path) if path else None


class Codec:
    """Seals and opens column values with a keyring (and users' data keys).

    Users' data keys, once unwrapped, are kept in memory (``user_keys``:
    key id -> AEAD; ``user_refs``: (app, user) -> key id); a value sealed
    under a user key not in memory is opened after :meth:`load_user_key`.
    """

    def __init__(self, keyring: Keyring, *, per_user: bool = False) -> None:
        if not isinstance(keyring, Keyring):
            raise errors.InvalidArgument(f"keyring must be a Keyring, not {type(keyring).__name__}")
        self.keyring = keyring
        self.per_user = per_user
        self.user_keys: dict[str, Any] = {}
        self.user_refs: dict[tuple[str, str], str] = {}

    def seal(
        self, text: str | None, col: Column, identity: Sequence[Any], *, key_id: str | None = None
    ) -> str | None:
        """``text`` sealed for that row's column (None stays None)."""
        if text is None:
            return None
        kid = key_id or self.keyring.primary
        aead = self.user_keys.get(kid) if kid.startswith(USER_KEY_PREFIX) else None
        aead = aead or self.keyring.aead(kid)
        if aead is None:
            raise errors.KeyUnavailable(f"{col.name}: no key {kid!r} to seal with")
        nonce = secrets.token_bytes(_NONCE)
        sealed = aead.encrypt(nonce, text.encode(), _aad(col, identity))
        return f"{MARK}{kid}:{col.name}:{base64.b64encode(nonce + sealed).decode()}"

    def open(self, value: str | None, col: Column, identity: Sequence[Any]) -> str | None:
        """The clear text of a stored value (a clear value as it is).

        The column the value was sealed for is the one its envelope names
        (its associated data binds it): a dead letter's request, copied by
        SQL from its run, opens as the run's, with the same run id.

        Raises:
            KeyUnavailable: The value is sealed under a key this codec does
                not hold, or does not open under it (wrong key, moved to
                another row, damaged).
        """
        if not isinstance(value, str) or not value.startswith(MARK):
            return value
        key_id, tag, payload = _parts(value)
        sealed_for = _BY_NAME.get(tag)
        if sealed_for is None or len(sealed_for.identity) != len(col.identity):
            raise errors.KeyUnavailable(
                f"{col.name} {_ident(identity)}: the value is sealed for {tag!r}, not this column",
                key_id=key_id,
            )
        col = sealed_for
        aead = (
            self.user_keys.get(key_id)
            if key_id.startswith(USER_KEY_PREFIX)
            else self.keyring.aead(key_id)
        )
        if aead is None:
            raise errors.KeyUnavailable(_missing(col, key_id), key_id=key_id)
        try:
            raw = base64.b64decode(payload, validate=True)
            return str(aead.decrypt(raw[:_NONCE], raw[_NONCE:], _aad(col, identity)).decode())
        except Exception as exc:  # InvalidTag, bad base64, bad UTF-8: all "does not open"
            raise errors.KeyUnavailable(
                f"{col.name} {_ident(identity)}: the value sealed under key {key_id!r} does not "
                f"open ({type(exc).__name__}): a wrong key with that id, a value moved from "
                "another row, or damage; nothing was changed",
                key_id=key_id,
            ) from None

    def user_key_of(self, app_name: str, user_id: str) -> str | None:
        return self.user_refs.get((app_name, user_id))

    def wrap(self, ref: str, app_name: str, user_id: str, secret: bytes) -> tuple[str, str]:
        """(wrapping key id, wrapped text) of a user's data key."""
        aead = self.keyring.aead(self.keyring.primary)
        assert aead is not None
        nonce = secrets.token_bytes(_NONCE)
        aad = json.dumps(["user_keys", ref, app_name, user_id]).encode()
        return self.keyring.primary, base64.b64encode(
            nonce + aead.encrypt(nonce, secret, aad)
        ).decode()

    def unwrap(self, ref: str, app_name: str, user_id: str, wrap_key: str, wrapped: str) -> bytes:
        aead = self.keyring.aead(wrap_key)
        if aead is None:
            raise errors.KeyUnavailable(
                f"the data key {ref} of user {user_id!r} (app {app_name!r}) is wrapped under key "
                f"{wrap_key!r}, which this process does not hold",
                key_id=wrap_key,
            )
        raw = base64.b64decode(wrapped)
        aad = json.dumps(["user_keys", ref, app_name, user_id]).encode()
        try:
            return bytes(aead.decrypt(raw[:_NONCE], raw[_NONCE:], aad))
        except Exception:
            raise errors.KeyUnavailable(
                f"the data key {ref} of user {user_id!r} does not unwrap under key {wrap_key!r}",
                key_id=wrap_key,
            ) from None

    def remember(self, ref: str, app_name: str, user_id: str, secret: bytes) -> None:
        self.user_keys[ref] = _aead(secret)
        self.user_refs[(app_name, user_id)] = ref

    def forget(self, app_name: str, user_id: str) -> None:
        ref = self.user_refs.pop((app_name, user_id), None)
        if ref is not None:
            self.user_keys.pop(ref, None)


def _ident(identity: Sequence[Any]) -> str:
    return "(" + ", ".join(repr(str(v)) for v in identity) + ")"


def _missing(col: Column, key_id: str) -> str:
    if key_id.startswith(USER_KEY_PREFIX):
        return (
            f"{col.name}: the value is sealed under the user data key {key_id!r}, which is "
            "not in the store (destroyed by shred_user) or could not be loaded"
        )
    return (
        f"{col.name}: the value is sealed under key {key_id!r}, which this process does not "
        "hold: add it to the key file (DURABLE_ADK_KEY_FILE, --key-file); nothing was changed"
    )


async def user_key_id(store: Store, codec: Codec, app_name: str, user_id: str) -> str:
    """The id of a user's data key, made (and stored wrapped) on first use."""
    ref = codec.user_key_of(app_name, user_id)
    if ref is not None:
        return ref
    row = await store.fetchrow("user_key_get", {"app_name": app_name, "user_id": user_id})
    if row is None:
        fresh = USER_KEY_PREFIX + secrets.token_hex(12)
        secret = secrets.token_bytes(32)
        wrap_key, wrapped = codec.wrap(fresh, app_name, user_id, secret)
        row = await store.fetchrow(
            "user_key_put",
            {
                "app_name": app_name,
                "user_id": user_id,
                "key_ref": fresh,
                "wrap_key": wrap_key,
                "wrapped": wrapped,
            },
        )
        if row is None:  # another process made it first
            row = await store.fetchrow("user_key_get", {"app_name": app_name, "user_id": user_id})
        assert row is not None
    ref = str(row["key_ref"])
    secret = codec.unwrap(ref, app_name, user_id, str(row["wrap_key"]), str(row["wrapped"]))
    codec.remember(ref, app_name, user_id, secret)
    return ref


async def loaduser_key_id(store: Store, codec: Codec, ref: str) -> bool:
    """Loads a user data key by id into the codec; False if the store has none."""
    row = await store.fetchrow("user_key_by_ref", {"key_ref": ref})
    if row is None:
        return False
    secret = codec.unwrap(
        ref, str(row["app_name"]), str(row["user_id"]), str(row["wrap_key"]), str(row["wrapped"])
    )
    codec.remember(ref, str(row["app_name"]), str(row["user_id"]), secret)
    return True


async def seal_value(
    store: Store,
    table: str,
    name: str,
    identity: Sequence[Any],
    text: str | None,
    *,
    user: tuple[str, str] | None = None,
) -> str | None:
    """``text`` as the store keeps it in ``table.name`` of that row (clear with no codec).

    ``user`` (app, user id) seals under that user's data key when the codec
    has ``per_user`` and the column's rows name their user.
    """
    codec: Codec | None = getattr(store, "codec", None)
    if codec is None or text is None:
        return text
    col = column(table, name)
    key_id = None
    if codec.per_user and user is not None and col.user and user[1] is not None:
        key_id = await user_key_id(store, codec, str(user[0]), str(user[1]))
    return codec.seal(text, col, identity, key_id=key_id)


async def open_value(
    store: Store,
    table: str,
    name: str,
    identity: Sequence[Any],
    value: Any,
    *,
    strict: bool = False,
) -> Any:
    """The clear text of a value read from ``table.name`` (a clear value as it is).

    Within :func:`lenient_reads` (unless ``strict``) a value that does not
    open reads as its :func:`placeholder`, as JSON.

    Raises:
        KeyUnavailable: Sealed under a key this process does not hold (or the
            store has no codec), or it does not open; names the key id.
    """
    try:
        return await _open_value(store, table, name, identity, value)
    except errors.KeyUnavailable as exc:
        if strict or not _lenient.get():
            raise
        return json.dumps(placeholder(exc.key_id or "?"))


async def _open_value(
    store: Store, table: str, name: str, identity: Sequence[Any], value: Any
) -> Any:
    key_id = envelope_key(value)
    if key_id is None:
        return value
    col = column(table, name)
    codec: Codec | None = getattr(store, "codec", None)
    if codec is None:
        raise errors.KeyUnavailable(
            f"{col.name}: the value is sealed under key {key_id!r} and this process holds no "
            "keys: give the store a keyring (DURABLE_ADK_KEY_FILE, --key-file)",
            key_id=key_id,
        )
    if key_id.startswith(USER_KEY_PREFIX) and key_id not in codec.user_keys:
        await loaduser_key_id(store, codec, key_id)
    return codec.open(value, col, identity)


_lenient: ContextVar[bool] = ContextVar("durable_adk_lenient_reads", default=False)


@contextmanager
def lenient_reads() -> Iterator[None]:
    """Within it, a value whose key is not held reads as :func:`placeholder` (JSON).

    For views (dashboard, HTTP API, CLI listings), never for a run: a run
    that meets such a value fails it with KeyUnavailable.
    """
    token = _lenient.set(True)
    try:
        yield
    finally:
        _lenient.reset(token)


async def open_rows(store: Store, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Opens, in place, every sealed value of ``rows`` whose row names it.

    A sealed value is opened when its row carries the columns that name it
    (its envelope says which column it was sealed for); one whose row does
    not (an event read without its session's pk) is left for the caller,
    which opens it with :func:`open_value`. The store calls this on every
    row it returns.
    """
    for row in rows:
        for name, value in row.items():
            if type(value) is not str or not value.startswith(MARK):
                continue
            col = _BY_NAME.get(_parts(value)[1])
            if col is None or any(c not in row for c in col.identity):
                continue
            identity = [row[c] for c in col.identity]
            row[name] = await open_value(store, col.table, col.column, identity, value)
    return rows


async def seal_params(
    store: Store,
    table: str,
    params: dict[str, Any],
    *,
    names: Sequence[str] | None = None,
    user: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """Seals, in place, the encrypted columns of ``table`` that ``params`` carries.

    The row's identity is read from ``params`` under the columns' own names
    (``run_id``, ``job_id`` ...), its user from ``app_name``/``user_id``
    unless ``user`` is given. Returns ``params``. Does nothing without a codec.
    """
    if getattr(store, "codec", None) is None:
        return params
    for col in COLUMNS:
        if col.table != table or col.column not in params:
            continue
        if names is not None and col.column not in names:
            continue
        identity = [params[c] for c in col.identity]
        who = user
        if who is None and params.get("user_id") is not None:
            who = (str(params.get("app_name")), str(params["user_id"]))
        params[col.column] = await seal_value(
            store, table, col.column, identity, params[col.column], user=who
        )
    return params


def state_envelope(value: object, col: Column) -> bool:
    """Whether a state value is an envelope sealed for ``col`` (else a clear value)."""
    return isinstance(value, str) and value.startswith(MARK) and _parts(value)[1] == col.name


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


async def seal_state(
    store: Store, table: str, owner: Sequence[str], text: str | None
) -> str | None:
    """An ``app:``/``user:`` delta (a JSON object) with each value sealed, for ``table``.

    ``owner`` names the row: ``(app_name,)`` for ``app_state``,
    ``(app_name, user_id)`` for ``user_state``. Each value is sealed as its
    JSON text with ``(*owner, key)`` as its identity; the keys stay as they
    are, so the database merges the sealed delta into the stored object key
    by key. A user's state takes the user's data key with per-user keys.
    Clear (as given) without a codec.
    """
    codec: Codec | None = getattr(store, "codec", None)
    if codec is None or text is None:
        return text
    col = column(table, "state")
    values = json.loads(text)
    if not isinstance(values, dict):
        raise errors.InvalidArgument(f"{col.name}: a state delta is a JSON object")
    key_id = None
    if codec.per_user and col.user and len(owner) == 2:
        key_id = await user_key_id(store, codec, str(owner[0]), str(owner[1]))
    return _json_text(
        {k: codec.seal(_json_text(v), col, (*owner, k), key_id=key_id) for k, v in values.items()}
    )


async def open_state(
    store: Store, table: str, owner: Sequence[str], text: str | None
) -> str | None:
    """The shared state read from ``table`` with every sealed value opened (JSON text).

    A value not sealed (written before keys were turned on) is kept as it
    is. Within :func:`lenient_reads` a value that does not open reads as its
    :func:`placeholder`.

    Raises:
        KeyUnavailable: A value is sealed under a key this process does not
            hold, or does not open; names the key id and the state key.
    """
    if text is None or MARK not in text:
        return text
    values = json.loads(text)
    if not isinstance(values, dict):
        return text
    col = column(table, "state")
    opened: dict[str, Any] = {}
    for k, v in values.items():
        if state_envelope(v, col):
            v = json.loads(await open_value(store, table, "state", (*owner, k), v))
        opened[k] = v
    return _json_text(opened)

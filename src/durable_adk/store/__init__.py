"""One durable database for every layer: SQLite by default, PostgreSQL for fleets.

``open_store(url)`` opens it, verifies the schema (creating it in an empty
database) and closes it on exit::

    async with open_store("sqlite:///durable_adk.db") as store:
        now = await store.now()
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote

from durable_adk import errors
from durable_adk.limits import PayloadLimits
from durable_adk.store.base import Params, Row, Store
from durable_adk.store.migrate import check_schema, latest_version, upgrade
from durable_adk.store.sealing.codec import Codec, Keyring, keyring_from_env
from durable_adk.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from durable_adk.store.postgres import PostgresStore

DEFAULT_URL = "sqlite:///durable_adk.db"

__all__ = [
    "DEFAULT_URL",
    "Codec",
    "Keyring",
    "Params",
    "PostgresStore",
    "Row",
    "SqliteStore",
    "Store",
    "check_schema",
    "check_url",
    "connect",
    "latest_version",
    "open_store",
    "upgrade",
]


async def connect(
    url: str = DEFAULT_URL,
    *,
    limits: PayloadLimits | None = None,
    keyring: Keyring | None = None,
    per_user_keys: bool = False,
    **options: Any,
) -> Store:
    """Opens a store without checking its schema (for ``db upgrade`` and tools).

    Args:
        url: ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``,
            ``sqlite:///:memory:`` or ``postgresql://user@host:port/db``.
        limits: How deep and how large a value from outside may be before it
            is stored (default :data:`durable_adk.limits.DEFAULT_LIMITS`;
            docs/service.md, "Payload limits").
        keyring: The keys that seal the payload columns (docs/data.md,
            "Encryption at rest"); default: the key file
            ``DURABLE_ADK_KEY_FILE`` names, else none (values in clear).
        per_user_keys: Seal each user's rows under a data key of their own
            (needs a keyring), so :func:`~durable_adk.store.rotation.shred_user`
            can make them unreadable.
        **options: Backend options (``busy_timeout_ms`` for SQLite;
            ``min_size``/``max_size``, ``command_timeout`` (seconds, default
            10) and ``acquire_timeout`` (seconds, default 5) for PostgreSQL,
            whose URL may also carry the two timeouts:
            ``postgresql://u@h/db?command_timeout=5&acquire_timeout=2``).

    A SQLite URL is read as SQLAlchemy reads the ``sqlite+aiosqlite:///`` URLs
    ADK's ``DatabaseSessionService`` takes: the path is percent-decoded and
    the query string is never part of the file name. Its parameters:
    ``busy_timeout_ms=N`` (as the option of that name), ``timeout=S`` (the
    same in seconds, as ``sqlite3.connect`` takes it), ``mode=ro`` (open an
    existing database read-only: reads work, every write fails with
    StoreError and changes nothing), ``mode=rw`` (open an existing database,
    never create one), ``mode=rwc`` (the default), ``cache=private`` (the
    default) and ``uri=true`` (SQLAlchemy's switch for the two before).
    Anything else (``cache=shared``, ``mode=memory``, ``immutable=1``, an
    unknown name) is refused with the reason.

    Raises:
        UnsupportedUrl: The URL names another kind of database, or a SQLite
            URL carries a fragment, or a query parameter this store does not
            know or cannot apply.
        StoreUnavailable: The database cannot be reached (with ``mode=ro``
            or ``mode=rw``: there is no database file at that path).
    """
    if limits is not None and not isinstance(limits, PayloadLimits):
        raise errors.InvalidArgument(f"limits must be PayloadLimits, not {type(limits).__name__}")
    store: Store
    if url.startswith("sqlite:///"):
        store = _sqlite_store(url, options)
    else:
        check_url(url)
        store = _postgres_store_class()(url, **options)
    if limits is not None:
        store.limits = limits
    if keyring is None:
        keyring = keyring_from_env()
    if keyring is not None:
        store.codec = Codec(keyring, per_user=per_user_keys)
    elif per_user_keys:
        raise errors.InvalidArgument("per_user_keys needs a keyring")
    return await store.open()


def _sqlite_store(url: str, options: dict[str, Any]) -> SqliteStore:
    path, sqlite_options = _sqlite_target(url)
    mode = sqlite_options.get("mode")
    if mode is not None and not Path(path).is_file():
        raise errors.StoreUnavailable(
            f"{url!r}: mode={mode} opens an existing database, and there is none at {path}"
        )
    return SqliteStore(path, **{**sqlite_options, **options})


def check_url(url: str) -> None:
    """Checks a store URL as :func:`connect` reads it, without opening anything.

    Raises:
        UnsupportedUrl: What :func:`connect` would raise for the URL itself.
    """
    if url.startswith("sqlite:///"):
        _sqlite_target(url)
    elif not url.startswith(("postgresql://", "postgres://")):
        raise errors.UnsupportedUrl(
            f"unsupported store URL {url!r}: use sqlite:///path or postgresql://..."
        )


@asynccontextmanager
async def open_store(
    url: str = DEFAULT_URL,
    *,
    create_if_empty: bool = True,
    limits: PayloadLimits | None = None,
    keyring: Keyring | None = None,
    per_user_keys: bool = False,
    **options: Any,
) -> AsyncIterator[Store]:
    """Opens a store, verifies its schema and closes it on exit.

    ``limits`` bounds what is stored from outside; ``keyring`` and
    ``per_user_keys`` seal the payload columns (see :func:`connect`).

    An empty database gets the current schema. A database whose schema is behind
    raises :class:`~durable_adk.errors.SchemaBehind` naming
    ``durable-adk db upgrade``.
    """
    store = await connect(
        url, limits=limits, keyring=keyring, per_user_keys=per_user_keys, **options
    )
    try:
        await check_schema(store, create_if_empty=create_if_empty)
        yield store
    finally:
        await store.close()


SQLITE_URL_PARAMETERS = frozenset({"busy_timeout_ms", "timeout", "mode", "cache", "uri"})
"""The query parameters a ``sqlite:///`` URL may carry (see :func:`connect`)."""

_SQLITE_REFUSED = {
    "immutable": "it tells SQLite the file never changes, while workers append to it",
    "nolock": "it turns off the file locks that keep two writers apart",
    "vfs": "the store runs on SQLite's default file system layer only",
    "psow": "the store runs with SQLite's default write guarantees only",
    "modeof": "the store creates its file with the process's own permissions",
    "check_same_thread": "the store opens and manages its own connections",
    "isolation_level": "the store runs its own transactions",
    "detect_types": "the store reads its own columns",
    "cached_statements": "the store opens and manages its own connections",
    "factory": "the store opens and manages its own connections",
}
"""Parameters SQLite or SQLAlchemy know that cannot apply to a durable store, and why."""

_SQLITE_MODES = ("ro", "rw", "rwc")


def _sqlite_target(url: str) -> tuple[str, dict[str, Any]]:
    """The file and options a ``sqlite:///`` URL names, or UnsupportedUrl.

    The URL is read as SQLAlchemy reads ``sqlite+aiosqlite:///`` URLs (what
    ADK's ``DatabaseSessionService`` takes): the path is percent-decoded, and
    the query string holds options, never part of the file name. Each option
    is honoured or refused; none is ignored (a mistyped ``mdoe=ro`` must not
    open the database for writing).
    """
    rest = url.removeprefix("sqlite:///")
    if "#" in rest:
        raise errors.UnsupportedUrl(f"{url!r}: a SQLite store URL takes no '#' fragment")
    raw_path, _, query = rest.partition("?")
    path = unquote(raw_path)
    if not path:
        raise errors.UnsupportedUrl(f"{url!r} names no file: use sqlite:///path.db")
    given: dict[str, str] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name in given:
            raise errors.UnsupportedUrl(f"{url!r}: {name} is given twice")
        given[name] = value
    for name in given:
        if name in _SQLITE_REFUSED:
            raise errors.UnsupportedUrl(
                f"{url!r}: the SQLite URL parameter {name!r} cannot apply: {_SQLITE_REFUSED[name]}"
            )
        if name not in SQLITE_URL_PARAMETERS:
            raise errors.UnsupportedUrl(
                f"{url!r}: unknown SQLite URL parameter {name!r} (known: "
                f"{', '.join(sorted(SQLITE_URL_PARAMETERS))}): the query string is not "
                "part of the file name"
            )
    options: dict[str, Any] = {}
    if "busy_timeout_ms" in given and "timeout" in given:
        raise errors.UnsupportedUrl(f"{url!r}: give busy_timeout_ms or timeout, not both")
    if "busy_timeout_ms" in given:
        value = given["busy_timeout_ms"]
        if not value.isdigit():
            raise errors.UnsupportedUrl(f"{url!r}: busy_timeout_ms takes a whole number of ms")
        options["busy_timeout_ms"] = int(value)
    if "timeout" in given:
        try:
            seconds = float(given["timeout"])
        except ValueError:
            seconds = -1.0
        if not 0 <= seconds < 10**6:  # also refuses nan and inf
            raise errors.UnsupportedUrl(f"{url!r}: timeout takes a number of seconds")
        options["busy_timeout_ms"] = round(seconds * 1000)
    mode = given.get("mode", "rwc")
    if mode == "memory":
        raise errors.UnsupportedUrl(
            f"{url!r}: mode=memory cannot apply to a durable store; for a private "
            "in-memory database (tests) use sqlite:///:memory:"
        )
    if mode not in _SQLITE_MODES:
        raise errors.UnsupportedUrl(f"{url!r}: mode takes ro, rw or rwc, got {mode!r}")
    if mode != "rwc":
        if path == ":memory:":
            raise errors.UnsupportedUrl(f"{url!r}: mode={mode} needs a database file")
        options["mode"] = mode
    if given.get("cache", "private") != "private":
        raise errors.UnsupportedUrl(
            f"{url!r}: cache={given['cache']} cannot apply: shared-cache mode replaces the "
            "file locks the store's connections rely on (SQLite discourages it); "
            "cache=private is the default"
        )
    if given.get("uri", "true").lower() not in ("true", "1"):
        raise errors.UnsupportedUrl(
            f"{url!r}: uri={given['uri']} cannot apply: the store always reads mode and "
            "cache as SQLite URI parameters"
        )
    return path, options


def _postgres_store_class() -> type[PostgresStore]:
    """PostgresStore, imported on first use: asyncpg is the ``postgresql`` extra."""
    try:
        from durable_adk.store.postgres import PostgresStore
    except ImportError as exc:  # asyncpg missing
        raise errors.UnsupportedUrl(
            "PostgreSQL needs the asyncpg driver: install durable-adk with its postgresql "
            f"extra (pip install './durable-adk[postgresql]' from a checkout) ({exc})"
        ) from exc
    return PostgresStore


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":
        return _postgres_store_class()
    raise AttributeError(f"module 'durable_adk.store' has no attribute {name!r}")

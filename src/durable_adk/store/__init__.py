"""One durable database for every layer: SQLite by default, PostgreSQL for fleets.

``open_store(url)`` opens it, verifies the schema (creating it in an empty
database) and closes it on exit::

    async with open_store("sqlite:///durable_adk.db") as store:
        now = await store.now()
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from durable_adk import errors
from durable_adk.store.base import Params, Row, Store
from durable_adk.store.migrate import check_schema, latest_version, upgrade
from durable_adk.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from durable_adk.store.postgres import PostgresStore

DEFAULT_URL = "sqlite:///durable_adk.db"

__all__ = [
    "DEFAULT_URL",
    "Params",
    "PostgresStore",
    "Row",
    "SqliteStore",
    "Store",
    "check_schema",
    "connect",
    "latest_version",
    "open_store",
    "upgrade",
]


async def connect(url: str = DEFAULT_URL, **options: Any) -> Store:
    """Opens a store without checking its schema (for ``db upgrade`` and tools).

    Args:
        url: ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``,
            ``sqlite:///:memory:`` or ``postgresql://user@host:port/db``.
        **options: Backend options (``busy_timeout_ms`` for SQLite;
            ``min_size``/``max_size``, ``command_timeout`` (seconds, default
            10) and ``acquire_timeout`` (seconds, default 5) for PostgreSQL,
            whose URL may also carry the two timeouts:
            ``postgresql://u@h/db?command_timeout=5&acquire_timeout=2``).

    A SQLite URL may carry one query parameter, ``busy_timeout_ms=N`` (as the
    option of that name); any other (``mode=ro``, ``cache=shared``...) is
    refused, never taken as part of the file name.

    Raises:
        UnsupportedUrl: The URL names another kind of database, or a SQLite
            URL carries a query parameter or fragment this store does not know.
        StoreUnavailable: The database cannot be reached.
    """
    if url.startswith("sqlite:///"):
        path, sqlite_options = _sqlite_target(url)
        return await SqliteStore(path, **{**sqlite_options, **options}).open()
    if url.startswith(("postgresql://", "postgres://")):
        return await _postgres_store_class()(url, **options).open()
    raise errors.UnsupportedUrl(
        f"unsupported store URL {url!r}: use sqlite:///path or postgresql://..."
    )


@asynccontextmanager
async def open_store(
    url: str = DEFAULT_URL, *, create_if_empty: bool = True, **options: Any
) -> AsyncIterator[Store]:
    """Opens a store, verifies its schema and closes it on exit.

    An empty database gets the current schema. A database whose schema is behind
    raises :class:`~durable_adk.errors.SchemaBehind` naming
    ``durable-adk db upgrade``.
    """
    store = await connect(url, **options)
    try:
        await check_schema(store, create_if_empty=create_if_empty)
        yield store
    finally:
        await store.close()


SQLITE_URL_PARAMETERS = frozenset({"busy_timeout_ms"})
"""The query parameters a ``sqlite:///`` URL may carry."""


def _sqlite_target(url: str) -> tuple[str, dict[str, int]]:
    """The file and options a ``sqlite:///`` URL names, or UnsupportedUrl."""
    rest = url.removeprefix("sqlite:///")
    if "#" in rest:
        raise errors.UnsupportedUrl(f"{url!r}: a SQLite store URL takes no '#' fragment")
    path, _, query = rest.partition("?")
    if not path:
        raise errors.UnsupportedUrl(f"{url!r} names no file: use sqlite:///path.db")
    options: dict[str, int] = {}
    if query:
        for item in query.split("&"):
            name, sep, value = item.partition("=")
            if name not in SQLITE_URL_PARAMETERS:
                raise errors.UnsupportedUrl(
                    f"{url!r}: unknown SQLite URL parameter {name!r} (the only one is "
                    "busy_timeout_ms; read-only and shared-cache modes are not supported): "
                    "the query string is not part of the file name"
                )
            if not sep or not value.isdigit():
                raise errors.UnsupportedUrl(f"{url!r}: {name} takes a whole number of ms")
            options[name] = int(value)
    return path, options


def _postgres_store_class() -> type[PostgresStore]:
    """PostgresStore, imported on first use: asyncpg is the ``postgresql`` extra."""
    try:
        from durable_adk.store.postgres import PostgresStore
    except ImportError as exc:  # asyncpg missing
        raise errors.UnsupportedUrl(
            f"PostgreSQL needs the asyncpg driver: pip install 'durable-adk[postgresql]' ({exc})"
        ) from exc
    return PostgresStore


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":
        return _postgres_store_class()
    raise AttributeError(f"module 'durable_adk.store' has no attribute {name!r}")

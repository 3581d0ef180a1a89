"""Schema versions: create, check and upgrade.

A new, empty database gets the current schema in one step (``schema.sql``,
which a test keeps equal to all migrations applied in order). A database whose
version is older than this package's is never upgraded behind the operator's
back: opening it raises :class:`~durable_adk.errors.SchemaBehind`, which names
``durable-adk db upgrade``. Upgrades apply each numbered migration in its own
transaction and record it in ``schema_version``.
"""

from __future__ import annotations

from durable_adk import errors
from durable_adk.store.base import Store
from durable_adk.store.queries import list_migrations, load_sql_file


def latest_version(dialect: str) -> int:
    """The schema version this package expects."""
    return list_migrations(dialect)[-1][0]


async def create_schema(store: Store) -> None:
    """Creates the current schema in an empty database."""
    await store.run_script(load_sql_file(store.dialect, "schema.sql"))


async def check_schema(store: Store, *, create_if_empty: bool = True) -> int:
    """Verifies the schema version, creating the schema in an empty database.

    Args:
        store: An open store.
        create_if_empty: Create the schema when the database has none.

    Returns:
        The schema version.

    Raises:
        SchemaBehind: The database is older than this package.
        SchemaAhead: The database is newer than this package.
    """
    version = await store.schema_version()
    latest = latest_version(store.dialect)
    if version == 0 and create_if_empty:
        try:
            await create_schema(store)
        except errors.StoreError:
            # Another process created it first (both saw an empty database):
            # fine if the schema is now complete, an error otherwise.
            if await store.schema_version() != latest:
                raise
        return latest
    if version < latest:
        raise errors.SchemaBehind(
            f"the database at {redact(store.url)} has schema version {version}, this package "
            f"needs {latest}: run `durable-adk db upgrade --db {redact(store.url)}`"
        )
    if version > latest:
        raise errors.SchemaAhead(
            f"the database at {redact(store.url)} has schema version {version}, newer than "
            f"this package's {latest}: upgrade durable-adk"
        )
    return version


async def upgrade(store: Store) -> list[int]:
    """Applies every migration the database lacks, in order.

    Returns:
        The versions applied (empty when already current).
    """
    version = await store.schema_version()
    applied: list[int] = []
    for number, _name, sql in list_migrations(store.dialect):
        if number <= version:
            continue
        await store.run_script(sql)
        applied.append(number)
    return applied


def redact(url: str) -> str:
    """Hides the password in a database URL."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in credentials else url

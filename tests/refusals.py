"""Makes a write fail inside its unit, on either backend: a trigger that raises.

The tests that show a unit is atomic (a run's events with its finish, a
journaled call with its intent, a long-running call with its job) make one
part of the unit fail this way and check that nothing of it was written.
"""

from __future__ import annotations

from durable_adk.store import Store


async def refuse(store: Store, backend: str, name: str, event: str, when: str = "") -> None:
    """Installs trigger ``name``: every ``event`` (e.g. ``INSERT ON jobs``) raises.

    Args:
        when: A condition on ``NEW`` (SQL both dialects read alike), or "" for always.
    """
    if backend == "sqlite":
        condition = f"WHEN {when} " if when else ""
        await store.run_script(
            f"CREATE TRIGGER {name} BEFORE {event} {condition}"
            "BEGIN SELECT RAISE(ABORT, 'refused by test'); END;"
        )
    else:
        condition = f"WHEN ({when}) " if when else ""
        await store.run_script(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION 'refused by test'; END $$; "
            f"CREATE TRIGGER {name} BEFORE {event} FOR EACH ROW "
            f"{condition}EXECUTE FUNCTION {name}();"
        )

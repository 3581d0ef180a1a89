"""The pure parts of outage handling: the hosts a URL names, and which log lines go quiet.

The behaviour itself (runs waiting out a real outage, the two WARNING lines,
``/readyz``) is tested against real PostgreSQL servers in
``tests/chaos/test_outage.py`` and ``tests/chaos/test_failover.py``.
"""

from __future__ import annotations

import logging
import sys

from durable_adk import errors
from durable_adk.store.outage import quiet_during_outage
from durable_adk.store.postgres import _hosts


def test_each_host_of_a_url_is_named_with_its_port_and_the_target_attribute_dropped() -> None:
    userinfo, hosts, rest = _hosts(
        "postgresql://app:secret@db1:6432,db2/agents?target_session_attrs=read-write&sslmode=off"
    )
    assert userinfo == "app:secret@"
    assert hosts == [("db1", 6432), ("db2", 5432)]
    assert rest == "/agents?sslmode=off"
    assert _hosts("postgresql://db/x") == ("", [("db", 5432)], "/x")


def _record(exc: BaseException | None, level: int = logging.ERROR) -> logging.LogRecord:
    info = (type(exc), exc, None) if exc is not None else None
    return logging.LogRecord("lib", level, __file__, 1, "it failed: %s", ("x",), info)


def test_a_library_error_about_a_store_outage_goes_to_debug_without_its_traceback() -> None:
    wrapped = RuntimeError("Error in plugin")
    wrapped.__cause__ = errors.StoreUnavailable("connection refused")
    record = _record(wrapped)
    logging.getLogger("lib").setLevel(logging.DEBUG)
    assert quiet_during_outage(record, lambda e: isinstance(e.__cause__, errors.StoreUnavailable))
    assert record.levelno == logging.DEBUG and record.exc_info is None
    assert "it failed: x" in record.getMessage() and "RuntimeError" in record.getMessage()
    logging.getLogger("lib").setLevel(logging.WARNING)
    assert not quiet_during_outage(_record(wrapped), lambda _e: True)  # dropped: not shown


def test_any_other_error_keeps_its_level_and_traceback() -> None:
    try:
        raise ValueError("a bug")
    except ValueError:
        record = logging.LogRecord("lib", logging.ERROR, __file__, 1, "boom", None, sys.exc_info())
    assert quiet_during_outage(record, lambda e: isinstance(e, errors.StoreUnavailable))
    assert record.levelno == logging.ERROR and record.exc_info is not None
    plain = _record(None, logging.WARNING)
    assert quiet_during_outage(plain, lambda _e: True) and plain.levelno == logging.WARNING

"""The one rule for tests that need a PostgreSQL server of their own.

Without PostgreSQL's binaries a test skips, unless
``DURABLE_ADK_REQUIRE_POSTGRES=1`` (as CI sets) makes that a failure.
"""

from __future__ import annotations

import os

import pytest

from durable_adk.testing.pg_cluster import TempPostgres


def postgres_required() -> bool:
    """Whether a missing PostgreSQL fails the run instead of skipping (CI)."""
    return os.environ.get("DURABLE_ADK_REQUIRE_POSTGRES") == "1"


def postgres_or_skip() -> None:
    """Returns when PostgreSQL's binaries are here; skips (or, when required, fails) otherwise."""
    if TempPostgres.is_available():
        return
    if postgres_required():
        pytest.fail("PostgreSQL is required (DURABLE_ADK_REQUIRE_POSTGRES=1) but not installed")
    pytest.skip("PostgreSQL binaries not found")

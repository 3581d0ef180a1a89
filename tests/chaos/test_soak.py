"""The short chaos soak (about two minutes): every violation count must be 0.

The same soak as ``make chaos`` (see :mod:`durable_adk.testing.chaos`), bounded:
three ``durable-adk serve`` workers on a private PostgreSQL, a minute of runs
and faults (SIGKILL, SIGSTOP past the lease, PostgreSQL restarts), then the
verdict. The seed is fixed so a failure can be replayed; its output is printed
when it fails.

Partitions are left to ``make chaos`` and to the partition test in
test_zombies.py: a request a worker sent while its lease was valid can sit in
the cut network and reach the service after the takeover. The service dedupes
it by its idempotency key, but the soak counts it (rightly) as a second act and
a call after takeover; what would remove it (services refusing requests past
the sender's lease deadline) is not built yet (docs/testing.md, "Chaos soak").
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from durable_adk.testing.pg_cluster import TempPostgres

pytestmark = pytest.mark.slow

SEED = 20261201
ARGS = [
    "--duration", "60", "--workers", "3", "--runs", "60", "--tool-seconds", "1.5",
    "--faults", "kill,stop,pg",
]  # fmt: skip


def test_the_short_chaos_soak_finds_no_violation() -> None:
    if not TempPostgres.is_available():
        if os.environ.get("DURABLE_ADK_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is required (DURABLE_ADK_REQUIRE_POSTGRES=1) but not installed")
        pytest.skip("PostgreSQL binaries not found")
    soak = subprocess.run(
        [sys.executable, "-m", "durable_adk.testing.chaos", *ARGS, "--seed", str(SEED)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = soak.stdout + soak.stderr
    assert "chaos soak verdict" in output, output
    assert soak.returncode == 0, output
    assert "PASS: every violation count is 0" in output

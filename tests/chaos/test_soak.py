"""The short chaos soak (about two minutes): every violation count must be 0.

The same soak as ``make chaos`` (see :mod:`durable_adk.chaos.soak`), bounded:
three ``durable-adk serve`` workers on a private PostgreSQL, a minute of runs
and faults (SIGKILL, SIGSTOP past the lease, PostgreSQL restarts, a rolling
deploy step to a new app version, after which an old worker restarts, and, as
root, network partitions: the soak skips them with a notice otherwise), with a
quarter of the runs sleeping first on a durable timer, a fifth waiting for an
approval the soak answers through the workers' inbox API, some handed to a
saga (a third of those rolled back), some waiting for a long-running report
job the soak completes through the jobs API, and a schedule ticking every
5 s, then the verdict. The deploy is also a redeploy that changed the
charge's key template (``--rekey-from 1``): a run killed mid-charge that the
new code continues must be parked for drift, and a second charge of any order
under the new key, counted at the payments service, is a violation. The
seed is fixed so a failure can be replayed; its output is printed when it
fails.

A request a partitioned worker sent while its lease was valid can sit in the
cut network and reach a service after the takeover; the services refuse it
there by its fence headers (docs/journal.md, "Fencing at the outside
service"), and the verdict reports it as refused, not as a violation.
"""

from __future__ import annotations

import sys

import pytest

from children import run_child
from postgres_required import postgres_or_skip

pytestmark = pytest.mark.slow

SEED = 20261201
ARGS = [
    "--duration", "60", "--workers", "3", "--runs", "60", "--tool-seconds", "1.5",
    "--faults", "kill,stop,pg,partition,deploy", "--rekey-from", "1",
]  # fmt: skip


def test_the_short_chaos_soak_finds_no_violation() -> None:
    postgres_or_skip()
    soak = run_child(  # forked; the soak exec's its own workers
        [sys.executable, "-m", "durable_adk.chaos.soak", *ARGS, "--seed", str(SEED)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = soak.stdout + soak.stderr
    assert "chaos soak verdict" in output, output
    assert soak.returncode == 0, output
    assert "PASS: every violation count is 0" in output
    # Time and people were part of it: runs slept, ticks fired, approvals were
    # answered through the inbox (each checked by its own row).
    rows = {line[:34].strip(): line[34:] for line in output.splitlines() if len(line) > 34}
    for row in (
        "durable sleeps (timers)",
        "schedule ticks",
        "approvals (answered via inbox)",
        "report jobs (completed via API)",
    ):
        assert int(rows[row].split()[0]) > 0, output
    assert "COMMITTED" in rows["sagas (by final status)"], output
    assert "COMPENSATED" in rows["sagas (by final status)"], output
    # So was a deploy (this seed's third fault): runs were recorded under two versions.
    assert "1.0:" in rows["app versions (runs)"] and "1.1:" in rows["app versions (runs)"], output
    # After it, an old (1.0) worker was killed and started again mid-rollout: no tick of
    # 1.1's schedule was lost nor fired with 1.0's definition ("ticks of an old definition").
    assert "old worker restarts mid-rollout: SIGKILL" in output, output
    assert rows["ticks of an old definition"].split()[0] == "0", output

"""The data a run leaves behind: retention's purge and forgetting a user.

:mod:`.policy` holds :class:`RetentionPolicy`, how long an app keeps its
finished runs by how they ended, its idle sessions, and whether only the
payloads go (the ledger's skeleton kept). :mod:`.purge` deletes what a policy
lets go in short batches, each on an index, never anything a run under way,
an open job, an unfinished saga, an open interrupt or a pending schedule
firing still needs, and exactly once however many processes purge at a time.
:mod:`.forget` deletes one user's data in every table, audited first and
carried on by a retry after a crash. docs/data.md says what is kept and how.

May import: the ground floor (``errors``, ``faults``, ``limits``,
``metrics``), :mod:`durable_adk.store` and :mod:`durable_adk.tables`. Never
``google.adk``, never a package above it: the purge loop that runs a policy
in a worker lives in :mod:`durable_adk.adk.loops.background`.
"""

from __future__ import annotations

from durable_adk.lifecycle.forget import ForgetReport, forget_user
from durable_adk.lifecycle.policy import RetentionPolicy, parse_duration
from durable_adk.lifecycle.purge import PurgeReport, TableCount, known_apps, purge

__all__ = [
    "ForgetReport",
    "PurgeReport",
    "RetentionPolicy",
    "TableCount",
    "forget_user",
    "known_apps",
    "parse_duration",
    "purge",
]

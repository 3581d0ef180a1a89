"""A run's units against bare commits of the same bytes, and against the units before
issue 45's SQLite changes, side by side in one process.

Run from the repository root::

    .venv/bin/python -m bench.unit_cost [--rounds N] [--block N] [--before PATH] [--fewer-rows]

One DurableRunner run of ``bench.runner``'s app (one tool call, barrier commits:
four units) is recorded on each backend; each timed *replay* sends the same
store calls again with fresh ids, made before its block is timed
(:class:`bench.common.PreparedReplays`: swapping ids is the bench's own work).
Contenders, interleaved in blocks with their order rotated every round:

* ``ours``: the replay on our store (SQLite: WAL, synchronous=FULL, the units
  on the caller's thread; PostgreSQL: one statement per unit);
* ``bare``: one bare commit of each unit's bytes (:class:`bench.common.BareCommits`:
  a single autocommit INSERT of the unit's text parameters, through the driver
  alone), on a database of its own;
* PostgreSQL only: ``same rows`` (:class:`bench.common.PgSameRows`, the rows each
  unit wrote as one plain statement a unit) and ``our statements, asyncpg alone``
  (:class:`bench.common.DriverOnlyReplays`: our units' own statements and
  arguments, bound before the clock starts, on one asyncpg connection with none
  of our store's code): what the statements cost the client, apart from the
  store's call path;
* SQLite only, with ``--before PATH`` (a checkout's ``src`` folder, e.g. of
  the commit before issue 45's changes): ``before``, the replay on a store of
  the same code whose named queries are that checkout's SQL (the loader of
  today, with that tree's ``-- skip when :inbox`` markers dropped, as its
  loader dropped a fragment's markers): what the SQL changes alone moved.
* SQLite only, with ``--fewer-rows``: ``same rows, no session row``, the same
  rows without the updates of the session's row (``last_seq``,
  ``update_time``: what a fence kept on the events' own ``(session_pk, seq)``
  key would not write), and ``..., nor run row``, without the finish's update
  of the run's row either: what a unit writing fewer rows could save at most.

Reported: median wall and process CPU per replay (four units), and the ratios
of the medians per round (median over rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from bench.common import (
    BareCommits,
    DriverOnlyReplays,
    PgSameRows,
    PreparedReplays,
    RowChange,
    SameRows,
    Units,
    analyze_databases,
    fmt_ms,
    fmt_ratio,
    md_table,
    median,
    quiet,
    record_store_calls,
    rotate,
    unit_bytes,
)
from bench.runner import DurableContender
from durable_adk.store import Store, open_store
from durable_adk.store.queries import Query, expand_fragments, parse_queries, resolve_includes
from durable_adk.testing.pg_cluster import TempPostgres

BLOCKS_PER_ROUND = 4
"""Blocks of ``--block`` replays each contender runs per round (:func:`measure`)."""

FEWER_ROWS = {
    "same rows, no session row": ("sessions",),
    "same rows, nor run row": ("sessions", "runs"),
}
"""``--fewer-rows``: per contender, the tables whose row updates it leaves out."""


def without_updates(units: list[list[RowChange]], tables: Sequence[str]) -> list[list[RowChange]]:
    """The same rows, less the updates of rows of ``tables`` (their inserts stay)."""
    return [[c for c in unit if not (c.table in tables and c.key is not None)] for unit in units]


def queries_of(src: Path) -> dict[str, Query]:
    """The SQLite queries of another checkout's ``src``, parsed by today's loader."""
    folder = src / "durable_adk" / "sql" / "sqlite"
    files = sorted(
        p for p in folder.iterdir() if re.fullmatch(r"queries(_[a-z0-9_]+)?\.sql", p.name)
    )
    texts = [
        re.sub(r"^--\s*skip when\s+:inbox\s+IS\s+NULL\s*\n", "", p.read_text(), flags=re.M)
        for p in files
    ]
    merged: dict[str, Query] = {}
    for text in expand_fragments(texts):
        merged.update(parse_queries(text, "sqlite"))
    return resolve_includes(merged)


async def _record(store: Store) -> Units:
    contender = DurableContender(store.dialect, store, "barrier")
    await contender.run_once()  # warm
    return await record_store_calls(store, contender.run_once)


async def _time(
    action: Callable[[], Awaitable[None]], runs: int, wall: list[float], cpu: list[float]
) -> None:
    for _ in range(runs):
        c0, t0 = time.process_time(), time.perf_counter()
        await action()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)


def _prepare(action: Callable[[], Awaitable[None]], runs: int) -> None:
    """Makes a replay's fresh ids before its block is timed (:class:`PreparedReplays`)."""
    if isinstance(action, (PreparedReplays, SameRows, PgSameRows)):  # DriverOnlyReplays too
        action.prepare(runs)


async def measure(
    contenders: dict[str, Callable[[], Awaitable[None]]], rounds: int, block: int
) -> dict[str, list[tuple[float, float]]]:
    """Per contender, per round: (median wall, median CPU) of a replay."""
    names = list(contenders)
    for name in names:  # warm-up
        _prepare(contenders[name], 5)
        await _time(contenders[name], 5, [], [])
    out: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for rnd in range(rounds):
        samples = {n: ([], []) for n in names}
        for b in range(BLOCKS_PER_ROUND):
            for name in rotate(names, rnd + b):
                wall, cpu = samples[name]
                _prepare(contenders[name], block)
                await _time(contenders[name], block, wall, cpu)
        for name in names:
            wall, cpu = samples[name]
            out[name].append((median(wall), median(cpu)))
    return out


def table(backend: str, result: dict[str, list[tuple[float, float]]]) -> str:
    rows = []
    for name, per_round in result.items():
        wall = median([w for w, _ in per_round])
        cpu = median([c for _, c in per_round])
        vs_bare = median([w / b[0] for (w, _), b in zip(per_round, result["bare"], strict=True)])
        vs_bare_cpu = median(
            [c / b[1] for (_, c), b in zip(per_round, result["bare"], strict=True)]
        )
        rows.append(
            [backend, name, fmt_ms(wall), fmt_ms(cpu), fmt_ratio(vs_bare), fmt_ratio(vs_bare_cpu)]
        )
    if "same rows" in result:
        ratio = median(
            [o[0] / b[0] for o, b in zip(result["ours"], result["same rows"], strict=True)]
        )
        ratio_cpu = median(
            [o[1] / b[1] for o, b in zip(result["ours"], result["same rows"], strict=True)]
        )
        rows.append([backend, "ours / same rows", fmt_ratio(ratio), fmt_ratio(ratio_cpu), "", ""])
        for fewer in [n for n in result if n.startswith(("same rows, ", "our statements"))]:
            ratio = median(
                [f[0] / b[0] for f, b in zip(result[fewer], result["same rows"], strict=True)]
            )
            ratio_cpu = median(
                [f[1] / b[1] for f, b in zip(result[fewer], result["same rows"], strict=True)]
            )
            rows.append(
                [backend, f"{fewer} / same rows", fmt_ratio(ratio), fmt_ratio(ratio_cpu), "", ""]
            )
    if "before" in result:
        ratio = median([o[0] / b[0] for o, b in zip(result["ours"], result["before"], strict=True)])
        ratio_cpu = median(
            [o[1] / b[1] for o, b in zip(result["ours"], result["before"], strict=True)]
        )
        rows.append([backend, "ours / before", fmt_ratio(ratio), fmt_ratio(ratio_cpu), "", ""])
    return md_table(
        ["backend", "contender", "wall per replay", "CPU per replay", "wall / bare", "CPU / bare"],
        rows,
    )


async def run(args: argparse.Namespace) -> str:
    out = []
    with tempfile.TemporaryDirectory(prefix="dadk-bench-units-") as tmp, TempPostgres() as pg:
        for backend in ("sqlite", "postgresql"):
            async with contextlib.AsyncExitStack() as stack:
                url = (
                    f"sqlite:///{tmp}/ours.db"
                    if backend == "sqlite"
                    else pg.create_database("units_ours")
                )
                store = await stack.enter_async_context(open_store(url))
                units = await _record(store)
                bare = await BareCommits(
                    f"sqlite:///{tmp}/bare.db"
                    if backend == "sqlite"
                    else pg.create_database("units_bare")
                ).open()
                stack.push_async_callback(bare.close)
                payloads = [unit_bytes(p) for q, p in units if store.writes(q)]

                ours = PreparedReplays(store, units)

                async def bare_commits(
                    bare: BareCommits = bare, payloads: list[str] = payloads
                ) -> None:
                    for payload in payloads:
                        await bare.commit(payload)

                contenders: dict[str, Callable[[], Awaitable[None]]] = {
                    "ours": ours,
                    "bare": bare_commits,
                }
                if backend == "sqlite":
                    # The same rows, bare: captured on a store of their own, then
                    # written into another database of the same schema.
                    async with open_store(f"sqlite:///{tmp}/capture.db") as capture:
                        changes = await SameRows.capture(capture, units)
                    async with open_store(f"sqlite:///{tmp}/rows.db"):
                        pass  # the schema, migrated; the rows go in through sqlite3 alone
                    same = SameRows(f"{tmp}/rows.db", changes).open()
                    stack.callback(same.close)
                    contenders["same rows"] = same
                    if args.fewer_rows:
                        for name, tables in FEWER_ROWS.items():
                            path = f"{tmp}/rows-{len(contenders)}.db"
                            async with open_store(f"sqlite:///{path}"):
                                pass
                            fewer = SameRows(path, without_updates(changes, tables)).open()
                            stack.callback(fewer.close)
                            contenders[name] = fewer
                if backend == "postgresql":
                    # The same, on PostgreSQL: captured on a database of their own,
                    # written into another of the same schema as one statement a unit.
                    capture_url = pg.create_database("units_capture")
                    async with open_store(capture_url) as capture:
                        pg_changes = await PgSameRows.capture(capture, capture_url, units)
                    rows_url = pg.create_database("units_rows")
                    async with open_store(rows_url):
                        pass  # the schema, migrated; the rows go in through asyncpg alone
                    pg_same = await PgSameRows(rows_url, pg_changes).open()
                    stack.push_async_callback(pg_same.close)
                    contenders["same rows"] = pg_same
                    # Our units' own statements through asyncpg alone (no store code).
                    import asyncpg  # only this bench's PostgreSQL contenders need it

                    conn = await asyncpg.connect(url)
                    stack.push_async_callback(conn.close)
                    contenders["our statements, asyncpg alone"] = DriverOnlyReplays(
                        store, units, conn
                    )
                if backend == "sqlite" and args.before:
                    before = await stack.enter_async_context(
                        open_store(f"sqlite:///{tmp}/before.db")
                    )
                    before._queries = queries_of(Path(args.before))

                    contenders["before"] = PreparedReplays(before, units)
                if backend == "postgresql":
                    # As a database in service: the runs the timed replays will
                    # add made first (untimed), then analyzed (analyze_databases).
                    fill = args.rounds * BLOCKS_PER_ROUND * args.block
                    ours.prepare(fill)
                    for _ in range(fill):
                        await ours()
                    analyze_databases(pg)
                print(
                    f"{backend}: {len(payloads)} units per replay: {[q for q, _ in units]}",
                    flush=True,
                )
                result = await measure(contenders, args.rounds, args.block)
                text = table(backend, result)
                print(text, flush=True)
                out.append(text)
    return "\n\n".join(out)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.unit_cost", description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--block", type=int, default=25, help="replays per contender per block")
    p.add_argument("--before", help="another checkout's src folder (SQLite's SQL before)")
    p.add_argument(
        "--fewer-rows",
        action="store_true",
        help="SQLite: also the same rows without the session's and the run's row updates",
    )
    with quiet():
        asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    main()

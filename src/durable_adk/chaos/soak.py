"""The chaos soak: several ``durable-adk serve`` workers on one PostgreSQL, and faults.

``python -m durable_adk.chaos.soak --duration 600 --workers 3 --runs 200 --seed 7``
(``make chaos``) starts a private PostgreSQL (:class:`TempPostgres`), two fake
outside services (``payments`` and ``notifications``, real HTTP processes that
log every request before handling it) and ``--workers`` worker processes
serving :mod:`durable_adk.chaos.app` (two journaled effects per run,
every outside call tagged with worker, run and epoch). For ``--duration``
seconds it submits ``--runs`` runs over HTTP to random workers (about a third
of the sessions get a second run, queued behind the first; a share ``--naps``
of the runs, each in a session of its own, first sleeps 1 to 4 s on a durable
timer, so that faults meet timers being stored, due, woken and answered;
a share ``--approvals``, each in a session of its own, first waits for a
person: its run pauses on the ``approve_order`` long-running call, and the
soak's approver answers it 1 to 4 s later through a random worker's
``POST /v1/interrupts/{call_id}``, retrying until one answer is taken; a
share ``--sagas`` of the rest is handed to the app's saga, a third of them
out of stock, so that faults meet sagas mid-step and mid-compensation;
with ``--tick-every`` above 0 the app's ``tick`` schedule starts a run every
that many seconds on whichever worker claims it) and injects faults at
random, from a seeded generator whose choices are printed as they happen:

* ``kill``: SIGKILL a worker, then start it again;
* ``stop``: SIGSTOP a worker for 1.5 to 3 leases, then SIGCONT;
* ``deploy``: a rolling deploy step: the worker on the oldest app version is
  stopped with SIGTERM (it drains) and started on the newest version
  (then, once it is up, a worker still on an older version is SIGKILLed and
  started again on its old version: an old worker restarting mid-rollout,
  which must not rewrite the newer version's schedule; each version's
  ``tick`` schedule names its version in its message), which
  declares every earlier one compatible (``--app-version 1.<k>
  --compatible-version 1.0 ...``) and with one more tool, so its definition
  differs and every run it continues from 1.0 goes through the drift check
  (nothing it refers to is missing: a park would show as an unexpected
  ending); once every worker runs the newest, the next deploy starts version
  ``1.<k+1>``. With ``--rollout pinned`` (or ``alternate``) a new version
  serves only its own runs: the soak drains the older versions once a new
  worker is up, and keeps the last worker serving a version until its runs
  end. Old and new workers share the work meanwhile, and the verdict checks
  that no worker claimed a run of a newer version than its own, or of a
  version it does not serve;
* ``pg``: stop PostgreSQL (``fast`` or ``immediate``) for up to 3 s, then start it
  (after a failover: the promoted standby);
* ``failover``: the PostgreSQL primary runs with a synchronous standby and the
  workers on the two-host URL; SIGKILL of every primary process, the standby
  promoted 0.5 to 2 s later (once per soak: the old primary stays dead);
* ``partition`` (root only): cut the last worker, which runs in a network
  namespace of its own (:mod:`durable_adk.chaos.net`), off from
  PostgreSQL and the services for 1.5 to 3 leases, then heal. Without root or
  ``ip netns`` it is skipped with a notice.

Then every worker is resumed and healed, and the soak waits up to
``--settle`` seconds for every run to end, pauses the schedule through a
worker's HTTP API, and waits again for the runs of the last ticks; it stops the workers, reads the
ledger, an observer table that logged every claim with the database clock
(installed into the soak's own database only), the session logs and the
services' request logs, and prints the verdict of
:mod:`durable_adk.chaos.check` as a table. The exit code is 0 when every
violation count is 0, 1 otherwise, 2 when the soak could not run. Everything is
bounded: faults stop at ``--duration``, settling at ``--settle``, and all
processes are stopped at the end (``--keep`` keeps the folder with every log).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from durable_adk.chaos import app as chaos_app
from durable_adk.chaos.check import (
    TERMINAL,
    VIOLATIONS,
    Claim,
    Request,
    RunRow,
    SagaRow,
    TickRow,
    Verdict,
    event_row,
    judge,
    traced_sessions,
)
from durable_adk.chaos.failover import ReplicatedPostgres
from durable_adk.chaos.net import Namespace, partitions_available, relay_main
from durable_adk.store import open_store
from durable_adk.store.queries import load_queries, load_sql_file
from durable_adk.testing.pg_cluster import TempPostgres
from durable_adk.testing.services import FakeService

TOKEN = "chaos-soak-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
APP_SPEC = "durable_adk.chaos.app:app"
EVIDENCE_LOG_LINES = 80
"""How many worker log lines of the traced sessions' runs a failing verdict prints."""
FAULTS = ("kill", "stop", "pg", "partition", "deploy", "failover")
SERVICES = {"payments": chaos_app.PAYMENTS_ENV, "notifications": chaos_app.NOTIFY_ENV}


@dataclass(frozen=True)
class SoakConfig:
    """What one soak does.

    Attributes:
        duration: Seconds of submissions and faults.
        workers: Worker processes (at least 2; the last one is partitioned).
        runs: Runs submitted over the duration.
        seed: Seeds every random choice (printed).
        lease: The workers' run lease, seconds.
        sweep_interval: Seconds between the workers' recovery passes.
        tool_seconds: How long each tool works before calling out.
        faults: Which faults to inject.
        fault_gap: Seconds between faults, drawn between these bounds.
        settle: Seconds to wait, after the faults, for every run to end.
        naps: The share of runs that first sleep on a durable timer (0 to 1).
        nap_seconds: How long a napping run sleeps, drawn between these bounds.
        approvals: The share of runs that first wait for a person's approval (0 to 1).
        approval_delay: How long the approver waits before answering, drawn
            between these bounds (seconds after it first sees the call).
        sagas: The share of runs handed to the app's saga (0 to 1); a third
            of those are out of stock, so the saga rolls back.
        reports: The share of the runs neither napping, waiting for approval
            nor handed to the saga that first have a report built: a
            long-running job the soak completes 1 to 4 s after it appears,
            twice, through random workers' ``POST /v1/jobs/{job_id}/complete``.
        rollout: How ``deploy`` faults roll a new version out: ``compatible``
            (each new version continues every earlier one's runs),
            ``pinned`` (each serves only its own runs: the old versions are
            drained once a new worker is up, and the last worker serving a
            version stays until it has no open run) or ``alternate``
            (``1.1`` compatible, ``1.2`` pinned, ``1.3`` compatible...).
        drop_approvals_from: Versions ``1.<k>`` from this k on have no
            approval tool (0: none drops it): a compatible one that continues
            an older run paused on an approval must park it for drift, with
            no act of its order; the verdict counts those parks apart.
        rekey_from: Versions ``1.<k>`` from this k on journal ``charge``
            under another key template (0: none does): a redeploy that
            changed a key. One that continues an older run killed mid-charge
            must park it for drift; a second charge of an order under the new
            key is a doubled effect (counted per order at the payments
            service), and the verdict counts the parks apart.
        tick_every: The ``tick`` schedule's interval, seconds (0: no schedule).
        max_attempts: The workers' recovery claims before a run is parked.
            Each fault that meets a run costs it one (by design); with a
            fault every few seconds and leases of seconds a run can meet
            three in a row, which the library's default cap of 3 parks. The
            soak tests that no fault ends a run by itself, so its default is
            10 (``--max-attempts 3`` shows the cap at work).
        folder: Where the databases and logs go (None: a temporary folder).
        keep: Keep the folder afterwards.
    """

    duration: float = 120.0
    workers: int = 3
    runs: int = 40
    seed: int = 1
    lease: float = 3.0
    sweep_interval: float = 0.5
    tool_seconds: float = 0.3
    faults: tuple[str, ...] = FAULTS
    fault_gap: tuple[float, float] = (2.0, 6.0)
    settle: float = 90.0
    naps: float = 0.25
    nap_seconds: tuple[float, float] = (1.0, 4.0)
    approvals: float = 0.2
    approval_delay: tuple[float, float] = (1.0, 4.0)
    sagas: float = 0.3
    reports: float = 0.4
    rollout: str = "compatible"
    drop_approvals_from: int = 0
    rekey_from: int = 0
    tick_every: float = 5.0
    max_attempts: int = 10
    folder: Path | None = None
    keep: bool = False


@dataclass
class WorkerProc:
    """One worker process (a new one per restart: ``incarnation`` counts them)."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    url: str = ""
    incarnation: int = 1
    frozen: bool = False
    version: int = 0
    """Its app version is ``1.<version>``."""

    def alive(self) -> bool:
        return self.process.poll() is None


def serve_command(
    db: str,
    worker_id: str,
    *,
    lease: float,
    sweep_interval: float,
    port: int = 0,
    max_attempts: int = 3,
    version: int | None = None,
    pinned: bool = False,
) -> list[str]:
    """The ``durable-adk serve`` command line of one chaos worker.

    With ``version`` k, the worker serves app version ``1.k`` and continues
    the runs of every earlier one (``1.0`` to ``1.<k-1>``), or, ``pinned``,
    only its own.
    """
    versioned: list[str] = []
    if version is not None:
        versioned = ["--app-version", version_name(version)]
        for earlier in range(0 if pinned else version):
            versioned += ["--compatible-version", version_name(earlier)]
    return [
        sys.executable, "-m", "durable_adk.cli", "serve", APP_SPEC,
        "--db", db, "--port", str(port), "--token", TOKEN, "--worker-id", worker_id,
        "--lease", str(lease), "--sweep-interval", str(sweep_interval), "--drain-seconds", "1",
        "--max-attempts", str(max_attempts), *versioned,
    ]  # fmt: skip


def version_name(version: int) -> str:
    """The app version string of a chaos worker's version number."""
    return f"1.{version}"


def worker_env(
    worker_id: str,
    urls: dict[str, str],
    *,
    tool_seconds: float,
    marker_dir: Path | None = None,
    gate: bool = False,
    tick_every: float = 0.0,
    newer: bool = False,
    drop: bool = False,
    tick_of: str | None = None,
    rekey: bool = False,
) -> dict[str, str]:
    """The environment of one chaos worker: the services' URLs, its name, its tools' pace.

    ``gate`` (with ``marker_dir``) makes each tool wait for ``<marker>.go``
    before it calls out (see :mod:`durable_adk.chaos.app`);
    ``tick_every`` above 0 declares the app's ``tick`` schedule; ``newer``
    gives the app its newer definition (one more tool: another fingerprint);
    ``drop`` takes its approval tool away (drift for older paused runs);
    ``tick_of`` names the app version in the ``tick`` schedule's message;
    ``rekey`` changes its charge's key template (drift for older runs killed
    mid-charge).
    """
    env = {
        **os.environ,
        chaos_app.WORKER_ENV: worker_id,
        chaos_app.TOOL_SECONDS_ENV: str(tool_seconds),
        **{SERVICES[name]: url for name, url in urls.items()},
    }
    env.pop(chaos_app.TICK_EVERY_ENV, None)
    env.pop("DURABLE_ADK_APP_VERSION", None)  # versions come from the command line only
    env.pop(chaos_app.NEWER_ENV, None)
    env.pop(chaos_app.DROP_ENV, None)
    env.pop(chaos_app.REKEY_ENV, None)
    if rekey:
        env[chaos_app.REKEY_ENV] = "1"
    if drop:
        env[chaos_app.DROP_ENV] = "1"
    if newer:
        env[chaos_app.NEWER_ENV] = "1"
    env.pop(chaos_app.TICK_OF_ENV, None)
    if tick_every > 0:
        env[chaos_app.TICK_EVERY_ENV] = str(tick_every)
        if tick_of is not None:
            env[chaos_app.TICK_OF_ENV] = tick_of
    if marker_dir is not None:
        env[chaos_app.MARKER_DIR_ENV] = str(marker_dir)
        if gate:
            env[chaos_app.GATE_ENV] = "1"
    return env


def start_logged(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Starts a process whose stdout and stderr go to ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )


def wait_listening(process: subprocess.Popen[bytes], log: Path, timeout: float = 120.0) -> str:
    """Waits until a worker prints where it listens; returns its URL."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("listening on "):
                return line.split()[-1]
        if process.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"the worker did not start:\n{log.read_text(errors='replace')[-3000:]}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Soak:
    """One soak: its processes, its fault log and, at the end, its verdict."""

    config: SoakConfig
    say: Callable[[str], None] = print
    folder: Path = field(init=False)
    pg: TempPostgres = field(init=False)
    pair: ReplicatedPostgres | None = None
    """The primary and its synchronous standby, with ``failover`` among the faults."""
    db: str = field(init=False)
    services: dict[str, FakeService] = field(default_factory=dict)
    workers: list[WorkerProc] = field(default_factory=list)
    namespace: Namespace | None = None
    accepted: list[str] = field(default_factory=list)
    unanswered_submits: int = 0
    fault_log: list[str] = field(default_factory=list)
    fault_counts: Counter[str] = field(default_factory=Counter)
    versions: dict[str, int] = field(default_factory=dict)
    """The app version number of every worker id launched (``w1.2``: 0)."""
    newest: int = 0
    approvals_answered: int = 0
    reports_completed: int = 0
    """Report jobs a completion ended (``changed``; the repeat changes nothing)."""
    """Approvals the inbox took from the soak's approver (200 answers)."""
    _approver_stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _restarts: list[threading.Thread] = field(default_factory=list)
    _old_restarts: random.Random = field(default_factory=random.Random)
    """Which old worker restarts mid-rollout (seeded in setup: its own stream)."""
    _started: float = field(default_factory=time.monotonic)

    # ------------------------------------------------------------ setup

    def note(self, text: str) -> None:
        self.say(f"[{time.monotonic() - self._started:7.1f}s] {text}")

    def setup(self) -> None:
        cfg = self.config
        self._old_restarts = random.Random(f"{cfg.seed}-old-restarts")
        self.folder = cfg.folder or Path(tempfile.mkdtemp(prefix="dadk-chaos-"))
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o755)  # the PostgreSQL server's OS user walks through it
        if "failover" in cfg.faults:
            # A primary and a synchronous standby, the workers on the two-host URL.
            self.pair = ReplicatedPostgres(base_dir=self.folder).start()
            self.pg = self.pair.primary
            self.pair.create_database("chaos")
            self.db = self.pair.url("chaos")
        else:
            self.pg = TempPostgres(base_dir=self.folder).start()
            self.db = self.pg.create_database("chaos")
        asyncio.run(_install_observer(self.db))
        for name in SERVICES:
            self.services[name] = FakeService(name, self.folder / f"{name}.db", quiet=True).start()
        partition = "partition" in cfg.faults
        why = partitions_available() if partition else None
        if why is not None:
            self.note(f"notice: {why}")
        if partition and why is None:
            standby = [self.pair.standby_port] if self.pair is not None else []
            ports = [self.pg.port, *standby, *(s.port for s in self.services.values())]
            self.namespace = Namespace(
                f"dadk-chaos-{os.getpid()}", self.folder / "net", ports, [_free_port()]
            ).create()
        for index in range(cfg.workers):
            inside = self.namespace is not None and index == cfg.workers - 1
            self.workers.append(self._launch(f"w{index + 1}", 1, inside))
        for worker in self.workers:
            self._wait_listening(worker)
        where = ", ".join(
            f"{w.name} {w.url}{' (own network namespace)' if self._inside(w) else ''}"
            for w in self.workers
        )
        services = ", ".join(f"{n} {s.url}" for n, s in self.services.items())
        self.note(f"PostgreSQL on port {self.pg.port}; services {services}; workers {where}")

    def _inside(self, worker: WorkerProc) -> bool:
        return self.namespace is not None and worker.name == f"w{self.config.workers}"

    def _launch(self, name: str, incarnation: int, inside: bool, version: int = 0) -> WorkerProc:
        cfg = self.config
        worker_id = f"{name}.{incarnation}"
        self.versions[worker_id] = version
        port = self.namespace.inbound[0] if inside and self.namespace else 0
        command = serve_command(
            self.db,
            worker_id,
            lease=cfg.lease,
            sweep_interval=cfg.sweep_interval,
            port=port,
            max_attempts=cfg.max_attempts,
            version=version,
            pinned=self.pinned(version),
        )
        if inside and self.namespace:
            command = self.namespace.prefix() + command
        urls = {name: service.url for name, service in self.services.items()}
        env = worker_env(
            worker_id,
            urls,
            tool_seconds=cfg.tool_seconds,
            tick_every=cfg.tick_every,
            newer=version > 0,  # a deployed version's definition differs: drift is checked
            drop=self.dropped(version),
            tick_of=version_name(version),
            rekey=self.rekeyed(version),
        )
        log = self.folder / f"{worker_id}.log"
        process = start_logged(command, env, log)
        return WorkerProc(name, process, log, incarnation=incarnation, version=version)

    def pinned(self, version: int) -> bool:
        """Whether version ``1.<version>`` serves only its own runs (see ``rollout``)."""
        if version == 0:
            return True  # the first version has no earlier one to continue
        rollout = self.config.rollout
        return rollout == "pinned" or (rollout == "alternate" and version % 2 == 0)

    def rekeyed(self, version: int) -> bool:
        """Whether version ``1.<version>`` keys its charge anew (``rekey_from``)."""
        return 0 < self.config.rekey_from <= version

    def dropped(self, version: int) -> bool:
        """Whether version ``1.<version>`` has no approval tool (``drop_approvals_from``)."""
        return 0 < self.config.drop_approvals_from <= version

    def ready_urls(self) -> list[str]:
        """The URLs of the workers that are alive, not frozen, and listening."""
        with self._lock:
            return [w.url for w in self.workers if w.alive() and not w.frozen and w.url]

    def serves(self, version: int) -> frozenset[str]:
        """The app versions whose runs a worker of version ``1.<version>`` takes."""
        earlier = [] if self.pinned(version) else range(version)
        return frozenset(version_name(v) for v in (version, *earlier))

    def _wait_listening(self, worker: WorkerProc, timeout: float = 120.0) -> None:
        worker.url = wait_listening(worker.process, worker.log, timeout)

    # ------------------------------------------------------------ load

    def submit_all(self, until: float) -> None:
        """Submits every run, spread over the time until ``until`` (monotonic)."""
        cfg = self.config
        rng = random.Random(f"{cfg.seed}-submit")
        naps = random.Random(f"{cfg.seed}-naps")  # its own stream: the rest stays as it was
        approvals = random.Random(f"{cfg.seed}-approvals")
        sagas = random.Random(f"{cfg.seed}-sagas")
        reports = random.Random(f"{cfg.seed}-reports")
        runs = cfg.runs
        sessions = max(1, round(runs * 0.7))
        start = time.monotonic()
        for index in range(runs):
            due = start + (until - start) * index / runs
            time.sleep(max(0.0, due - time.monotonic()))
            order = f"ORD-{cfg.seed}-{index:04d}"
            message = f"Please charge order {order} and tell the customer."
            session = f"s{index % sessions:04d}"
            if naps.random() < cfg.naps:
                seconds = round(naps.uniform(*cfg.nap_seconds), 1)
                message, session = f"{message} nap {seconds:g}", f"nap{index:04d}"
            elif approvals.random() < cfg.approvals:
                message, session = f"{message} Only with approval.", f"apr{index:04d}"
            elif sagas.random() < cfg.sagas:
                stock = ", out of stock" if sagas.random() < 1 / 3 else ""
                message, session = f"{message} As a saga{stock}.", f"saga{index:04d}"
            elif reports.random() < cfg.reports:
                message, session = f"{message} Only with a report.", f"rep{index:04d}"
            self._submit(rng, session, order, message)

    def _looks(
        self, rng: random.Random, path: str, params: dict[str, str | int], field: str
    ) -> Iterator[tuple[list[str], list[dict[str, Any]]]]:
        """Every half second until the end, a random live worker's listing at ``path``.

        Yields the live workers' URLs and the listing's ``field``; a look that
        gets no answer (the worker is being killed, frozen or cut off) is skipped.
        """
        while not self._approver_stop.wait(0.5):
            urls = self.ready_urls()
            if not urls:
                continue
            try:
                listed = httpx.get(rng.choice(urls) + path, params=params, headers=AUTH, timeout=10)
            except httpx.HTTPError:
                continue
            if listed.status_code == 200:
                yield urls, list(listed.json().get(field, []))

    def complete_reports(self) -> None:
        """Completes each report job, a while after it appears, twice (a retrying webhook).

        Through random live workers' ``GET /v1/jobs?state=STARTED`` and
        ``POST /v1/jobs/{job_id}/complete``; the second completion (and any
        retry of a completion that got no answer) must change nothing.
        """
        cfg = self.config
        rng = random.Random(f"{cfg.seed}-reporter")
        due: dict[str, float] = {}
        sent: dict[str, int] = {}
        query: dict[str, str | int] = {"state": "STARTED", "limit": 500}
        for urls, items in self._looks(rng, "/v1/jobs", query, "items"):
            now = time.monotonic()
            for item in items:
                job_id = str(item.get("job_id"))
                if not job_id.startswith(chaos_app.REPORT_PREFIX) or sent.get(job_id, 0) >= 2:
                    continue
                if now < due.setdefault(job_id, now + rng.uniform(*cfg.approval_delay)):
                    continue
                body = {"state": "SUCCEEDED", "result": {"report": f"the report of {job_id}"}}
                quoted = urllib.parse.quote(job_id, safe="")
                for url in (rng.choice(urls), rng.choice(urls)):
                    try:
                        answer = httpx.post(
                            f"{url}/v1/jobs/{quoted}/complete", json=body, headers=AUTH, timeout=15
                        )
                    except httpx.HTTPError:
                        continue
                    if answer.status_code == 200:
                        sent[job_id] = sent.get(job_id, 0) + 1
                        if answer.json().get("changed"):
                            with self._lock:
                                self.reports_completed += 1

    def approve(self) -> None:
        """Answers each open ``approve_order`` call once, a while after it appears, until stopped.

        Through a random live worker's inbox API: ``GET /v1/interrupts`` then
        ``POST /v1/interrupts/{call_id}`` with ``{"approved": true}``. An
        answer that got no reply is tried again; the inbox's 409 (already
        answered) then says the first one was taken.
        """
        cfg = self.config
        rng = random.Random(f"{cfg.seed}-approver")
        due: dict[str, float] = {}
        answered: set[str] = set()
        query: dict[str, str | int] = {
            "app_name": chaos_app.APP_NAME,
            "kind": "long_running",
            "limit": 500,
        }
        for urls, items in self._looks(rng, "/v1/interrupts", query, "interrupts"):
            now = time.monotonic()
            url = rng.choice(urls)
            for item in items:
                call_id = str(item["call_id"])
                if item.get("name") != chaos_app.APPROVAL_TOOL or call_id in answered:
                    continue
                if now < due.setdefault(call_id, now + rng.uniform(*cfg.approval_delay)):
                    continue
                body = {
                    "by": "chaos-approver",
                    "payload": {"approved": True},
                    "session_id": item["session_id"],
                }
                try:
                    answer = httpx.post(
                        f"{url}/v1/interrupts/{call_id}", json=body, headers=AUTH, timeout=15
                    )
                except httpx.HTTPError:
                    continue  # it may have been taken: the next look says
                if answer.status_code in (200, 409):
                    answered.add(call_id)
                    if answer.status_code == 200:
                        with self._lock:
                            self.approvals_answered += 1

    def _submit(self, rng: random.Random, session: str, order: str, message: str) -> None:
        deadline = time.monotonic() + 60
        body = {"message": message}
        # Sent again until answered, always under the order's key: a send whose
        # answer was lost (its worker killed after the commit, the connection
        # cut) may be on the ledger, and the key makes the next send that run.
        headers = {**AUTH, "Idempotency-Key": f"submit-{order}"}
        while time.monotonic() < deadline:
            ready = self.ready_urls()
            if ready:
                url = rng.choice(ready) + f"/v1/users/chaos/sessions/{session}/runs"
                try:
                    answer = httpx.post(url, json=body, headers=headers, timeout=15)
                except httpx.TimeoutException:
                    self.unanswered_submits += 1  # may be on the ledger: the ledger says
                    continue
                except httpx.ConnectError:
                    answer = None  # not sent
                except httpx.HTTPError:
                    self.unanswered_submits += 1  # sent; its answer was lost
                    answer = None
                if answer is not None and answer.status_code in (200, 202):
                    with self._lock:
                        self.accepted.append(str(answer.json()["run"]["run_id"]))
                    return
            time.sleep(0.5)
        self.note(f"could not submit {order} within 60 s")

    # ------------------------------------------------------------ faults

    def inject_faults(self, until: float) -> None:
        """Injects random faults, one at a time, until ``until`` (monotonic)."""
        rng = random.Random(f"{self.config.seed}-faults")
        kinds = [k for k in self.config.faults if k != "partition" or self.namespace]
        low, high = self.config.fault_gap
        pending: list[str] = []
        while kinds:
            time.sleep(rng.uniform(low, high))
            if time.monotonic() >= until:
                return
            if not pending:  # each kind once per round, in a random order
                pending = rng.sample(kinds, len(kinds))
            kind = pending.pop()
            if getattr(self, f"_fault_{kind}")(rng) is False:  # could not be injected again
                kinds.remove(kind)
                continue
            self.fault_counts[kind] += 1

    def _victim(self, rng: random.Random) -> WorkerProc | None:
        with self._lock:
            live = [w for w in self.workers if w.alive() and w.url]
        return rng.choice(live) if live else None

    def _log_fault(self, text: str) -> None:
        self.fault_log.append(f"{time.monotonic() - self._started:7.1f}s {text}")
        self.note(text)

    def _fault_kill(self, rng: random.Random) -> None:
        victim = self._victim(rng)
        pause = rng.uniform(0.0, 2.0)
        if victim is None:
            self._log_fault("SIGKILL skipped: no worker is up")
            return
        self._log_fault(f"SIGKILL {victim.name}.{victim.incarnation}, restart after {pause:.1f}s")
        victim.process.kill()
        victim.process.wait()

        def restart() -> None:
            time.sleep(pause)
            self._restart(victim)

        # A worker takes seconds to start on a busy machine: the faults go on meanwhile.
        thread = threading.Thread(target=restart, daemon=True)
        thread.start()
        self._restarts.append(thread)

    def _restart(self, victim: WorkerProc, version: int | None = None) -> None:
        # Like a supervisor: a worker that cannot start (PostgreSQL is down or
        # starting up: serve exits) is started again, a few times. It comes
        # back on its own version, or on ``version`` (a deploy).
        incarnation = victim.incarnation
        version = victim.version if version is None else version
        for attempt in range(5):
            incarnation += 1
            fresh = self._launch(victim.name, incarnation, self._inside(victim), version)
            try:
                self._wait_listening(fresh)
            except RuntimeError:
                fresh.process.kill()
                fresh.process.wait()
                self.note(f"{victim.name}.{incarnation} did not start (attempt {attempt + 1})")
                time.sleep(2.0)
                continue
            with self._lock:
                self.workers[self.workers.index(victim)] = fresh
            return
        self.note(f"{victim.name} could not be restarted")

    def _fault_stop(self, rng: random.Random) -> None:
        victim = self._victim(rng)
        hold = rng.uniform(1.5, 3.0) * self.config.lease
        if victim is None:
            self._log_fault("SIGSTOP skipped: no worker is up")
            return
        self._log_fault(f"SIGSTOP {victim.name}.{victim.incarnation} for {hold:.1f}s")
        with self._lock:
            victim.frozen = True
        os.kill(victim.process.pid, signal.SIGSTOP)
        time.sleep(hold)
        os.kill(victim.process.pid, signal.SIGCONT)
        with self._lock:
            victim.frozen = False

    def _fault_deploy(self, rng: random.Random) -> None:
        with self._lock:
            live = [w for w in self.workers if w.alive() and w.url and not w.frozen]
            if live and all(w.version == self.newest for w in self.workers):
                self.newest += 1  # everyone is on the newest: the next rollout starts
            behind = [w for w in live if w.version < self.newest]
            newest = self.newest
        if behind and self.pinned(newest):
            behind = self._pinned_candidates(behind, newest)
        if not behind:
            self._log_fault("deploy skipped: no live worker is behind")
            return
        victim = rng.choice(behind)
        self._log_fault(
            f"deploy {victim.name}.{victim.incarnation}: {version_name(victim.version)} -> "
            f"{version_name(newest)} (SIGTERM, drain, start the new version)"
        )
        victim.process.terminate()
        try:
            victim.process.wait(30)
        except subprocess.TimeoutExpired:
            victim.process.kill()
            victim.process.wait()
        thread = threading.Thread(target=self._deploy_step, args=(victim, newest), daemon=True)
        thread.start()
        self._restarts.append(thread)

    def _deploy_step(self, victim: WorkerProc, newest: int) -> None:
        """Starts ``victim`` on the newest version, then restarts an old worker mid-rollout."""
        self._restart(victim, newest)
        time.sleep(2.0)  # the new version's worker has taken the schedules over by now
        self._restart_an_old_worker(newest)

    def _restart_an_old_worker(self, newest: int) -> None:
        """SIGKILLs a worker still on an older version and starts it again on that version.

        An old worker restarting mid-rollout (drained or not) must leave the
        newer version's schedules alone: a lost tick or a tick fired with the
        old definition is a violation ("ticks not fired once", "ticks of an
        old definition").
        """
        with self._lock:
            old = [
                w
                for w in self.workers
                if w.alive() and w.url and not w.frozen and w.version < newest
            ]
        if not old:
            self._log_fault("old worker restart skipped: no live worker is behind")
            return
        worker = self._old_restarts.choice(old)
        self._log_fault(
            f"old worker restarts mid-rollout: SIGKILL {worker.name}.{worker.incarnation} "
            f"({version_name(worker.version)}), start it again on {version_name(worker.version)}"
        )
        worker.process.kill()
        worker.process.wait()
        self._restart(worker)

    def _pinned_candidates(self, behind: list[WorkerProc], newest: int) -> list[WorkerProc]:
        """The workers a pinned rollout may replace now (draining the old versions first).

        Once a worker of the newest version is up, every older version is
        drained through the HTTP API (its workers start nothing new; its runs
        finish on them). A worker is replaced only when every version with
        open runs that it serves is also served by another worker: the last
        one serving a version stays until that version has no open run left.
        """
        with self._lock:
            workers = list(self.workers)
        if any(w.version == newest and w.alive() and w.url for w in workers):
            for version in sorted({w.version for w in workers if w.version < newest}):
                name = version_name(version)
                if self._version_call(f"/v1/versions/{name}/drain", post=True) is not None:
                    self._log_fault(f"drain {name} (pinned rollout of {version_name(newest)})")
        report = self._version_call("/v1/versions")
        open_runs = {
            str(v["version"]): sum(
                n for status, n in v["runs"].items() if status in ("QUEUED", "RUNNING", "PAUSED")
            )
            for v in (report or {}).get("versions", [])
        }
        chosen = []
        for worker in behind:
            others = set().union(*(self.serves(w.version) for w in workers if w is not worker))
            stranded = sorted(
                v
                for v in self.serves(worker.version) - others
                if open_runs.get(v, 1) > 0  # unknown counts as open
            )
            if stranded:
                self._log_fault(
                    f"deploy holds {worker.name}: the last worker serving {', '.join(stranded)} "
                    "stays while those have open runs"
                )
            else:
                chosen.append(worker)
        return chosen

    def _version_call(self, path: str, *, post: bool = False) -> dict[str, Any] | None:
        """``GET`` (or, an action, ``POST``) a versions route through a live worker."""
        urls = self.ready_urls()
        body = {"by": "chaos-soak", "reason": "pinned rollout"}
        for url in urls:
            try:
                if post:
                    answer = httpx.post(url + path, json=body, headers=AUTH, timeout=10)
                else:
                    answer = httpx.get(url + path, headers=AUTH, timeout=10)
            except httpx.HTTPError:
                continue
            if answer.status_code == 200:
                found = answer.json()
                return found if isinstance(found, dict) else None
        return None

    def _fault_pg(self, rng: random.Random) -> None:
        mode = rng.choice(["fast", "immediate"])
        down = rng.uniform(0.2, 3.0)
        self._log_fault(f"PostgreSQL stop ({mode}), down {down:.1f}s, start")
        if self.pair is not None:
            self.pair.restart(mode=mode, down=down)  # whichever is primary now
        else:
            restart_postgres(self.pg, mode=mode, down=down)

    def _fault_failover(self, rng: random.Random) -> bool:
        """SIGKILL of every primary process, then the synchronous standby promoted (once:
        False after that, and the soak injects no more failovers nor counts them)."""
        pair = self.pair
        if pair is None or pair.failed_over:
            self._log_fault("failover skipped: the standby was promoted already")
            return False
        wait = rng.uniform(0.5, 2.0)
        self._log_fault(f"failover: primary SIGKILLed, standby promoted after {wait:.1f}s")
        pair.kill_primary()
        time.sleep(wait)
        pair.promote()
        return True

    def _fault_partition(self, rng: random.Random) -> None:
        assert self.namespace is not None
        hold = rng.uniform(1.5, 3.0) * self.config.lease
        self._log_fault(f"partition w{self.config.workers} (netns lo down) for {hold:.1f}s")
        with self._lock:
            for worker in self.workers:
                worker.frozen = worker.frozen or self._inside(worker)
        self.namespace.link(up=False)
        time.sleep(hold)
        self.namespace.link(up=True)
        with self._lock:
            for worker in self.workers:
                worker.frozen = worker.frozen and not self._inside(worker)

    # ------------------------------------------------------------ the end

    def settle(self) -> None:
        """Every worker running and reachable, then wait for every run to end."""
        for thread in self._restarts:
            thread.join()
        with self._lock:
            workers = list(self.workers)
        for worker in workers:
            if worker.alive():
                os.kill(worker.process.pid, signal.SIGCONT)
            else:
                self._log_fault(f"{worker.name}.{worker.incarnation} was dead: restarted")
                self._restart(worker)
        if self.namespace is not None:
            self.namespace.link(up=True)
        deadline = time.monotonic() + self.config.settle
        while time.monotonic() < deadline:
            counts = self._status_counts()
            if counts is not None and sum(counts.values()) >= len(set(self.accepted)):
                # A sleeping run is PAUSED until its wake-up is answered, a run
                # waiting for approval until the approver's answer, one waiting
                # for its report until the job's result is resumed: the chaos app
                # pauses for nothing else, so settled means none left, except
                # the pauses whose answer was parked (one PAUSED run each: the
                # pause stays open for a person).
                busy = sum(n for s, n in counts.items() if s not in TERMINAL)
                paused = counts.get("PAUSED", 0) - counts.get("PARKED", 0)
                open_runs = busy + max(0, paused)
                if open_runs == 0:
                    self.note(f"settled: {counts}")
                    return
            time.sleep(1.0)
        self.note(f"settle time over: {self._status_counts()}")

    def pause_ticks(self) -> None:
        """Pauses the ``tick`` schedule through a worker's HTTP API (no tick fires after it)."""
        if self.config.tick_every <= 0:
            return
        body = {"by": "chaos-soak", "reason": "the soak ends"}
        path = f"/v1/schedules/{chaos_app.TICK_SCHEDULE}/pause"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with self._lock:
                urls = [w.url for w in self.workers if w.alive() and not self._inside(w)]
            for url in urls:
                try:
                    answer = httpx.post(url + path, json=body, headers=AUTH, timeout=10)
                except httpx.HTTPError:
                    continue
                if answer.status_code == 200:
                    self.note(f"schedule {chaos_app.TICK_SCHEDULE} paused")
                    return
            time.sleep(0.5)
        self.note(f"could not pause schedule {chaos_app.TICK_SCHEDULE} within 60 s")

    def _status_counts(self) -> dict[str, int] | None:
        with self._lock:
            urls = [w.url for w in self.workers if w.alive() and not self._inside(w)]
        for url in urls:
            try:
                answer = httpx.get(url + "/v1/runs-by-status", headers=AUTH, timeout=10)
                if answer.status_code == 200:
                    body = answer.json()
                    counts = body.get("counts", body) if isinstance(body, dict) else {}
                    return {str(k): int(v) for k, v in counts.items() if isinstance(v, int)}
            except httpx.HTTPError:
                continue
        return None

    def stop_workers(self) -> None:
        with self._lock:
            workers = list(self.workers)
        for worker in workers:
            if worker.alive():
                os.kill(worker.process.pid, signal.SIGCONT)
                worker.process.terminate()
        for worker in workers:
            try:
                worker.process.wait(30)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()

    def read_records(self) -> dict[str, Any]:
        records = asyncio.run(read_store(self.db))
        records["requests"] = [
            request
            for name, service in self.services.items()
            for request in read_log(name, service.url)
        ]
        return records

    def teardown(self) -> None:
        self.stop_workers()
        for service in self.services.values():
            service.stop()
        if self.namespace is not None:
            self.namespace.delete()
        if self.pair is not None:
            self.pair.stop()
        elif hasattr(self, "pg") and self.pg.running:
            self.pg.stop()
        if not self.config.keep and self.config.folder is None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def run(self) -> Verdict:
        """The whole soak: setup, load and faults, settle, verdict, teardown."""
        cfg = self.config
        self.say(
            f"chaos soak: seed {cfg.seed}, {cfg.workers} workers, {cfg.runs} runs, "
            f"{cfg.duration:.0f}s of faults ({', '.join(cfg.faults)}), lease {cfg.lease}s, "
            f"max attempts {cfg.max_attempts}, {cfg.naps:.0%} of runs nap first, "
            f"{cfg.approvals:.0%} wait for approval, {cfg.sagas:.0%} of the rest are sagas, "
            f"{cfg.reports:.0%} of the rest wait for a report job, "
            f"a tick every {cfg.tick_every:g}s, {cfg.rollout} rollouts"
        )
        try:
            self.setup()
            until = time.monotonic() + cfg.duration
            faults = threading.Thread(target=self.inject_faults, args=(until,), daemon=True)
            faults.start()
            approver = threading.Thread(target=self.approve, daemon=True)
            approver.start()
            reporter = threading.Thread(target=self.complete_reports, daemon=True)
            reporter.start()
            self.submit_all(until - cfg.duration * 0.25)
            faults.join()
            self.settle()
            self.pause_ticks()
            self.settle()  # the runs of the ticks fired before the pause
            self._approver_stop.set()
            approver.join()
            reporter.join()
            self.stop_workers()
            records = self.read_records()
            verdict = judge(
                accepted=self.accepted,
                tick_every=cfg.tick_every or None,
                versions={w: version_name(v) for w, v in self.versions.items()},
                serves={w: self.serves(v) for w, v in self.versions.items()},
                without_approvals=frozenset(
                    version_name(v) for v in set(self.versions.values()) if self.dropped(v)
                ),
                **records,
            )
            if verdict.violations:
                verdict.evidence += self.logged(verdict, records["runs"])
        finally:
            self.teardown()
        return verdict

    def logged(self, verdict: Verdict, runs: Sequence[RunRow]) -> list[str]:
        """The workers' log lines that name a run of a session the evidence traces."""
        traced = set(traced_sessions(verdict.findings))
        wanted = {run.run_id for run in runs if run.session_id in traced}
        out = []
        for log in sorted(self.folder.glob("w*.log")):
            for line in log.read_text(errors="replace").splitlines():
                if any(run_id in line for run_id in wanted):
                    out.append(f"  {log.stem}: {line[:300]}")
        if len(out) > EVIDENCE_LOG_LINES:
            out = [*out[:EVIDENCE_LOG_LINES], f"  ... and {len(out) - EVIDENCE_LOG_LINES} more"]
        return out


SQL_PACKAGE = "durable_adk.chaos"
"""Whose ``sql/<dialect>/`` holds the soak's own SQL (not the library's)."""


async def _install_observer(db: str) -> None:
    async with open_store(db) as store:
        await store.run_script(
            load_sql_file(store.dialect, "chaos_observer.sql", package=SQL_PACKAGE)
        )


async def install_observer(db: str) -> None:
    """Installs the observer trigger (claims logged with the database clock) into ``db``."""
    await _install_observer(db)


async def read_store(db: str, app_name: str = chaos_app.APP_NAME) -> dict[str, Any]:
    """The ledger's runs, the observer's claims and the sessions' events of ``app_name``."""
    async with open_store(db) as store:
        store.add_queries(load_queries(store.dialect, package=SQL_PACKAGE))
        runs = await store.fetch("chaos_runs", {"app_name": app_name})
        claims = await store.fetch("chaos_claims")
        events = await store.fetch("chaos_events", {"app_name": app_name})
        ticks = await store.fetch("chaos_ticks", {"app_name": app_name})
        sagas = await store.fetch("chaos_sagas", {"app_name": app_name})
    return {
        "sagas": [
            SagaRow(**{f.name: str(g[f.name]) for f in dataclasses.fields(SagaRow)}) for g in sagas
        ],
        "ticks": [
            TickRow(**{f.name: t[f.name] for f in dataclasses.fields(TickRow)}) for t in ticks
        ],
        "runs": [RunRow(**{f.name: r[f.name] for f in dataclasses.fields(RunRow)}) for r in runs],
        "claims": [
            Claim(str(c["run_id"]), int(c["epoch"]), c["owner"], str(c["status"]), float(c["at"]))
            for c in claims
        ],
        "events": [event_row(e) for e in events],
    }


def read_log(service: str, url: str) -> list[Request]:
    """Every request a fake service logged (``GET /_requests``, page by page)."""
    found: list[Request] = []
    since = 0
    while True:
        answer = httpx.get(f"{url}/_requests", params={"since": since, "limit": 1000}, timeout=30)
        answer.raise_for_status()
        body = answer.json()
        page = [Request.from_log(service, record) for record in body["requests"]]
        found.extend(page)
        if not body.get("more") or not page:
            return found
        since = page[-1].seq


def restart_postgres(pg: TempPostgres, *, mode: str, down: float) -> None:
    """Stops the server (``fast`` or ``immediate``), waits ``down`` seconds, starts it again.

    The data directory and the port stay; clients see their connections break
    and new ones refused while it is down.
    """
    pg._pg_ctl_stop(mode)  # a private helper of the cluster: same data, same port
    time.sleep(down)
    pg._run(
        [
            str(pg.bin_dir / "pg_ctl"), "start", "--pgdata", str(pg.data_dir),
            "--log", str(pg.log_path), "--wait", "--timeout", "60", "--silent",
        ],
        timeout=90,
    )  # fmt: skip


def print_verdict(soak: Soak, verdict: Verdict, say: Callable[[str], None] = print) -> None:
    """The final table: totals, faults, then each violation count with its evidence."""
    width = 34
    say("")
    say("=" * 60)
    say(f"chaos soak verdict (seed {soak.config.seed})")
    say("-" * 60)
    rows = [
        ("runs on the ledger", verdict.runs),
        ("runs accepted (202; 200 replayed)", verdict.accepted),
        ("submits with no answer", soak.unanswered_submits),
        ("terminal", f"{verdict.terminal} {dict(sorted(verdict.by_status.items()))}"),
        ("acts at the services", verdict.acts),
        ("durable sleeps (timers)", verdict.sleeps),
        ("sagas (by final status)", " ".join(f"{k}: {n}" for k, n in verdict.sagas.items())),
        ("report jobs (completed via API)", f"{verdict.reports} ({soak.reports_completed})"),
        ("approvals (answered via inbox)", f"{verdict.approvals} ({soak.approvals_answered})"),
        ("schedule ticks", verdict.ticks),
        ("app versions (runs)", " ".join(f"{v}: {n}" for v, n in sorted(verdict.versions.items()))),
        ("drives across versions", verdict.across_versions),
        ("parked for drift (by design)", verdict.drift_parks),
        ("refused as fenced (not acts)", len(verdict.fenced)),
        ("faults", f"{sum(soak.fault_counts.values())} {dict(sorted(soak.fault_counts.items()))}"),
    ]
    for name, value in rows:
        say(f"{name:<{width}}{value}")
    say("-" * 60)
    for name in VIOLATIONS:
        count = verdict.count(name)
        say(f"{name:<{width}}{count}{'' if count == 0 else '   <-- VIOLATION'}")
    say("=" * 60)
    for name in VIOLATIONS:
        for line in verdict.findings[name][:10]:
            say(f"  {name}: {line}")
        if verdict.count(name) > 10:
            say(f"  {name}: ... and {verdict.count(name) - 10} more")
    for line in verdict.fenced[:10]:
        say(f"  refused as fenced (information): {line}")
    if len(verdict.fenced) > 10:
        say(f"  refused as fenced (information): ... and {len(verdict.fenced) - 10} more")
    if verdict.evidence:
        say("evidence (the sessions named above, as the records hold them):")
        for line in verdict.evidence:
            say(line)
    say("PASS: every violation count is 0" if verdict.violations == 0 else "FAIL")


SHARES = {
    "naps": "share of runs that sleep first",
    "approvals": "share of runs that wait for a person's approval first",
    "sagas": "share of runs handed to the saga (a third of them roll back)",
    "reports": "share of the remaining runs that first wait for a report job",
}
"""The load's mix: each a share of the runs (0-1), a ``SoakConfig`` field and an option."""


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m durable_adk.chaos.soak", description=__doc__.split("\n\n")[0]
    )
    defaults = SoakConfig()
    parser.add_argument("--duration", type=float, default=defaults.duration)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--runs", type=int, default=defaults.runs)
    parser.add_argument("--seed", type=int, default=None, help="default: random, printed")
    parser.add_argument("--lease", type=float, default=defaults.lease)
    parser.add_argument("--tool-seconds", type=float, default=defaults.tool_seconds)
    parser.add_argument(
        "--faults", default=",".join(FAULTS), help="comma-separated: " + ",".join(FAULTS)
    )
    parser.add_argument("--settle", type=float, default=defaults.settle)
    for name, text in SHARES.items():
        parser.add_argument(
            f"--{name}", type=float, default=getattr(defaults, name), help=f"{text} (0-1)"
        )
    parser.add_argument(
        "--rollout",
        choices=("compatible", "pinned", "alternate"),
        default=defaults.rollout,
        help="deploys: new versions continue old runs, each only its own, or every other",
    )
    parser.add_argument(
        "--drop-approvals-from",
        type=int,
        default=defaults.drop_approvals_from,
        help="versions 1.K and later have no approval tool (0: never)",
    )
    parser.add_argument(
        "--rekey-from",
        type=int,
        default=defaults.rekey_from,
        help="versions 1.K and later key the charge anew (0: never)",
    )
    parser.add_argument(
        "--tick-every", type=float, default=defaults.tick_every, help="s between ticks (0: none)"
    )
    parser.add_argument("--max-attempts", type=int, default=defaults.max_attempts)
    parser.add_argument("--folder", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the folder with every log")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs a soak (or, as ``relay LISTEN=TARGET...``, one relay of the partition)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["relay"]:
        asyncio.run(relay_main(args_list[1:]))
        return 0
    args = _parse(args_list)
    faults = tuple(f for f in args.faults.split(",") if f)
    unknown = set(faults) - set(FAULTS)
    if (
        unknown
        or args.workers < 2
        or args.runs < 1
        or args.duration <= 0
        or args.max_attempts < 1
        or not all(0 <= getattr(args, name) <= 1 for name in SHARES)
        or not (args.tick_every == 0 or args.tick_every >= 1)
    ):
        print(
            f"bad arguments: faults {sorted(unknown)}, workers >= 2, runs >= 1, duration > 0, "
            "max-attempts >= 1, naps, approvals, sagas and reports between 0 and 1, "
            "tick-every 0 or >= 1"
        )
        return 2
    config = SoakConfig(
        duration=args.duration,
        workers=args.workers,
        runs=args.runs,
        seed=args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6),
        lease=args.lease,
        tool_seconds=args.tool_seconds,
        faults=faults,
        settle=args.settle,
        naps=args.naps,
        approvals=args.approvals,
        rollout=args.rollout,
        sagas=args.sagas,
        reports=args.reports,
        drop_approvals_from=args.drop_approvals_from,
        rekey_from=args.rekey_from,
        tick_every=args.tick_every,
        max_attempts=args.max_attempts,
        folder=args.folder,
        keep=args.keep,
    )
    soak = Soak(config, say=lambda text: print(text, flush=True))
    try:
        verdict = soak.run()
    except Exception as exc:
        print(f"the soak could not run: {type(exc).__name__}: {exc}", flush=True)
        return 2
    print_verdict(soak, verdict, say=lambda text: print(text, flush=True))
    if config.keep or config.folder is not None:
        print(f"logs kept in {soak.folder}")
    return 0 if verdict.violations == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""A PostgreSQL primary with a streaming standby, failed over as an operator would.

:class:`ReplicatedPostgres` starts a private primary
(:class:`~durable_adk.testing.pg_cluster.TempPostgres`), takes a base backup of
it for a standby (``pg_basebackup -R``: the standby follows the primary by
streaming replication) and starts the standby on a port of its own. With
``synchronous`` (the default) the primary then names the standby in
``synchronous_standby_names``: a commit is acknowledged only once the
standby has it, so a failover loses no acknowledged commit. Without it the
standby follows asynchronously: what the primary acknowledged in the last
moments before it died may be missing from the standby (the experiment of
``bench/failover_async.py``).

:meth:`ReplicatedPostgres.url` is the two-host URL workers use
(``postgresql://h1,h2/db?target_session_attrs=read-write``): the driver tries
each host in turn and keeps the one that takes writes. :meth:`kill_primary`
SIGKILLs every process of the primary (the machine is gone), :meth:`promote`
makes the standby the primary.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any, Self

from durable_adk.testing.pg_cluster import HOST, SUPERUSER, TempPostgres

STANDBY_NAME = "standby1"
"""The standby's ``application_name``, as the primary's ``synchronous_standby_names`` names it."""

REPLICATION_SETTINGS = {
    "wal_level": "replica",
    "max_wal_senders": "5",
    "wal_keep_size": "128MB",
    "hot_standby": "on",
    "wal_sender_timeout": "5s",
    "wal_receiver_status_interval": "1s",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class ReplicatedPostgres:
    """A primary and one standby (synchronous unless told otherwise), for tests and the soak."""

    def __init__(self, *, synchronous: bool = True, base_dir: Path | None = None) -> None:
        self.synchronous = synchronous
        self.primary = TempPostgres(settings=REPLICATION_SETTINGS, base_dir=base_dir)
        self.standby_port = 0
        self.standby_dir: Path | None = None
        self.promoted_at: float | None = None
        self.killed_at: float | None = None

    @property
    def primary_port(self) -> int:
        """The first host's port (the primary's, until a failover)."""
        return self.primary.port

    def start(self) -> Self:
        """Starts the primary, then the standby from a base backup of it; waits until it streams
        (and, synchronous, until the primary counts it as its synchronous standby)."""
        self.primary.start()
        try:
            self._start_standby()
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def create_database(self, name: str) -> None:
        """Creates database ``name`` on the primary (the standby gets it by replication)."""
        self.primary.create_database(name)

    def url(self, dbname: str) -> str:
        """The two-host URL of ``dbname``: the primary's host first, then the standby's."""
        return (
            f"postgresql://{SUPERUSER}@{HOST}:{self.primary_port},{HOST}:{self.standby_port}"
            f"/{dbname}?target_session_attrs=read-write"
        )

    def standby_url(self, dbname: str) -> str:
        """A URL of the standby alone."""
        return f"postgresql://{SUPERUSER}@{HOST}:{self.standby_port}/{dbname}"

    def kill_primary(self) -> None:
        """SIGKILLs the primary's postmaster and every backend: nothing of it is left to answer."""
        pid = self.primary._postmaster_pid()
        assert pid is not None, "the primary is not running"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.primary._is_our_postmaster(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.killed_at = time.monotonic()

    def promote(self) -> float:
        """Promotes the standby and waits until it takes writes; returns the monotonic time."""
        assert self.standby_dir is not None
        self._pg(["pg_ctl", "promote", "--pgdata", str(self.standby_dir), "--wait", "--silent"])
        self.promoted_at = time.monotonic()
        return self.promoted_at

    @property
    def failed_over(self) -> bool:
        """Whether the standby was promoted (it is the primary now; the old one is dead)."""
        return self.promoted_at is not None

    def restart(self, *, mode: str, down: float) -> None:
        """Stops the server that is primary now (``fast`` or ``immediate``), waits ``down``
        seconds, starts it again on the same port and data directory.

        Before a failover that is the primary; after it, the promoted standby (the old
        primary is never started again: it would come back as a second primary).
        """
        if not self.failed_over:
            pg = self.primary
            pg._pg_ctl_stop(mode)
            time.sleep(down)
            self._pg(
                ["pg_ctl", "start", "--pgdata", str(pg.data_dir), "--log", str(pg.log_path),
                 "--wait", "--timeout", "60", "--silent"],
            )  # fmt: skip
            return
        assert self.standby_dir is not None
        self._pg(["pg_ctl", "stop", "--pgdata", str(self.standby_dir), "--mode", mode, "--wait"])
        time.sleep(down)
        self._pg(
            ["pg_ctl", "start", "--pgdata", str(self.standby_dir),
             "--log", str(self.standby_dir / "standby.log"), "--wait", "--timeout", "60",
             "--silent"],
        )  # fmt: skip

    def stop(self) -> None:
        """Stops the standby (immediate) and the primary; removes both."""
        if self.standby_dir is not None and (self.standby_dir / "postmaster.pid").exists():
            self._pg(
                ["pg_ctl", "stop", "--pgdata", str(self.standby_dir), "--mode", "immediate"],
                check=False,
            )
        self.primary.stop()  # the standby's folder is inside the primary's: removed with it

    # ---------------------------------------------------------------- standby

    def _start_standby(self) -> None:
        primary = self.primary
        self.standby_dir = primary.base_dir / "standby"
        self.standby_port = _free_port()
        conninfo = (
            f"host={HOST} port={primary.port} user={SUPERUSER} application_name={STANDBY_NAME}"
        )
        self._pg(
            [
                "pg_basebackup", "--pgdata", str(self.standby_dir), "--write-recovery-conf",
                "--wal-method", "stream", "--checkpoint", "fast", "--no-sync",
                "--dbname", conninfo,
            ],
            timeout=180,
        )  # fmt: skip
        # The primary's managed settings came with the backup: the standby's own port.
        include = self.standby_dir / "durable_adk_temp.conf"
        lines = [
            line
            for line in include.read_text().splitlines()
            if not line.startswith(("port ", "unix_socket_directories "))
        ]
        lines += [f"port = '{self.standby_port}'", "unix_socket_directories = ''"]
        include.write_text("\n".join(lines) + "\n")
        self._chown(include)
        self._pg(
            [
                "pg_ctl", "start", "--pgdata", str(self.standby_dir),
                "--log", str(self.standby_dir / "standby.log"), "--wait", "--timeout", "60",
                "--silent",
            ],
            timeout=90,
        )  # fmt: skip
        if self.synchronous:
            primary._admin_execute(
                _sql(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
            )
            primary._admin_execute(_sql("SELECT pg_reload_conf()"))
        wanted = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + 60
        while True:
            rows = primary._admin_query(
                _sql(
                    "SELECT sync_state FROM pg_stat_replication "
                    f"WHERE application_name = '{STANDBY_NAME}' AND state = 'streaming'"
                )
            )
            if rows and rows[0][0] == wanted:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby did not become {wanted} (seen: {rows})")
            time.sleep(0.1)

    def _pg(self, args: list[str], *, timeout: float = 90, check: bool = True) -> Any:
        binary = str(self.primary.bin_dir / args[0])
        return self.primary._run([binary, *args[1:]], timeout=timeout, check=check)

    def _chown(self, path: Path) -> None:
        run_as = self.primary._run_as
        if run_as is not None and run_as.switch:
            os.chown(path, run_as.uid, run_as.gid)


def _sql(text: str) -> Any:
    from psycopg import sql

    return sql.SQL(text)

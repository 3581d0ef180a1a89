"""A throwaway PostgreSQL cluster for tests: :class:`TempPostgres`.

``TempPostgres`` runs ``initdb`` into a fresh temporary directory and starts a
private server on a free TCP port of 127.0.0.1, so tests exercise a real
PostgreSQL without touching any server already on the machine.

What it guarantees:

* **Isolation.** Every instance has its own data directory, its own port and
  its own Unix-socket directory; nothing is shared with another instance, with
  a packaged cluster (such as Debian's ``main`` cluster on port 5432) or with
  another test process. The port is picked free and, if another process takes
  it first, the start is retried on a new one.
* **Readiness.** :meth:`TempPostgres.start` returns only once the server
  accepts connections (``pg_ctl start --wait``); a server that fails to start
  raises :class:`TempPostgresStartError` with the tail of the server log, and
  leaves nothing behind.
* **Cleanup.** :meth:`TempPostgres.stop` shuts the server down (``fast`` mode,
  escalating to ``immediate`` and then ``SIGKILL``) and removes the temporary
  directory. A cluster still running when the interpreter exits is stopped by
  an :mod:`atexit` hook, so a crashed or interrupted test run does not leak
  servers (a process killed with ``SIGKILL`` cannot run any hook).
* **Root safety.** ``initdb`` and ``postgres`` refuse to run as root. When the
  current process is root, the server runs as the unprivileged ``postgres``
  OS user (created by Debian's ``postgresql`` package), which owns the
  temporary directory; if that user does not exist, :meth:`TempPostgres.start`
  fails with a clear error. Otherwise the server runs as the current user.
* **Realistic durability.** ``fsync`` and ``synchronous_commit`` stay on.
  Authentication is ``trust`` for local TCP connections; the superuser is
  ``postgres`` whatever the OS user.
* **No SQL injection.** Database names must match
  ``^[a-z_][a-z0-9_]{0,62}$`` and are quoted as identifiers; anything else is
  rejected with :class:`ValueError` before any SQL is sent.

The server binaries are found, in order, from the ``DURABLE_ADK_PG_BIN``
environment variable, ``pg_config --bindir``, the newest
``/usr/lib/postgresql/*/bin`` and finally ``pg_ctl`` on ``PATH``.

Database administration (:meth:`TempPostgres.create_database`,
:meth:`TempPostgres.drop_database`) uses a synchronous :mod:`psycopg`
connection, so it can be called from synchronous and ``async`` tests alike.

Example:
    >>> with TempPostgres() as pg:  # doctest: +SKIP
    ...     url = pg.create_database("app_test")
    ...     # connect to url with asyncpg, psycopg, SQLAlchemy, ...
"""

from __future__ import annotations

import atexit
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

__all__ = [
    "PG_BIN_ENV",
    "TempPostgres",
    "TempPostgresError",
    "TempPostgresNotFound",
    "TempPostgresStartError",
    "validate_database_name",
]

PG_BIN_ENV = "DURABLE_ADK_PG_BIN"
"""Environment variable naming the directory that holds ``initdb``, ``pg_ctl`` and ``postgres``."""

SUPERUSER = "postgres"
"""Name of the database superuser created by ``initdb``."""

HOST = "127.0.0.1"
"""The only address the temporary server listens on."""

_REQUIRED_BINARIES = ("initdb", "pg_ctl", "postgres")
_DEBIAN_BIN_GLOB = "/usr/lib/postgresql/*/bin"
_DB_NAME_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_SETTING_NAME_RE = re.compile(r"[a-z_][a-z0-9_.]*")
_PROTECTED_DATABASES = frozenset({"postgres", "template0", "template1"})
_MANAGED_SETTINGS = frozenset({"port", "listen_addresses", "unix_socket_directories"})
_DEFAULT_SETTINGS: Mapping[str, str] = {
    "max_connections": "200",
    "shared_buffers": "128MB",
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
}
# sockaddr_un.sun_path is 108 bytes on Linux, including the trailing NUL.
_MAX_SOCKET_PATH = 107
_SOCKET_FILE_TEMPLATE = ".s.PGSQL.{port}"
_START_ATTEMPTS = 5
_OBJECT_IN_USE_RETRY_SECONDS = 5.0
_CONF_INCLUDE_NAME = "durable_adk_temp.conf"


class TempPostgresError(RuntimeError):
    """A temporary PostgreSQL cluster could not be set up, used or torn down."""


class TempPostgresNotFound(TempPostgresError):
    """The PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found."""


class TempPostgresStartError(TempPostgresError):
    """The temporary PostgreSQL server failed to initialise or start."""


def validate_database_name(name: object) -> str:
    """Checks that ``name`` is a safe, unquoted-style PostgreSQL database name.

    Args:
        name: The candidate name.

    Returns:
        The name, unchanged.

    Raises:
        ValueError: If ``name`` is not a string matching ``^[a-z_][a-z0-9_]{0,62}$``.
    """
    if not isinstance(name, str) or _DB_NAME_RE.fullmatch(name) is None:
        raise ValueError(f"invalid database name {name!r}: it must match ^[a-z_][a-z0-9_]{{0,62}}$")
    return name


def _version_key(bin_dir: Path) -> tuple[int, ...] | None:
    """Turns ``/usr/lib/postgresql/15/bin`` into ``(15,)``; ``None`` if not a version."""
    try:
        return tuple(int(part) for part in bin_dir.parent.name.split("."))
    except ValueError:
        return None


def _has_binaries(bin_dir: Path) -> bool:
    return all(os.access(bin_dir / name, os.X_OK) for name in _REQUIRED_BINARIES)


def _pg_config_bindir() -> Path | None:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None
    try:
        result = subprocess.run(
            [pg_config, "--bindir"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    output = result.stdout.strip()
    if result.returncode != 0 or not output:
        return None
    return Path(output)


def _child_env() -> dict[str, str]:
    """The environment for server processes: no ``PG*`` variables, C messages."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    return env


def _conf_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class _RunAs:
    """The OS identity that server processes run under."""

    def __init__(self, uid: int, gid: int, name: str, switch: bool) -> None:
        self.uid = uid
        self.gid = gid
        self.name = name
        self.switch = switch

    @classmethod
    def resolve(cls, os_user: str | None) -> _RunAs:
        euid = os.geteuid()
        if euid == 0:
            name = os_user or "postgres"
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                raise TempPostgresStartError(
                    f"running as root, and PostgreSQL refuses to run as root, but the OS user "
                    f"{name!r} to run the server as does not exist. Install Debian's "
                    f"'postgresql' package (it creates the 'postgres' user) or create an "
                    f"unprivileged user, e.g. 'useradd --system {name}'."
                ) from None
            if entry.pw_uid == 0:
                raise TempPostgresStartError(
                    f"OS user {name!r} has uid 0; PostgreSQL must run as an unprivileged user"
                )
            return cls(entry.pw_uid, entry.pw_gid, name, switch=True)
        current = pwd.getpwuid(euid)
        if os_user is not None and os_user != current.pw_name:
            raise TempPostgresStartError(
                f"cannot run the server as {os_user!r}: only root can switch users "
                f"(current user is {current.pw_name!r})"
            )
        return cls(euid, os.getegid(), current.pw_name, switch=False)

    def popen_kwargs(self) -> dict[str, Any]:
        if not self.switch:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


# Clusters started by this process that have not been stopped yet; the atexit
# hook stops them. Strong references on purpose: a cluster must not be garbage
# collected while its server is still running.
_LIVE: set[TempPostgres] = set()
_LIVE_LOCK = threading.Lock()
_ATEXIT_REGISTERED = False


def _stop_live_clusters() -> None:
    with _LIVE_LOCK:
        clusters = list(_LIVE)
    for cluster in clusters:
        if cluster.owner_pid != os.getpid():
            # A forked child must not stop its parent's server.
            continue
        try:
            cluster.stop()
        except Exception as exc:  # pragma: no cover - best effort at exit
            print(f"durable_adk: could not stop {cluster!r}: {exc}", file=sys.stderr)


def _track(cluster: TempPostgres) -> None:
    global _ATEXIT_REGISTERED
    with _LIVE_LOCK:
        if not _ATEXIT_REGISTERED:
            atexit.register(_stop_live_clusters)
            _ATEXIT_REGISTERED = True
        _LIVE.add(cluster)


def _untrack(cluster: TempPostgres) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(cluster)


class TempPostgres:
    """A private PostgreSQL server in a temporary directory, for tests.

    Create it, then call :meth:`start` (or use it as a context manager), and
    :meth:`stop` when done. Connection URLs have the form
    ``postgresql://postgres@127.0.0.1:PORT/DBNAME`` and need no password.

    Attributes:
        owner_pid: The id of the process that started the server; only that
            process's exit hook stops it.
    """

    def __init__(
        self,
        *,
        bin_dir: str | os.PathLike[str] | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        os_user: str | None = None,
        settings: Mapping[str, str | int] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        """Configures a cluster; nothing is created until :meth:`start`.

        Args:
            bin_dir: Directory holding ``initdb``, ``pg_ctl`` and ``postgres``.
                Defaults to :meth:`find_bin_dir`.
            base_dir: Parent directory for the temporary directory. Defaults
                to the system temporary directory. When running as root it
                must be traversable by the server's OS user.
            os_user: OS user to run the server as when the current process
                is root (default ``postgres``). When not root it must be
                ``None`` or the current user.
            settings: Extra server settings (``postgresql.conf`` names and
                values), overriding the defaults (``max_connections=200``,
                ``shared_buffers=128MB``, ``fsync=on``,
                ``synchronous_commit=on``). ``port``, ``listen_addresses``
                and ``unix_socket_directories`` are managed and cannot be set.
            start_timeout: Seconds to wait for the server to accept
                connections, and for it to shut down.

        Raises:
            ValueError: If a setting name is managed or malformed, or a value
                contains a line break or NUL.
        """
        self._bin_dir_arg = Path(bin_dir) if bin_dir is not None else None
        self._base_parent = Path(base_dir) if base_dir is not None else None
        self._os_user = os_user
        self._start_timeout = start_timeout
        self._settings: dict[str, str] = dict(_DEFAULT_SETTINGS)
        for name, value in (settings or {}).items():
            if _SETTING_NAME_RE.fullmatch(name) is None:
                raise ValueError(f"invalid server setting name {name!r}")
            if name in _MANAGED_SETTINGS:
                raise ValueError(f"server setting {name!r} is managed by TempPostgres")
            text = str(value)
            if any(ch in text for ch in "\r\n\0"):
                raise ValueError(f"server setting {name!r} has a line break or NUL in its value")
            self._settings[name] = text
        self._lock = threading.RLock()
        self._bin_dir: Path | None = None
        self._base: Path | None = None
        self._port: int | None = None
        self._run_as: _RunAs | None = None
        self.owner_pid: int = os.getpid()

    # ------------------------------------------------------------------ discovery

    @staticmethod
    def find_bin_dir() -> Path:
        """Finds the directory holding the PostgreSQL server binaries.

        Looks, in order, at the ``DURABLE_ADK_PG_BIN`` environment variable,
        ``pg_config --bindir``, the newest ``/usr/lib/postgresql/*/bin`` and
        the directory of ``pg_ctl`` on ``PATH`` (symlinks resolved).

        Returns:
            A directory containing executable ``initdb``, ``pg_ctl`` and ``postgres``.

        Raises:
            TempPostgresNotFound: If ``DURABLE_ADK_PG_BIN`` is set but lacks the
                binaries, or no candidate has them.
        """
        explicit = os.environ.get(PG_BIN_ENV, "").strip()
        if explicit:
            path = Path(explicit)
            if _has_binaries(path):
                return path
            raise TempPostgresNotFound(
                f"{PG_BIN_ENV}={explicit!r} does not contain executable "
                f"{', '.join(_REQUIRED_BINARIES)}"
            )
        candidates: list[Path] = []
        from_pg_config = _pg_config_bindir()
        if from_pg_config is not None:
            candidates.append(from_pg_config)
        versioned: list[tuple[tuple[int, ...], Path]] = []
        for raw in Path("/").glob(_DEBIAN_BIN_GLOB.lstrip("/")):
            key = _version_key(raw)
            if key is not None:
                versioned.append((key, raw))
        candidates.extend(path for _, path in sorted(versioned, reverse=True))
        on_path = shutil.which("pg_ctl")
        if on_path is not None:
            candidates.append(Path(on_path).resolve().parent)
        for candidate in candidates:
            if _has_binaries(candidate):
                return candidate
        raise TempPostgresNotFound(
            "PostgreSQL server binaries not found: set "
            f"{PG_BIN_ENV}, put pg_config or pg_ctl on PATH, or install Debian's "
            "'postgresql' package (apt-get install -y postgresql)"
        )

    @classmethod
    def is_available(cls) -> bool:
        """Tells whether the PostgreSQL server binaries can be found.

        Returns:
            True if :meth:`find_bin_dir` succeeds.
        """
        try:
            cls.find_bin_dir()
        except TempPostgresNotFound:
            return False
        return True

    # ------------------------------------------------------------------ properties

    @property
    def running(self) -> bool:
        """Whether :meth:`start` has succeeded and :meth:`stop` has not run since."""
        return self._port is not None

    @property
    def port(self) -> int:
        """The TCP port the server listens on (127.0.0.1 only)."""
        if self._port is None:
            raise TempPostgresError("the cluster is not running")
        return self._port

    @property
    def host(self) -> str:
        """The address the server listens on: always ``127.0.0.1``."""
        return HOST

    @property
    def superuser(self) -> str:
        """The database superuser name (``postgres``)."""
        return SUPERUSER

    @property
    def bin_dir(self) -> Path:
        """The directory of the server binaries in use."""
        if self._bin_dir is None:
            raise TempPostgresError("the cluster has not been started")
        return self._bin_dir

    @property
    def base_dir(self) -> Path:
        """The temporary directory holding the data directory, socket and log."""
        if self._base is None:
            raise TempPostgresError("the cluster has not been started")
        return self._base

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory (``PGDATA``)."""
        return self.base_dir / "data"

    @property
    def log_path(self) -> Path:
        """The server log file."""
        return self.base_dir / "postgres.log"

    @property
    def os_user(self) -> str:
        """The OS user the server processes run as."""
        if self._run_as is None:
            raise TempPostgresError("the cluster has not been started")
        return self._run_as.name

    @property
    def admin_url(self) -> str:
        """URL of the ``postgres`` maintenance database, as the superuser."""
        return self.url("postgres")

    def url(self, dbname: str) -> str:
        """Builds the connection URL of a database on this server.

        Args:
            dbname: A database name (validated like :meth:`create_database`'s).

        Returns:
            ``postgresql://postgres@127.0.0.1:PORT/DBNAME``.

        Raises:
            ValueError: If ``dbname`` is not a valid database name.
            TempPostgresError: If the cluster is not running.
        """
        validate_database_name(dbname)
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/{dbname}"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Creates the cluster and starts the server, waiting until it is ready.

        Calling it on a running cluster does nothing.

        Returns:
            This instance, for chaining.

        Raises:
            TempPostgresNotFound: If the binaries cannot be found.
            TempPostgresStartError: If ``initdb`` or the server fails, or the
                server's OS user cannot be used. Nothing is left behind.
        """
        with self._lock:
            if self.running:
                return self
            bin_dir = self._bin_dir_arg or self.find_bin_dir()
            if not _has_binaries(bin_dir):
                raise TempPostgresNotFound(
                    f"{bin_dir} does not contain executable {', '.join(_REQUIRED_BINARIES)}"
                )
            run_as = _RunAs.resolve(self._os_user)
            parent = self._base_parent or Path(tempfile.gettempdir())
            base = Path(tempfile.mkdtemp(prefix="durable_adk_pg_", dir=parent)).resolve()
            self._bin_dir, self._run_as, self._base = bin_dir, run_as, base
            try:
                if run_as.switch:
                    os.chown(base, run_as.uid, run_as.gid)
                base.chmod(0o700)
                self._initdb()
                self._port = self._start_server()
            except BaseException:
                self._port = None
                self._kill_leftover_server()
                shutil.rmtree(base, ignore_errors=True)
                self._base = None
                raise
            self.owner_pid = os.getpid()
            _track(self)
            return self

    def stop(self) -> None:
        """Stops the server and removes the temporary directory.

        Uses a ``fast`` shutdown (open sessions are rolled back), then
        ``immediate``, then ``SIGKILL`` if the server does not go away.
        Calling it on a stopped cluster does nothing.

        Raises:
            TempPostgresError: If the temporary directory cannot be removed.
        """
        with self._lock:
            base = self._base
            if base is None:
                return
            try:
                if self._port is not None and not self._pg_ctl_stop("fast"):
                    self._pg_ctl_stop("immediate")
                self._kill_leftover_server()
            finally:
                self._port = None
                _untrack(self)
            try:
                shutil.rmtree(base)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise TempPostgresError(f"could not remove {base}: {exc}") from exc
            finally:
                self._base = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"port={self._port}" if self._port is not None else "stopped"
        return f"<TempPostgres {state} base_dir={self._base}>"

    # ------------------------------------------------------------------ databases

    def create_database(self, name: str, template: str | None = None) -> str:
        """Creates a database and returns its URL.

        Args:
            name: New database name, matching ``^[a-z_][a-z0-9_]{0,62}$``.
            template: Database to copy (same naming rule), e.g. ``template0``
                or a database prepared with a schema. ``None`` uses the
                server's default, ``template1``. The template must have no
                other open connection; a busy template is retried for a few
                seconds, to let just-closed connections go away.

        Returns:
            The new database's connection URL.

        Raises:
            ValueError: If ``name`` or ``template`` is not a valid name; nothing
                is sent to the server.
            TempPostgresError: If the cluster is not running, or the template
                stays in use.
            psycopg.Error: If the server rejects the statement (for example
                ``DuplicateDatabase``).
        """
        from psycopg import errors, sql

        validate_database_name(name)
        if template is not None:
            validate_database_name(template)
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement = sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template))
        deadline = time.monotonic() + _OBJECT_IN_USE_RETRY_SECONDS
        delay = 0.02
        while True:
            try:
                self._admin_execute(statement)
                break
            except errors.ObjectInUse as exc:
                if time.monotonic() >= deadline:
                    raise TempPostgresError(
                        f"cannot create {name!r} from template {template!r}: the template "
                        "still has open connections; close them before cloning it"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drops a database, closing its open connections; a missing one is ignored.

        Args:
            name: Database name, matching ``^[a-z_][a-z0-9_]{0,62}$``. The
                ``postgres``, ``template0`` and ``template1`` databases
                cannot be dropped.

        Raises:
            ValueError: If ``name`` is invalid or protected; nothing is sent.
            TempPostgresError: If the cluster is not running.
            psycopg.Error: If the server rejects the statement.
        """
        from psycopg import sql

        validate_database_name(name)
        if name in _PROTECTED_DATABASES:
            raise ValueError(f"refusing to drop the {name!r} database")
        self._admin_execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def list_databases(self) -> list[str]:
        """Lists the databases of the cluster, templates included, sorted.

        Returns:
            The database names.

        Raises:
            TempPostgresError: If the cluster is not running.
        """
        from psycopg import sql

        rows = self._admin_query(sql.SQL("SELECT datname FROM pg_database ORDER BY datname"))
        return [str(row[0]) for row in rows]

    # ------------------------------------------------------------------ internals

    def _admin_connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        try:
            from psycopg import Connection
        except ImportError as exc:  # pragma: no cover - dev dependency
            raise TempPostgresError(
                "TempPostgres needs psycopg for database administration: "
                "pip install 'psycopg[binary]' (part of durable-adk's 'dev' extra)"
            ) from exc
        return Connection.connect(self.admin_url, autocommit=True, connect_timeout=10)

    def _admin_execute(self, statement: sql.SQL | sql.Composed) -> None:
        with self._admin_connect() as conn:
            conn.execute(statement)

    def _admin_query(self, statement: sql.SQL | sql.Composed) -> list[tuple[Any, ...]]:
        with self._admin_connect() as conn:
            return conn.execute(statement).fetchall()

    def _run(
        self, args: list[str], *, timeout: float, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        assert self._run_as is not None and self._base is not None
        try:
            result = subprocess.run(
                args,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                cwd=self._base,
                env=_child_env(),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                **self._run_as.popen_kwargs(),
            )
        except subprocess.TimeoutExpired as exc:
            raise TempPostgresStartError(
                f"{Path(args[0]).name} did not finish within {timeout:.0f}s"
            ) from exc
        if check and result.returncode != 0:
            raise TempPostgresStartError(
                f"{Path(args[0]).name} failed with exit code {result.returncode}"
                f"{self._permission_hint(result)}:\n{result.stdout}{result.stderr}"
            )
        return result

    def _permission_hint(self, result: subprocess.CompletedProcess[str]) -> str:
        if self._run_as is None or not self._run_as.switch:
            return ""
        if "ermission denied" not in result.stdout + result.stderr:
            return ""
        return (
            f" (running as OS user {self._run_as.name!r}: every parent of {self._base} "
            "must be traversable by that user; pass base_dir= or set TMPDIR)"
        )

    def _initdb(self) -> None:
        self._run(
            [
                str(self.bin_dir / "initdb"),
                "--pgdata",
                str(self.data_dir),
                "--username",
                SUPERUSER,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                # Only skips initdb's final flush of the fresh cluster; the
                # server itself runs with fsync on.
                "--no-sync",
            ],
            timeout=max(self._start_timeout, 120.0),
        )
        with (self.data_dir / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# Added by durable_adk.testing.pg_cluster\n")
            conf.write(f"include {_conf_quote(_CONF_INCLUDE_NAME)}\n")

    def _write_settings(self, port: int) -> None:
        settings = dict(self._settings)
        settings["port"] = str(port)
        settings["listen_addresses"] = HOST
        socket_path = self.base_dir / _SOCKET_FILE_TEMPLATE.format(port=port)
        # A socket path too long for sockaddr_un would stop the server from
        # starting; TCP is all that TempPostgres needs, so drop the socket then.
        settings["unix_socket_directories"] = (
            str(self.base_dir) if len(os.fsencode(socket_path)) <= _MAX_SOCKET_PATH else ""
        )
        lines = [f"{key} = {_conf_quote(value)}" for key, value in settings.items()]
        path = self.data_dir / _CONF_INCLUDE_NAME
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        if self._run_as is not None and self._run_as.switch:
            os.chown(path, self._run_as.uid, self._run_as.gid)

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _log_since(self, offset: int, limit: int = 4000) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                text = log.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return text[-limit:]

    def _start_server(self) -> int:
        last_error = ""
        for _ in range(_START_ATTEMPTS):
            port = _free_port()
            self._write_settings(port)
            offset = self._log_size()
            result = self._run(
                [
                    str(self.bin_dir / "pg_ctl"),
                    "start",
                    "--pgdata",
                    str(self.data_dir),
                    "--log",
                    str(self.log_path),
                    "--wait",
                    "--timeout",
                    str(max(1, int(self._start_timeout))),
                    "--silent",
                ],
                timeout=self._start_timeout + 30.0,
                check=False,
            )
            if result.returncode == 0:
                return port
            log = self._log_since(offset)
            last_error = f"{result.stdout}{result.stderr}\n--- server log ---\n{log}"
            # pg_ctl may give up while the postmaster lingers: make sure it is gone.
            self._kill_leftover_server()
            if "Address already in use" not in log:
                break
        raise TempPostgresStartError(f"PostgreSQL failed to start:\n{last_error}")

    def _pg_ctl_stop(self, mode: str) -> bool:
        try:
            result = self._run(
                [
                    str(self.bin_dir / "pg_ctl"),
                    "stop",
                    "--pgdata",
                    str(self.data_dir),
                    "--mode",
                    mode,
                    "--wait",
                    "--timeout",
                    str(max(1, int(self._start_timeout))),
                    "--silent",
                ],
                timeout=self._start_timeout + 30.0,
                check=False,
            )
        except TempPostgresStartError:
            return False
        return result.returncode == 0

    def _postmaster_pid(self) -> int | None:
        try:
            first_line = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
            return int(first_line.strip())
        except (OSError, ValueError):
            return None

    def _is_our_postmaster(self, pid: int) -> bool:
        """Whether ``pid`` is a postgres process serving this data directory.

        Guards against a stale ``postmaster.pid`` whose process id has since
        been reused by an unrelated process.
        """
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return os.fsencode(self.data_dir) in raw.split(b"\0")

    def _kill_leftover_server(self) -> None:
        """Kills the postmaster recorded in ``postmaster.pid``, if it is still alive."""
        if self._base is None:
            return
        pid = self._postmaster_pid()
        if pid is None or pid <= 0 or not self._is_our_postmaster(pid):
            return
        deadline = time.monotonic() + 10.0
        # SIGQUIT is PostgreSQL's immediate shutdown; SIGKILL if even that hangs.
        for sig in (signal.SIGQUIT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            while time.monotonic() < deadline:
                # A dead or zombie process has no command line any more.
                if not self._is_our_postmaster(pid):
                    return
                time.sleep(0.05)
            deadline = time.monotonic() + 10.0

"""A worker behind its own network, for the chaos soak's partitions (root only).

The partitioned worker runs in a network namespace the soak creates
(``ip netns add``). Nothing in the namespace gets an address outside it: the
worker sees only its own loopback, on which small relays listen on the same
ports as PostgreSQL and the fake services do on the host's loopback. Each relay
forwards its connections through a Unix socket in the soak's directory (file
system sockets cross namespaces) to a relay on the host, which connects to the
real server on ``127.0.0.1``. The worker's HTTP port comes back the same way,
so the soak submits runs to it like to any other worker. The worker keeps its
usual URLs (``127.0.0.1:<port>``) and needs no configuration of its own.

A partition is ``ip link set lo down`` inside the namespace: the worker's open
connections (to PostgreSQL, to the services) stop carrying packets without
being reset, as in a real partition, and new ones fail; ``lo up`` heals it.

``python -m durable_adk.chaos.soak relay LISTEN=TARGET ...`` runs one relay
process (``tcp:HOST:PORT`` or ``unix:PATH`` on each side); it prints ``READY``
once every listener is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

READY = "READY"


def partitions_available() -> str | None:
    """None when this process can partition a worker; else why not."""
    if os.geteuid() != 0:
        return "not root: network partitions need network namespaces (ip netns), skipped"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing: network partitions skipped"
    probe = f"dadk-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed ({made.stderr.strip()}): network partitions skipped"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _endpoint(text: str) -> tuple[str, str, int]:
    kind, _, rest = text.partition(":")
    if kind == "unix" and rest:
        return "unix", rest, 0
    host, _, port = rest.rpartition(":")
    if kind == "tcp" and host and port.isdigit():
        return "tcp", host, int(port)
    raise ValueError(f"bad endpoint {text!r}: expected tcp:HOST:PORT or unix:PATH")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _open(target: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    kind, where, port = _endpoint(target)
    if kind == "unix":
        return await asyncio.open_unix_connection(where)
    return await asyncio.open_connection(where, port)


async def _serve_pair(listen: str, target: str) -> asyncio.AbstractServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await _open(target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    kind, where, port = _endpoint(listen)
    if kind == "unix":
        with contextlib.suppress(FileNotFoundError):
            os.unlink(where)
        return await asyncio.start_unix_server(handle, where)
    return await asyncio.start_server(handle, where, port, reuse_address=True)


async def relay_main(pairs: Sequence[str]) -> None:
    """Serves every ``LISTEN=TARGET`` pair until SIGTERM."""
    servers = []
    for pair in pairs:
        listen, sep, target = pair.partition("=")
        if not sep:
            raise ValueError(f"bad relay {pair!r}: expected LISTEN=TARGET")
        servers.append(await _serve_pair(listen, target))
    print(READY, flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


@dataclass
class Namespace:
    """A network namespace with relays to the host's PostgreSQL and services.

    Args:
        name: The namespace's name (``ip netns``).
        folder: Where the Unix sockets go.
        ports: The host loopback ports the worker inside must reach.
        inbound: Ports inside the namespace the host must reach (the worker's HTTP).
    """

    name: str
    folder: Path
    ports: Sequence[int]
    inbound: Sequence[int]
    relays: list[subprocess.Popen[str]] = field(default_factory=list)

    def prefix(self) -> list[str]:
        """What runs a command inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def _sock(self, direction: str, port: int) -> str:
        return str(self.folder / f"{direction}-{port}.sock")

    def _relay(self, pairs: list[str], inside: bool) -> None:
        command = [sys.executable, "-m", "durable_adk.chaos.soak", "relay", *pairs]
        process = subprocess.Popen(
            (self.prefix() if inside else []) + command,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self.relays.append(process)
        assert process.stdout is not None
        if process.stdout.readline().strip() != READY:
            raise RuntimeError(f"a relay did not start: {' '.join(command)}")

    def create(self) -> Namespace:
        """Adds the namespace, brings its loopback up and starts both sides' relays."""
        self.folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        self.link(up=True)
        host = [f"unix:{self._sock('out', p)}=tcp:127.0.0.1:{p}" for p in self.ports]
        host += [f"tcp:127.0.0.1:{p}=unix:{self._sock('in', p)}" for p in self.inbound]
        inside = [f"tcp:127.0.0.1:{p}=unix:{self._sock('out', p)}" for p in self.ports]
        inside += [f"unix:{self._sock('in', p)}=tcp:127.0.0.1:{p}" for p in self.inbound]
        self._relay(host, inside=False)
        self._relay(inside, inside=True)
        return self

    def link(self, *, up: bool) -> None:
        """Heals (``up``) or cuts (not ``up``) the namespace's only network."""
        state = "up" if up else "down"
        subprocess.run(
            [*self.prefix(), "ip", "link", "set", "lo", state], check=True, capture_output=True
        )

    def delete(self) -> None:
        """Stops the relays and removes the namespace."""
        for relay in self.relays:
            relay.terminate()
        deadline = time.monotonic() + 10
        for relay in self.relays:
            try:
                relay.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                relay.kill()
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)

"""Which push notification URLs a client may register: checked before anything is stored.

:class:`PushUrlPolicy` is the SDK's ``push_url_validator`` hook (awaited with
the URL) and more: a URL it refuses raises A2A's ``InvalidParamsError``
(-32602) saying why, before the message is taken or the config stored. A URL
must be at most :data:`MAX_URL_CHARS` characters of printable ASCII,
``http`` or ``https``, name a host, carry no user name or password (a
credential belongs in the config's ``authentication``, which is sealed at
rest, not in a URL that logs and error messages repeat), and have a valid
port. With ``hosts`` (``durable-adk serve --a2a-push-hosts``), its host must
be one of them: ``example.com`` matches that host only, ``*.example.com``
any host under it. The push delivery asks the same policy again before each
POST, so a config stored before a host was taken off the list is never sent
to (its pushes go DEAD, saying why).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable

from a2a.utils.errors import InvalidParamsError

from durable_adk import errors

MAX_URL_CHARS = 2048
"""The longest push URL accepted."""


def _host_pattern(entry: str) -> str:
    host = entry.strip().lower().rstrip(".")
    bare = host[2:] if host.startswith("*.") else host
    if not bare or any(c in bare for c in "/:@ *?#") or bare.startswith("."):
        raise errors.InvalidArgument(
            f"push host {entry!r}: a host name (example.com) or *.example.com, "
            "without scheme, port or path"
        )
    return host


class PushUrlPolicy:
    """The push URLs a server accepts (see the module)."""

    def __init__(self, hosts: Iterable[str] | None = None) -> None:
        """Keeps the allowed hosts.

        Args:
            hosts: The hosts a push URL may name (``*.example.com``: any host
                under example.com); None or empty: any host.

        Raises:
            durable_adk.errors.InvalidArgument: A host entry with a scheme,
                port, path or blank.
        """
        self.hosts = tuple(_host_pattern(h) for h in (hosts or ()))

    def refusal(self, url: str) -> str | None:
        """Why ``url`` is refused, or None when it is accepted."""
        if not url:
            return "a push notification config needs a url"
        if len(url) > MAX_URL_CHARS:
            return f"the push url is {len(url)} characters, more than {MAX_URL_CHARS}"
        if any(not (32 < ord(c) < 127) for c in url):
            return "the push url holds a space, a control or a non-ASCII character"
        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError as exc:
            return f"the push url cannot be parsed: {exc}"
        if parts.scheme.lower() not in ("http", "https"):
            return f"the push url's scheme must be http or https, not {parts.scheme or 'none'!r}"
        host = (parts.hostname or "").rstrip(".")
        if not host:
            return "the push url names no host"
        if "@" in parts.netloc:
            return (
                "the push url carries credentials (user:password@); give them in the "
                "config's authentication instead"
            )
        if self.hosts and not self._allowed(host.lower()):
            return f"the push url's host {host!r} is not one this server pushes to"
        return None

    def _allowed(self, host: str) -> bool:
        for pattern in self.hosts:
            if pattern.startswith("*."):
                if host.endswith(pattern[1:]):
                    return True
            elif host == pattern:
                return True
        return False

    def check(self, url: str) -> None:
        """Raises A2A's InvalidParamsError (-32602) saying why ``url`` is refused."""
        reason = self.refusal(url)
        if reason is not None:
            raise InvalidParamsError(message=reason)

    async def __call__(self, url: str) -> bool:
        """The SDK's ``push_url_validator``: True, or InvalidParamsError with the reason."""
        self.check(url)
        return True

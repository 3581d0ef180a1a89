"""The invoicer served by ``durable_adk.a2a.to_a2a`` (``uvicorn a2a_to_a2a_app:app``).

The store is ``$DADK_A2A_DB``; the card names ``$DADK_A2A_PORT``. With
``$DADK_A2A_CALLERS`` (``name=token,name=token``) only those callers are
admitted; with ``$DADK_A2A_PUSH_HOSTS`` (``host,host``) push URLs may name
only those hosts.
"""

from __future__ import annotations

import os

from a2a_app import app as invoicer

from durable_adk.a2a.server import to_a2a


def _list(name: str) -> list[str]:
    return [item for item in os.environ.get(name, "").split(",") if item]


callers = dict(reversed(item.split("=", 1)) for item in _list("DADK_A2A_CALLERS"))
app = to_a2a(
    invoicer(),
    db=os.environ["DADK_A2A_DB"],
    host="127.0.0.1",
    port=int(os.environ["DADK_A2A_PORT"]),
    callers=callers or None,
    push_hosts=_list("DADK_A2A_PUSH_HOSTS") or None,
    lease=2.0,
)

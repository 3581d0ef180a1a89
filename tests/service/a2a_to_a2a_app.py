"""The invoicer served by ``durable_adk.a2a.to_a2a`` (``uvicorn a2a_to_a2a_app:app``).

The store is ``$DADK_A2A_DB``; the card names ``$DADK_A2A_PORT``.
"""

from __future__ import annotations

import os

from a2a_app import app as invoicer

from durable_adk.a2a.server import to_a2a

app = to_a2a(
    invoicer(),
    db=os.environ["DADK_A2A_DB"],
    host="127.0.0.1",
    port=int(os.environ["DADK_A2A_PORT"]),
    lease=2.0,
)

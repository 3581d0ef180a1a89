"""Who holds a run, and whether that hold is still trusted: leases and fences.

Holds :mod:`.leases` (one heartbeat per worker renews every lease it holds,
with the local deadline after which a lease is no longer trusted) and
:mod:`.fence` (how code inside a drive, a journaled tool or an outside
service's client, learns whether its run's lease is still trusted, and the
fence headers an outside service can check).

May import: the ground floor, :mod:`durable_adk.store` and
:mod:`durable_adk.tables`. Never ``google.adk``.
"""

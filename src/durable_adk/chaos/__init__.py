"""The chaos soak users run against their deployment (``make chaos``, docs/testing.md).

Holds the soak's driver (:mod:`.soak`: ``durable-adk serve`` workers on a
private PostgreSQL, random SIGKILL, SIGSTOP past the lease, server restarts,
rolling deploys, partitions as root), the app it runs (:mod:`.app`), the
verdict it reads from the store (:mod:`.check`, with its own SQL under
``chaos/sql/``), the network relays a partition cuts (:mod:`.net`) and the
primary with its standby that a failover promotes (:mod:`.failover`).
``python -m durable_adk.chaos`` runs it.

May import: anything in the library, and :mod:`durable_adk.testing` for its
fake services and throwaway PostgreSQL. Nothing in the library imports it.
"""

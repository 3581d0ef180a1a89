"""When a drive's events reach the store: barriers, and the drive in this process.

Holds the barrier batch (:mod:`.barrier`: a run's events committed together
before a tool acts, before a model call, before a caller sees an event, at
the end) and the drive's machinery (:mod:`.drive`: the pump's hand-over to
its reader, the lease renewal's result, the barrier plugin ADK calls first,
and the units a tool commits with its call).

May import: ``google.adk``, the ground floor, :mod:`durable_adk.tables`,
:mod:`durable_adk.fencing` and :mod:`durable_adk.adk.shapes`.
"""

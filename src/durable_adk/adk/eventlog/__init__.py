"""What a session's ADK events say: facts, classification, stored rows, live events.

Holds the facts about stored events the session service and recovery share
(:mod:`.events`), the pure classification of an invocation a dead worker left
(:mod:`.classify`), the rows read back into ``Event`` objects without
validating them again (:mod:`.stored`), and the live (partial) events of a
session followed in this process (:mod:`.live`). No I/O.

May import: ``google.adk``, the ground floor and :mod:`durable_adk.adk.shapes`.
"""

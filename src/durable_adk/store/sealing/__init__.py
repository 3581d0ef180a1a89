"""Encryption at rest: the codec every payload column passes through (:mod:`.codec`).

It imports nothing of the store above the ground floor, so the store's
contract (:mod:`durable_adk.store.base`) and key rotation
(:mod:`durable_adk.store.rotation`) import it, never the other way.
"""

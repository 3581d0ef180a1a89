"""The fake outside services, split by concern; import them from ``durable_adk.testing.services``.

- :mod:`.protocol`: the address, limits and key rules both ends share;
- :mod:`.specs`: services, resources, fields, actions, the registry and the
  five services (billing, notifications, inventory, payments, carrier);
- :mod:`.storage`: a service's SQLite file;
- :mod:`.request_log`: every request received, logged before it is handled;
- :mod:`.app`: the request logic, without sockets;
- :mod:`.server`: the HTTP server and the command line (``main``);
- :mod:`.clients`: the HTTP clients the tools and tests call;
- :mod:`.process`: :class:`~.process.FakeService`, a service in a child process.

Nothing is imported here, so importing one module does not import the others.
"""

"""The library's own errors.

Every error raised on purpose by durable-adk is a :class:`DurableError`. Each
class's docstring is its default message, so ``raise SchemaBehind()`` already
says something useful. Driver errors are translated into these classes by the
store, by error code (SQLSTATE on PostgreSQL, the extended result code on
SQLite), never by matching message text.
"""

from __future__ import annotations


class DurableError(Exception):
    """A durable-adk operation failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class InvalidArgument(DurableError, ValueError):
    """An argument was rejected before anything was written."""


class PayloadTooDeep(InvalidArgument):
    """A value from outside is nested deeper than the store's limit (max_payload_depth)."""


class PayloadTooLarge(InvalidArgument):
    """A value from outside is larger than the store's limit (max_payload_bytes)."""


class StoreError(DurableError):
    """The database failed an operation."""


class SchemaError(StoreError):
    """The database schema is not what this version of durable-adk expects."""


class SchemaBehind(SchemaError):
    """The database schema is older than this package: run `durable-adk db upgrade`."""


class SchemaAhead(SchemaError):
    """The database schema is newer than this version of durable-adk: upgrade the package."""


class UniqueViolation(StoreError):
    """A row with the same key already exists."""


class ForeignKeyViolation(StoreError):
    """A row refers to a row that does not exist."""


class DatabaseBusy(StoreError):
    """The database is busy (lock, serialization failure, deadlock); retry the operation."""


class StoreUnavailable(StoreError):
    """The database cannot be reached."""


class UnsupportedUrl(InvalidArgument):
    """The store URL is not supported: use sqlite:///path or postgresql://..."""


class Fenced(DurableError):
    """The write was refused: this worker no longer owns the run (its fencing epoch is old)."""


class FenceRefused(Fenced):
    """An outside service refused the request as fenced off; it did not act."""


class RunInterrupted(DurableError):
    """The run met a transient fault and was handed back: recovery finishes it after a back-off."""


class RunCancelled(DurableError):
    """An operator cancelled the run: it acts no more and ends CANCELLED."""


class LookupUnavailable(DurableError):
    """The outside system cannot be asked whether an effect happened (it offers no lookup)."""


class NotFound(DurableError):
    """No such run, session or record."""


class Conflict(DurableError):
    """The request conflicts with where the record stands (e.g. retrying a running run)."""


class InvocationCancelled(Conflict):
    """The invocation was cancelled: no continuation (an answer, a job result) may start it."""


class Draining(DurableError):
    """This worker is shutting down and takes no new work: send the request to another worker."""


class Unauthorized(DurableError):
    """A valid bearer token is required."""


class InvalidVersion(InvalidArgument):
    """The app version is not a PEP 440 version (e.g. '1.4.0') or not ordered as declared."""


class VersionElsewhere(Fenced):
    """The run's app version is not served by this worker: a worker of its version continues it."""


class KeyUnavailable(StoreError):
    """A stored value is encrypted under a key this process does not hold, or does not open."""

    def __init__(self, message: str | None = None, *, key_id: str | None = None) -> None:
        super().__init__(message)
        self.key_id = key_id

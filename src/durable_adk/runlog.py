"""One log line format for what happens to runs: recoveries, parks, takeovers, lost leases.

Every such line is ``<event> run=<id> epoch=<n> class=<class> key=value ...``
(values with spaces or quotes are JSON-quoted), logged under the
``durable_adk.*`` loggers, and the same fields ride on the record as
``record.durable_adk`` (a dict: ``event``, ``run_id``, ``epoch``, ``class``
and the rest), so a JSON log formatter or a test can read them without
parsing text. The events:

==============  =======  ======================================================
event           level    when
==============  =======  ======================================================
``takeover``    INFO     a sweeper claimed a run whose holder stopped renewing
``recovered``   INFO     a sweeper classified a claimed run and acted on it
``parked``      WARNING  a run was parked for a person (dead letter written)
``lease_lost``  WARNING  a drive lost its lease and was cancelled
``taken_over``  WARNING  a drive or a recovery found its run taken over
``handed_back`` WARNING  a run went back for recovery after a transient fault
``cancelled``   INFO     a run was ended CANCELLED (an operator asked)
==============  =======  ======================================================

The library's loggers are silent unless the application configures logging;
``durable-adk serve --log-level`` (or ``DURABLE_ADK_LOG_LEVEL``) does it for a
worker: :func:`configure`.
"""

from __future__ import annotations

import json
import logging
import os

LOGGER_NAME = "durable_adk"
"""The library's root logger; every module logs under ``durable_adk.<area>``."""

LOG_LEVEL_ENV = "DURABLE_ADK_LOG_LEVEL"
"""The environment variable ``durable-adk serve`` reads the library's log level from."""

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The line format :func:`configure` installs."""


_TEXT_KEYS = {"run_id": "run"}
"""Field names shortened in the text of a line (``record.durable_adk`` keeps the long ones)."""


def _value(value: object) -> str:
    text = str(value)
    if not text or any(c in text for c in ' "=\n'):
        return json.dumps(text)
    return text


def run_event(
    logger: logging.Logger,
    level: int,
    event: str,
    *,
    run_id: str,
    epoch: int | None,
    cls: str | None = None,
    **fields: object,
) -> None:
    """Logs one run event in the common format (see the module docstring).

    Args:
        logger: The module's logger.
        level: ``logging.INFO``, ``logging.WARNING``...
        event: The event's name (``recovered``, ``parked``...).
        run_id: The run.
        epoch: The run's fencing epoch the event happened at (None: not known).
        cls: The class the classifier found, if known.
        **fields: More ``key=value`` pairs (attempt, action, status, reason...);
            None values are left out.
    """
    if not logger.isEnabledFor(level):
        return
    data: dict[str, object] = {"event": event, "run_id": run_id, "epoch": epoch, "class": cls}
    data.update(fields)
    shown = {_TEXT_KEYS.get(k, k): v for k, v in data.items() if v is not None and k != "event"}
    line = " ".join(f"{k}={_value(v)}" for k, v in shown.items())
    logger.log(level, "%s %s", event, line, extra={"durable_adk": data})


def taken_over(
    logger: logging.Logger, *, run_id: str, epoch: int, during: str, reason: object
) -> None:
    """Logs ``taken_over``: the run was taken over (or ended) while this process held it."""
    run_event(
        logger,
        logging.WARNING,
        "taken_over",
        run_id=run_id,
        epoch=epoch,
        during=during,
        reason=str(reason),
    )


def configure(level: str | int | None = None) -> int:
    """Sets the library's log level and, if the process has no log handler, one to stderr.

    Args:
        level: A level name (``debug``, ``info``, ``warning``, ``error``) or
            number; None reads :data:`LOG_LEVEL_ENV`, else ``info``.

    Returns:
        The level set.

    Raises:
        durable_adk.errors.InvalidArgument: An unknown level name.
    """
    from durable_adk import errors

    chosen: str | int = level if level is not None else os.environ.get(LOG_LEVEL_ENV) or "info"
    if isinstance(chosen, str):
        number = logging.getLevelNamesMapping().get(chosen.strip().upper())
        if number is None:
            raise errors.InvalidArgument(
                f"unknown log level {chosen!r}: use debug, info, warning or error"
            )
        chosen = number
    library = logging.getLogger(LOGGER_NAME)
    library.setLevel(chosen)
    if not logging.getLogger().handlers and not library.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(FORMAT))
        library.addHandler(handler)
    return chosen

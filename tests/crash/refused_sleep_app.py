"""The reminder example asking for a sleep it must refuse (``seconds=-5``), to serve."""

from __future__ import annotations

from examples.reminders.app import APP_NAME, build_agent
from google.adk.apps import App


def app() -> App:
    """The reminder agent whose model asks to sleep minus five seconds."""
    return App(name=APP_NAME, root_agent=build_agent(-5))

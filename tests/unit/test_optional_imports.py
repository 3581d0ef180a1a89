"""remember_missing(): ADK's optional a2a module fails once, then at once.

Each case runs in a fresh interpreter (``sys.executable -c``): marking a module
as missing changes ``sys.modules``, which must not leak into this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

A2A_MODULE = "google.adk.agents.remote_a2a_agent"


HIDE_A2A = """
import sys
sys.modules["a2a"] = None  # the SDK cannot be imported nor found, as where it is not installed
"""


def in_fresh_python(
    code: str, *, extra_path: Path | None = None, hide_a2a: bool = True
) -> dict[str, Any]:
    """Runs ``code`` in a new interpreter; it prints one JSON object last.

    The suite installs the ``a2a`` extra, so by default the interpreter hides
    the SDK (the case these tests are about); ``hide_a2a=False`` leaves it.
    """
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(extra_path), env.get("PYTHONPATH", "")) if p
        )
    done = subprocess.run(
        [sys.executable, "-c", (HIDE_A2A if hide_a2a else "") + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_without_a2a_the_adk_module_is_marked_missing_once() -> None:
    got = in_fresh_python(
        """
        import importlib.util, json, sys, time

        a2a_installed = importlib.util.find_spec("a2a") is not None
        name = "google.adk.agents.remote_a2a_agent"
        # Before marking: the import is searched for and fails (a2a missing).
        try:
            import google.adk.agents.remote_a2a_agent  # noqa: F401
            imported_before = True
        except ImportError:
            imported_before = False
        present_before = name in sys.modules

        from durable_adk.adk.shapes import optional_imports

        first = optional_imports.remember_missing()
        marked_none = name in sys.modules and sys.modules[name] is None

        failures, messages = 0, set()
        started = time.perf_counter()
        for _ in range(1000):
            try:
                import google.adk.agents.remote_a2a_agent  # noqa: F401,F811
            except ImportError as exc:
                failures += 1
                messages.add(str(exc))
        elapsed = time.perf_counter() - started
        try:
            from google.adk.agents.remote_a2a_agent import RemoteA2aAgent  # noqa: F401
            from_import_fails = False
        except ImportError:
            from_import_fails = True
        print(json.dumps({
            "a2a_installed": a2a_installed,
            "imported_before": imported_before,
            "present_before": present_before,
            "first": first,
            "marked_none": marked_none,
            "failures": failures,
            "messages": sorted(messages),
            "elapsed": elapsed,
            "from_import_fails": from_import_fails,
        }))
        """
    )
    assert got["a2a_installed"] is False
    assert got["imported_before"] is False
    assert got["present_before"] is False  # a failed import leaves nothing cached
    assert got["first"] == [A2A_MODULE]
    assert got["marked_none"] is True
    assert got["failures"] == 1000
    assert len(got["messages"]) == 1 and A2A_MODULE in got["messages"][0]
    assert got["from_import_fails"] is True
    # A marked import fails without searching: about a microsecond each, where
    # a real search-and-fail takes hundreds of microseconds.
    assert got["elapsed"] < 0.25, got["elapsed"]


def test_remember_missing_is_idempotent() -> None:
    """A second call marks nothing new and returns []; so does one after the
    runner's own call at import."""
    got = in_fresh_python(
        """
        import importlib.util, json, sys

        from durable_adk.adk.shapes.optional_imports import remember_missing

        name = "google.adk.agents.remote_a2a_agent"
        first, second = remember_missing(), remember_missing()
        still_none = name in sys.modules and sys.modules[name] is None
        import durable_adk.adk.runner  # noqa: F401  (calls remember_missing at import)
        after_runner = remember_missing()
        print(json.dumps({
            "a2a_installed": importlib.util.find_spec("a2a") is not None,
            "first": first,
            "second": second,
            "still_none": still_none,
            "after_runner": after_runner,
        }))
        """
    )
    assert got["a2a_installed"] is False
    assert got["first"] == [A2A_MODULE]
    assert got["still_none"] is True
    assert got["second"] == []
    assert got["after_runner"] == []


def test_importing_the_runner_marks_the_module() -> None:
    got = in_fresh_python(
        """
        import importlib.util, json, sys

        import durable_adk.adk.runner  # noqa: F401  (calls remember_missing at import)

        name = "google.adk.agents.remote_a2a_agent"
        print(json.dumps({
            "a2a_installed": importlib.util.find_spec("a2a") is not None,
            "marked_none": name in sys.modules and sys.modules[name] is None,
        }))
        """
    )
    assert got["a2a_installed"] is False
    assert got["marked_none"] is True


def test_nothing_is_marked_when_a2a_can_be_found(tmp_path: Path) -> None:
    # A stand-in a2a package on the path: find_spec finds it, so nothing may change.
    (tmp_path / "a2a").mkdir()
    (tmp_path / "a2a" / "__init__.py").write_text("")
    got = in_fresh_python(
        """
        import importlib.util, json, sys

        from durable_adk.adk.shapes.optional_imports import remember_missing

        name = "google.adk.agents.remote_a2a_agent"
        found = importlib.util.find_spec("a2a") is not None
        result = remember_missing()
        print(json.dumps({
            "found": found,
            "result": result,
            "in_modules": name in sys.modules,
            "none": name in sys.modules and sys.modules[name] is None,
        }))
        """,
        extra_path=tmp_path,
        hide_a2a=False,
    )
    assert got == {"found": True, "result": [], "in_modules": False, "none": False}

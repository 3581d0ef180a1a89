"""The old import paths of moved modules: the same module, a warning naming the new path.

Each import runs in a fresh interpreter, so a module already imported by the
suite cannot hide a path that no longer resolves.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings

import pytest

from durable_adk._moved import MOVED

CHECK_ALL = """
import importlib, json, sys, warnings
from durable_adk._moved import MOVED
found = {}
for old, new in MOVED.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    found[old] = {
        "same": module is importlib.import_module(new),
        "spec": module.__spec__.name,
        "warned": [str(w.message) for w in caught if w.category is DeprecationWarning],
    }
print(json.dumps(found))
"""


def test_every_old_path_imports_the_new_module_with_a_warning() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", CHECK_ALL], capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout)
    assert set(found) == set(MOVED)
    for old, new in MOVED.items():
        assert found[old]["same"], old
        assert found[old]["spec"] == new, old  # the module keeps its own spec
        assert any(new in message for message in found[old]["warned"]), (old, found[old])


def test_the_table_names_only_paths_that_no_longer_exist_and_targets_that_do() -> None:
    for old, new in MOVED.items():
        assert importlib.util.find_spec(new) is not None, new
        assert new != old
    # an unknown path is still an ImportError, not swallowed by the finder
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("durable_adk.no_such_module")


def test_a_from_import_of_an_old_path_gives_the_same_objects() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from durable_adk.adk.session_service import DurableSessionService as Old
        from durable_adk.ledger import RunLedger as OldLedger
    from durable_adk.adk.services.sessions import DurableSessionService
    from durable_adk.tables.ledger import RunLedger

    assert Old is DurableSessionService
    assert OldLedger is RunLedger


def test_the_old_tools_module_names_are_found_on_the_tools_package() -> None:
    from durable_adk.adk.tools import journaling

    with pytest.warns(DeprecationWarning, match=r"adk\.tools\.journaling\.journaled"):
        from durable_adk.adk.tools import journaled
    assert journaled is journaling.journaled
    with pytest.raises(ImportError):
        from durable_adk.adk.tools import no_such_name  # noqa: F401


def test_python_dash_m_on_an_old_path_runs_the_new_module() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "durable_adk.testing.chaos", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert "--duration" in ran.stdout
    assert "durable_adk.chaos" in ran.stderr  # the warning names the new path


def test_the_cli_package_keeps_its_entry_points() -> None:
    from durable_adk.cli import app, main
    from durable_adk.cli.main import app as app_of_main

    assert app is app_of_main
    assert callable(main)
    ran = subprocess.run(
        [sys.executable, "-m", "durable_adk.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert "serve" in ran.stdout and "interrupts" in ran.stdout

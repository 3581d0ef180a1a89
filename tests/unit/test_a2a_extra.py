"""Without the a2a extra: ``import durable_adk`` works, A2A asked for names the extra.

Each case runs in a fresh interpreter whose import of the A2A SDK fails, as
it does where ``a2a-sdk`` is not installed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

HIDE_A2A = """
import sys
sys.modules["a2a"] = None  # every import of the SDK fails, as where it is not installed
"""


def run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDE_A2A + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_durable_adk_imports_without_the_a2a_sdk() -> None:
    done = run(
        """
        import durable_adk
        from durable_adk import DurableRunner  # the ADK layer too
        import durable_adk.a2a_tables.tasks  # the tables need no SDK
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")


def test_asking_for_a2a_names_the_extra() -> None:
    done = run(
        """
        try:
            import durable_adk.a2a
        except ImportError as exc:
            print(str(exc))
        """
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'durable-adk[a2a]'" in done.stdout


def test_serve_with_a2a_refuses_and_names_the_extra() -> None:
    done = run(
        """
        import sys
        from durable_adk.cli.main import main
        sys.argv = ["durable-adk", "serve", "durable_adk.demo.service_app:app", "--a2a",
                    "--db", "sqlite:///" + sys.argv[1]]
        main()
        """,
        "/nonexistent-dir/never.db",
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "durable-adk[a2a]" in done.stdout + done.stderr

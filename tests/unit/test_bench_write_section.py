"""BENCHMARKS.md keeps a bench's figures; its profiles go to a file of their own."""

from __future__ import annotations

from pathlib import Path

from bench.common import write_section

BODY = """## Runner (`bench/runner.py`)

Run: quick, 2026-12-04.

| a | b |
|---|---|
| 1 | 2 |

<details><summary>one</summary>

```
profile one
```

</details>

Between the profiles.

<details><summary>two</summary>

```
profile two
```

</details>
"""


def test_profiles_leave_the_section_for_their_own_file(tmp_path: Path) -> None:
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# Benchmarks\n\n<!-- bench:runner:begin -->\nold\n<!-- bench:runner:end -->\n")

    write_section("runner", BODY, md)

    text = md.read_text()
    assert "profile one" not in text and "profile two" not in text and "old" not in text
    assert "| 1 | 2 |" in text and "Between the profiles." in text
    assert text.count("Profiles of this run: [bench/profiles/runner.md]") == 1
    assert text.index("Profiles of this run") < text.index("Between the profiles.")
    profiles = (tmp_path / "bench" / "profiles" / "runner.md").read_text()
    assert profiles.startswith("# Profiles: Runner (`bench/runner.py`)\n\nRun: quick, 2026-12-04.")
    assert "profile one" in profiles and "profile two" in profiles
    assert "| 1 | 2 |" not in profiles


def test_a_section_without_profiles_keeps_the_earlier_file(tmp_path: Path) -> None:
    md = tmp_path / "BENCHMARKS.md"
    write_section("runner", BODY, md)
    kept = (tmp_path / "bench" / "profiles" / "runner.md").read_text()

    write_section("runner", "## Runner\n\nno profiles this time\n", md)

    assert (tmp_path / "bench" / "profiles" / "runner.md").read_text() == kept
    assert "no profiles this time" in md.read_text()
    assert md.read_text().count("<!-- bench:runner:begin -->") == 1

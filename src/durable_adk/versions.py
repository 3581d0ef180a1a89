"""App versions: what a run was started under, and which worker may take it.

Every run records the version of the app it was started under: the version
string the app declares (``DurableRunner(version="1.4.0")``, ``durable-adk serve
--app-version``) and a fingerprint of its definition
(:mod:`durable_adk.adk.runs.fingerprint`). A continuation (an answer, a job
result, a resume) keeps the version of the invocation it continues, whoever
submits it. A worker serves its own version and the earlier versions its app
declares it can continue (``compatible_versions``); a run of any other
version is *pinned*: only a worker of its version claims it. The check sits in
the claim SQL of the ledger (the queue's claim and recovery's), so it costs no
round trip and no entry point can skip it.

Versions are ordered as PEP 440 versions (``packaging``): a worker never
continues a version newer than its own, and an unparsable version string is
refused with :class:`~durable_adk.errors.InvalidVersion` before anything is
written. A worker that declares no version claims only runs that have none;
runs recorded before versions existed (NULL) are claimed by any worker, as
before.

Framework-agnostic: no ADK import.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durable_adk import errors

if TYPE_CHECKING:
    from packaging.version import Version


def parse_version(text: str) -> Version:
    """``text`` as a PEP 440 version.

    Raises:
        durable_adk.errors.InvalidVersion: It is not one (``"1.4.0"``, ``"2"``,
            ``"2.0rc1"`` are; ``"blue"`` or ``""`` are not).
    """
    # Imported here: the core imports with the standard library alone, and
    # only an app that declares a version needs an ordering.
    from packaging.version import InvalidVersion, Version

    if not isinstance(text, str) or not text.strip():
        raise errors.InvalidVersion(f"app version {text!r} is empty: declare e.g. '1.4.0'")
    try:
        return Version(text)
    except InvalidVersion:
        raise errors.InvalidVersion(
            f"app version {text!r} is not a PEP 440 version (e.g. '1.4.0', '2.0rc1'): "
            "versions must be ordered so that a worker never continues a newer one"
        ) from None


def is_newer(version: str, than: str) -> bool:
    """Whether ``version`` comes after ``than`` (both PEP 440 version strings)."""
    return parse_version(version) > parse_version(than)


@dataclass(frozen=True, slots=True)
class Serving:
    """The version a worker runs and the versions whose runs it may take.

    Attributes:
        version: The app's declared version string; None when the app declares
            none (the worker then takes only runs without a version).
        fingerprint: The fingerprint of the app's definition (recorded with
            each run; shown, compared by drift detection), or None.
        compatible: Earlier versions whose runs this code can continue (the
            ``compatible`` policy); empty: ``pinned``, only its own version.
    """

    version: str | None
    fingerprint: str | None = None
    compatible: tuple[str, ...] = ()

    @classmethod
    def declare(
        cls,
        version: str | None,
        *,
        fingerprint: str | None = None,
        compatible: Iterable[str] = (),
    ) -> Serving:
        """Checks an app's declaration and returns what its workers serve.

        Raises:
            durable_adk.errors.InvalidVersion: ``version`` or one of
                ``compatible`` is not a PEP 440 version, a compatible version
                is not older than ``version``, or compatible versions are
                declared without a version.
        """
        listed = tuple(dict.fromkeys(compatible))
        if version is None:
            if listed:
                raise errors.InvalidVersion(
                    "compatible_versions needs the app's own version (version=...)"
                )
            return cls(version=None, fingerprint=fingerprint)
        own = parse_version(version)
        for earlier in listed:
            if parse_version(earlier) >= own:
                raise errors.InvalidVersion(
                    f"compatible version {earlier!r} is not older than the app's version "
                    f"{version!r}: a worker never continues its own or a newer version's "
                    "runs as 'compatible'"
                )
        return cls(version=version, fingerprint=fingerprint, compatible=listed)

    @property
    def policy(self) -> str:
        """``"pinned"`` (only its own version) or ``"compatible"``."""
        return "compatible" if self.compatible else "pinned"

    @property
    def serves(self) -> tuple[str, ...]:
        """Every version whose runs this worker takes (its own first)."""
        return () if self.version is None else (self.version, *self.compatible)

    def takes(self, version: str | None) -> bool:
        """Whether a run recorded under ``version`` may be claimed here (the claim SQL's rule)."""
        return version is None or version in self.serves

    def params(self) -> dict[str, Any]:
        """The claim and submit parameters of the ledger's SQL."""
        return {
            "app_version": self.version,
            "app_fingerprint": self.fingerprint,
            "serves": json.dumps(list(self.serves)),
        }

    def describe(self) -> str:
        """``1.4.0 (pinned)``, ``1.4.0 (continues 1.3.0, 1.3.1)`` or ``unversioned``."""
        if self.version is None:
            return "unversioned"
        if not self.compatible:
            return f"{self.version} (pinned)"
        return f"{self.version} (continues {', '.join(self.compatible)})"


UNVERSIONED = Serving(version=None)
"""What a worker whose app declares no version serves: runs without a version."""

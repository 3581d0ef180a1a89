"""DurableArtifactService answers as ADK's artifact services do: a differential suite.

One script of calls runs through ADK's ``InMemoryArtifactService`` and through
``DurableArtifactService`` on SQLite and PostgreSQL, and every call's answer is
compared: the value returned (parts, version numbers, listings, version
metadata) or the type of the error raised. Ours may raise a subclass of ADK's
error (``ArtifactInputError`` is ADK's ``InputValidationError`` and our
``InvalidArgument`` at once), never another type.

ADK's services do not all agree on names: ``FileArtifactService`` refuses
rooted, drive-qualified and ``..`` file names that the in-memory service
stores. Such steps (``AS_FILE``) also run through a ``FileArtifactService`` on a
temporary directory, and ours must refuse as it does. The few steps where ours
refuses what ADK accepts (``REFUSED``) are the deliberate differences listed in
docs/adk-compat.md; a refused call must change nothing.

Then the same calls through ``adk api_server``'s routes (ADK's ``ApiServer`` in
process): a refused save is a 400 with ours as with ADK's, never a 500. And a
Hypothesis-drawn random sequence of calls over a small alphabet of names must
get the same answers from ADK's in-memory service and ours.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.adk.artifacts import FileArtifactService, InMemoryArtifactService
from google.adk.artifacts.base_artifact_service import ArtifactVersion, BaseArtifactService
from google.adk.errors.input_validation_error import InputValidationError
from google.genai import types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durable_adk import DurableArtifactService, errors
from durable_adk.adk.services.artifacts import MAX_FILENAME_BYTES, MAX_ID_BYTES
from durable_adk.store import Store

APP, USER, OTHER_USER, OTHER_APP = "parity", "alice", "bob", "elsewhere"


class Like(Enum):
    """Whose answer ours must give for a step."""

    MEMORY = "the same answer as InMemoryArtifactService"
    AS_FILE = "refused as FileArtifactService refuses it (InMemory stores it)"
    REFUSED = "refused by ours only: a deliberate difference (docs/adk-compat.md)"


@dataclass(frozen=True)
class Step:
    method: str
    kwargs: dict[str, Any]
    like: Like = Like.MEMORY


def blob(data: bytes, mime: str = "application/pdf") -> types.Part:
    return types.Part(inline_data=types.Blob(mime_type=mime, data=data))


def text(value: str) -> types.Part:
    return types.Part(text=value)


def ref(uri: str) -> types.Part:
    return types.Part(file_data=types.FileData(file_uri=uri))


def uri(filename: str, version: int, session: str | None = "s1", **scope: str) -> str:
    app, user = scope.get("app", APP), scope.get("user", USER)
    where = f"users/{user}/sessions/{session}" if session else f"users/{user}"
    return f"artifact://apps/{app}/{where}/artifacts/{filename}/versions/{version}"


def save(
    filename: str,
    artifact: types.Part | dict[str, Any],
    session: str | None = "s1",
    like: Like = Like.MEMORY,
    **more: Any,
) -> Step:
    kwargs = {"app_name": APP, "user_id": USER, "session_id": session, "filename": filename}
    return Step("save_artifact", {**kwargs, "artifact": artifact, **more}, like)


def call(method: str, filename: str, session: str | None = "s1", **more: Any) -> Step:
    like = more.pop("like", Like.MEMORY)
    kwargs = {"app_name": APP, "user_id": USER, "session_id": session, "filename": filename}
    return Step(method, {**kwargs, **more}, like)


def keys(session: str | None = "s1", **more: Any) -> Step:
    like = more.pop("like", Like.MEMORY)
    return Step(
        "list_artifact_keys",
        {"app_name": APP, "user_id": USER, "session_id": session, **more},
        like,
    )


def reads(filename: str, session: str | None = "s1", like: Like = Like.MEMORY) -> list[Step]:
    """Every read of one file: latest, versions, metadata."""
    return [
        call("load_artifact", filename, session, like=like),
        call("list_versions", filename, session, like=like),
        call("list_artifact_versions", filename, session, like=like),
        call("get_artifact_version", filename, session, like=like),
    ]


TOMBSTONE = types.Part(inline_data=types.Blob(mime_type="application/octet-stream", data=b""))

VERSIONS = [
    save("report.pdf", blob(b"v0")),
    save("report.pdf", blob(b"v1"), custom_metadata={"pages": 3, "tags": ["q1"]}),
    save("notes.txt", text("hello")),
    save("notes.csv", {"text": "a,b"}),  # a plain dict, as api_server hands it over
    save("report.pdf", blob(b"other session"), session="s2"),
    *reads("report.pdf"),
    *[call("load_artifact", "report.pdf", version=v) for v in (0, 1, 2, 99, -1, 2**64)],
    *[call("get_artifact_version", "report.pdf", version=v) for v in (0, 1, 2, -1, 2**64)],
    *reads("report.pdf", session="s2"),
    *reads("missing"),
    *reads("report.pdf", session="s3"),
    save("empty-text", text("")),
    *reads("empty-text"),
    save(
        "remote.png",
        types.Part(file_data=types.FileData(file_uri="gs://b/x", mime_type="image/png")),
    ),
    *reads("remote.png"),
    save("nothing", types.Part()),
    # A session rewind saves this marker: the version exists, the file loads as absent.
    save("report.pdf", TOMBSTONE),
    *reads("report.pdf"),
    call("load_artifact", "report.pdf", version=1),
]

USER_SCOPE = [
    save("user:prefs", text("dark")),
    save("user:prefs", text("light"), session=None),
    save("user:prefs", text("ignored session"), session=".."),  # a user: file ignores it
    *reads("user:prefs", session="s2"),
    *reads("user:prefs", session=None),
    call("load_artifact", "user:prefs", version=0),
    keys("s1"),
    keys("s2"),
    keys(None),
    save("report.pdf", blob(b"x"), session=None),  # session-scoped without a session
    *reads("report.pdf", session=None),
    call("delete_artifact", "report.pdf", session=None),
]

NAMESPACED = [
    save("reports/2024/q1.pdf", blob(b"q1")),
    save("reports/2024", blob(b"a directory in other services")),
    save("user:shared/diagram.png", blob(b"png", "image/png")),
    save("a\\b", text("backslash inside a name")),
    save(".", text("a dot")),
    save("a/./b", text("dot segment")),
    save("with space .txt", text("spaces")),
    *reads("reports/2024/q1.pdf"),
    *reads("reports/2024"),
    *reads("user:shared/diagram.png", session="s2"),
    *reads("a\\b"),
    *reads("."),
    keys("s1"),
    # Namespaced ids: '/' and '\\' inside an app, user or session id.
    Step(
        "save_artifact",
        {
            "app_name": "team/app",
            "user_id": "org/alice",
            "session_id": "chat/42",
            "filename": "doc",
            "artifact": text("namespaced"),
        },
    ),
    Step(
        "load_artifact",
        {
            "app_name": "team/app",
            "user_id": "org/alice",
            "session_id": "chat/42",
            "filename": "doc",
        },
    ),
    Step(
        "list_artifact_keys",
        {"app_name": "team/app", "user_id": "org/alice", "session_id": "chat/42"},
    ),
    Step(
        "get_artifact_version",
        {
            "app_name": "team/app",
            "user_id": "org/alice",
            "session_id": "chat/42",
            "filename": "doc",
        },
    ),
    Step(
        "save_artifact",
        {
            "app_name": APP,
            "user_id": "org\\alice",
            "session_id": "a\tb",
            "filename": "doc",
            "artifact": text("backslash and tab ids"),
        },
    ),
]

REFERENCES = [
    save("link", ref(uri("report.pdf", 0))),
    *reads("link"),
    save("user-link", ref(uri("user:prefs", 0, session=None))),
    *reads("user-link"),
    save("user:link", ref(uri("report.pdf", 1))),  # user-scoped, pointing into session s1
    call("load_artifact", "user:link"),
    call("load_artifact", "user:link", session="s2"),  # s2 may not follow it into s1
    save("dangling", ref(uri("report.pdf", 7))),
    call("load_artifact", "dangling"),
    save("loop", ref(uri("loop", 0))),
    call("load_artifact", "loop"),
    save("chain-1", ref(uri("link", 0))),
    call("load_artifact", "chain-1"),
    save("theirs", ref(uri("report.pdf", 0, user=OTHER_USER))),
    save("other-app", ref(uri("report.pdf", 0, app=OTHER_APP))),
    save("other-session", ref(uri("report.pdf", 0, session="s2"))),
    save("user:theirs", ref(uri("user:prefs", 0, session=None, user=OTHER_USER)), session=None),
    save("garbled", ref("artifact://nonsense")),
    save("no-version", ref("artifact://apps/parity/users/alice/artifacts/user:prefs")),
    keys("s1"),
]

DELETES = [
    call("delete_artifact", "report.pdf"),
    *reads("report.pdf"),
    call("load_artifact", "link"),  # its target is gone
    *reads("report.pdf", session="s2"),  # another session's file of that name stays
    keys("s1"),
    save("report.pdf", blob(b"again")),  # versions count from 0 again
    call("load_artifact", "link"),  # and the reference finds the new version 0
    call("delete_artifact", "never-saved"),
    call("delete_artifact", "user:prefs", session=None),
    *reads("user:prefs", session="s1"),
    keys("s1"),
    keys(None),
]

# Ids ADK's validate_path_segment refuses: blank, NUL, rooted, drive-qualified,
# traversal, and reserved segments beside a slash.
BAD_ID_VALUES = ["", " ", "\n", ".", "..", "a/../b", "C:x", "c:", "/abs", "\\abs", "a\x00b"]
BAD_ID_VALUES += ["a/users/b", "x/Sessions"]
# File names ADK's FileArtifactService refuses (rooted, drive-qualified, '..'),
# which its in-memory service stores.
FILE_REFUSES = ["..", "a/../b", "../x", "a\\..\\b", " ..", "C:x", "c:/x", "/abs", "\\abs"]
FILE_REFUSES += ["\\\\server\\share", "user:..", "user:../x", "user:C:x", "user:/abs"]
# File names ADK's in-memory service stores and ours refuses (docs/adk-compat.md);
# its file service stores the blank ones and fails on NUL (ValueError) and
# overlong ones (OSError).
OURS_REFUSES = ["", " ", "user:", "user: ", "a\x00b", "\ud800"]
OURS_REFUSES += ["x" * (MAX_FILENAME_BYTES + 1), "é" * (MAX_FILENAME_BYTES // 2 + 1)]

BAD_IDS = [
    *[
        Step("save_artifact", {**where, field: value, "filename": "f", "artifact": text("x")})
        for where in [{"app_name": APP, "user_id": USER, "session_id": "s1"}]
        for field in ("app_name", "user_id", "session_id")
        for value in BAD_ID_VALUES
    ],
    *[
        Step(method, {"app_name": APP, "user_id": USER, "session_id": sid, "filename": "f"})
        for method in ("load_artifact", "list_versions", "delete_artifact", "get_artifact_version")
        for sid in ("", "..", "C:x")
    ],
    # ADK's in-memory service keeps "user" for its user-scoped files: no
    # session-scoped file is saved under a session id starting with it.
    save("f", text("x"), session="user"),
    save("f", text("x"), session="user/1"),
    call("load_artifact", "f", session="user"),
    keys(""),
    keys(".."),
    Step("list_artifact_keys", {"app_name": "..", "user_id": USER}),
    Step("list_artifact_keys", {"app_name": APP, "user_id": "C:x", "session_id": "s1"}),
]

BAD_FILENAMES = [
    *[save(name, text("x"), like=Like.AS_FILE) for name in FILE_REFUSES],
    *reads("..", like=Like.AS_FILE),
    *reads("C:x", like=Like.AS_FILE),
    call("delete_artifact", "../x", like=Like.AS_FILE),
    *[save(name, text("x"), like=Like.REFUSED) for name in OURS_REFUSES],
    *reads("", like=Like.REFUSED),
    *reads("a\x00b", like=Like.REFUSED),
    save("x" * MAX_FILENAME_BYTES, text("the longest name")),
    save("user:" + "é" * ((MAX_FILENAME_BYTES - 5) // 2), text("the longest in two-byte letters")),
    Step(
        "save_artifact",
        {
            "app_name": APP,
            "user_id": "u" * (MAX_ID_BYTES + 1),
            "session_id": "s1",
            "filename": "f",
            "artifact": text("x"),
        },
        Like.REFUSED,
    ),
    Step(
        "save_artifact",
        {
            "app_name": APP,
            "user_id": "u" * MAX_ID_BYTES,
            "session_id": "s" * MAX_ID_BYTES,
            "filename": "f",
            "artifact": text("x"),
        },
    ),
    # Custom metadata is stored as JSON: an object that is not JSON is refused.
    save("meta", text("x"), custom_metadata={"when": object()}, like=Like.REFUSED),
    # A reference no call could follow (a session-scoped name without a session).
    save("dead-ref", ref(uri("report.pdf", 0, session=None)), like=Like.REFUSED),
    save("dead-ref", ref(uri("..", 0)), like=Like.REFUSED),
    keys("s1"),
]

SCRIPT = VERSIONS + USER_SCOPE + NAMESPACED + REFERENCES + DELETES + BAD_IDS + BAD_FILENAMES

# The scopes whose contents a refused call must leave alone.
SCOPES = [(APP, USER, "s1"), (APP, USER, "s2"), (APP, USER, None)]


def normal(value: Any) -> Any:
    """An answer in a comparable form (URIs without their scheme, no clock readings)."""
    if isinstance(value, types.Part):
        return ("part", value.model_dump(exclude_none=True))
    if isinstance(value, ArtifactVersion):
        assert isinstance(value.create_time, float)
        scheme, _, path = value.canonical_uri.partition("://")
        assert scheme
        return ("version", value.version, path, value.custom_metadata, value.mime_type)
    if isinstance(value, list):
        return [normal(v) for v in value]
    return value


@dataclass(frozen=True)
class Outcome:
    value: Any = None
    error: BaseException | None = None

    def __str__(self) -> str:
        if self.error is not None:
            return f"raised {type(self.error).__name__}: {self.error}"
        return f"returned {self.value!r:.300}"


async def outcome(service: BaseArtifactService, step: Step) -> Outcome:
    try:
        value = await getattr(service, step.method)(**step.kwargs)
    except Exception as exc:  # the type is what is compared
        return Outcome(error=exc)
    return Outcome(value=normal(value))


async def footprint(service: BaseArtifactService) -> dict[Any, Any]:
    """Every file of the script's main scopes with its versions."""
    seen: dict[Any, Any] = {}
    for app, user, session in SCOPES:
        for name in await service.list_artifact_keys(
            app_name=app, user_id=user, session_id=session
        ):
            where = {"app_name": app, "user_id": user, "session_id": session, "filename": name}
            seen[(session, name)] = await service.list_versions(**where)
    return seen


def check_refusal(ours: Outcome, step: Step) -> None:
    """Ours refused with ADK's error type, which is also our InvalidArgument."""
    assert isinstance(ours.error, InputValidationError), f"{step}: ours {ours}"
    assert isinstance(ours.error, errors.InvalidArgument), f"{step}: ours {ours}"


async def run_script(ours: DurableArtifactService, tmp_path: Path) -> None:
    memory = InMemoryArtifactService()
    on_disk = FileArtifactService(tmp_path / "adk-files")
    for number, step in enumerate(SCRIPT):
        where = f"step {number} {step.method}({step.kwargs!r:.200}) [{step.like.name}]"
        mutates = step.method in ("save_artifact", "delete_artifact")
        before = await footprint(ours) if mutates and step.like is not Like.MEMORY else None
        # A step ADK accepts and ours refuses runs on a fresh in-memory service,
        # so what ADK stored does not make the script's later answers differ.
        theirs = memory if step.like is Like.MEMORY else InMemoryArtifactService()
        adk, mine = await outcome(theirs, step), await outcome(ours, step)
        if step.like is Like.MEMORY:
            if adk.error is None:
                assert mine.error is None, f"{where}: ADK {adk}, ours {mine}"
                assert mine.value == adk.value, f"{where}: ADK {adk}, ours {mine}"
            else:
                assert isinstance(mine.error, type(adk.error)), f"{where}: ADK {adk}, ours {mine}"
                if isinstance(adk.error, InputValidationError):
                    check_refusal(mine, step)
            continue
        assert adk.error is None, f"{where}: InMemory was expected to accept it: {adk}"
        if step.like is Like.AS_FILE:
            disk = await outcome(on_disk, step)
            assert isinstance(disk.error, InputValidationError), f"{where}: File {disk}"
        check_refusal(mine, step)
        if before is not None:
            assert await footprint(ours) == before, f"{where}: a refused call changed the store"


async def test_one_script_answers_as_adks_services_do(store: Store, tmp_path: Path) -> None:
    await run_script(DurableArtifactService(store), tmp_path)


# Regression tests, one per defect users found (each failed before the fix).


async def test_an_invalid_name_raises_adks_input_validation_error(store: Store) -> None:
    service = DurableArtifactService(store)
    for name in ("", "a\x00b", "x" * 5000):
        with pytest.raises(InputValidationError) as raised:
            await service.save_artifact(
                app_name=APP, user_id=USER, session_id="s1", filename=name, artifact=text("x")
            )
        assert isinstance(raised.value, errors.InvalidArgument)  # still caught as ours too


@pytest.mark.parametrize("field", ["app_name", "user_id", "session_id"])
@pytest.mark.parametrize("value", [".", "..", "C:x", "\\x"])
async def test_dot_drive_and_backslash_ids_are_refused(
    store: Store, field: str, value: str
) -> None:
    service = DurableArtifactService(store)
    kwargs = {"app_name": APP, "user_id": USER, "session_id": "s1", field: value}
    with pytest.raises(InputValidationError):
        await service.save_artifact(filename="f", artifact=text("x"), **kwargs)
    assert await service.list_artifact_keys(app_name=APP, user_id=USER, session_id="s1") == []


async def test_ids_with_a_slash_are_accepted(store: Store) -> None:
    service = DurableArtifactService(store)
    where = {"app_name": "team/app", "user_id": "org/alice", "session_id": "chat/1"}
    assert await service.save_artifact(filename="doc", artifact=text("x"), **where) == 0
    assert await service.load_artifact(filename="doc", **where) == text("x")
    assert await service.list_artifact_keys(**where) == ["doc"]


@pytest.mark.parametrize(
    "target",
    [
        uri("r", 0, user=OTHER_USER),
        uri("r", 0, app=OTHER_APP),
        uri("user:r", 0, session=None, user=OTHER_USER),
        uri("r", 0, session="s2"),
    ],
)
async def test_a_reference_out_of_the_callers_scope_is_refused(store: Store, target: str) -> None:
    service = DurableArtifactService(store)
    with pytest.raises(InputValidationError):
        await service.save_artifact(
            app_name=APP, user_id=USER, session_id="s1", filename="link", artifact=ref(target)
        )
    assert await service.list_artifact_keys(app_name=APP, user_id=USER, session_id="s1") == []


async def test_keys_sort_by_code_point_on_both_backends(store: Store) -> None:
    """ADK sorts with Python's sorted(); a database collation must not reorder them."""
    service = DurableArtifactService(store)
    names = ["b", "B", "a-b", "a_b", "ab", "é", "Z", "user:x", "10", "9", "a b"]
    for name in names:
        await service.save_artifact(
            app_name=APP, user_id=USER, session_id="s1", filename=name, artifact=text(name)
        )
    assert await service.list_artifact_keys(app_name=APP, user_id=USER, session_id="s1") == sorted(
        names
    )


async def test_the_longest_names_fit_in_the_key_on_both_backends(store: Store) -> None:
    """Random four-byte letters (nothing for PostgreSQL to compress) at every cap at once."""
    rng = random.Random(7)

    def letters(size: int) -> str:
        return "".join(chr(rng.randint(0x1F300, 0x1F5FF)) for _ in range(size // 4))

    service = DurableArtifactService(store)
    where = {
        "app_name": letters(MAX_ID_BYTES),
        "user_id": letters(MAX_ID_BYTES),
        "session_id": letters(MAX_ID_BYTES),
        "filename": letters(MAX_FILENAME_BYTES),
    }
    assert await service.save_artifact(artifact=text("fits"), **where) == 0
    assert await service.load_artifact(**where) == text("fits")


# The same calls through adk api_server's routes.


def api_server(artifacts: BaseArtifactService, root: Path) -> Any:
    from google.adk.auth.credential_service.in_memory_credential_service import (
        InMemoryCredentialService,
    )
    from google.adk.cli.api_server import ApiServer
    from google.adk.cli.utils.agent_loader import AgentLoader
    from google.adk.evaluation.local_eval_set_results_manager import (
        LocalEvalSetResultsManager,
    )
    from google.adk.evaluation.local_eval_sets_manager import LocalEvalSetsManager
    from google.adk.memory import InMemoryMemoryService
    from google.adk.sessions import InMemorySessionService

    root.mkdir(parents=True, exist_ok=True)
    server = ApiServer(
        agent_loader=AgentLoader(str(root)),
        session_service=InMemorySessionService(),
        memory_service=InMemoryMemoryService(),
        artifact_service=artifacts,
        credential_service=InMemoryCredentialService(),
        eval_sets_manager=LocalEvalSetsManager(str(root)),
        eval_set_results_manager=LocalEvalSetResultsManager(str(root)),
        agents_dir=str(root),
    )
    return server.get_fast_api_app()


SAVES = [
    # user, session, filename: status from ADK's in-memory service, its file service, ours
    ("u1", "s1", "report.pdf", 200, 200, 200),
    ("u1", "s1", "reports/q1.pdf", 200, 200, 200),
    ("org:alice", "s1", "doc", 200, 200, 200),
    ("C:x", "s1", "doc", 400, 400, 400),
    ("u1", "C:x", "doc", 400, 400, 400),
    ("u1", "user", "doc", 400, 200, 400),  # the in-memory service reserves "user"
    ("u1", "s1", "../escape", 200, 400, 400),
    ("u1", "s1", "C:\\escape", 200, 400, 400),
    ("u1", "s1", "", 200, 200, 400),
    # The file service cannot hold a name this long on disk: an OSError, a 500.
    ("u1", "s1", "x" * (MAX_FILENAME_BYTES + 1), 200, 500, 400),
]


async def answers(artifacts: BaseArtifactService, root: Path) -> list[Any]:
    """The status of each save of SAVES, then the listing of u1/s1."""
    app = api_server(artifacts, root)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    out: list[Any] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        for user, session, filename, *_ in SAVES:
            body = {"filename": filename, "artifact": {"text": "x"}}
            answer = await client.post(
                f"/apps/a/users/{user}/sessions/{session}/artifacts", json=body
            )
            out.append(answer.status_code)
        listed = await client.get("/apps/a/users/u1/sessions/s1/artifacts")
        out.append(listed.json())
    return out


@pytest.mark.filterwarnings("ignore::UserWarning")
async def test_api_server_answers_400_for_what_ours_refuses(store: Store, tmp_path: Path) -> None:
    memory = await answers(InMemoryArtifactService(), tmp_path / "m")
    on_disk = await answers(FileArtifactService(tmp_path / "files"), tmp_path / "f")
    ours = await answers(DurableArtifactService(store), tmp_path / "o")
    assert memory[:-1] == [row[3] for row in SAVES]
    assert on_disk[:-1] == [row[4] for row in SAVES]
    assert ours[:-1] == [row[5] for row in SAVES]
    assert ours[-1] == ["report.pdf", "reports/q1.pdf"]
    # The file service stored the blank name as "artifact" (its placeholder).
    assert on_disk[-1] == ["artifact", "report.pdf", "reports/q1.pdf"]


# A random sequence of calls, the same answers from ADK's in-memory service and ours.

NAMES = ["a", "b/c", "user:a", "user:d/e"]
SESSIONS = ["s1", "s2", None]
parts = st.one_of(
    st.builds(text, st.sampled_from(["x", "y", ""])),
    st.builds(blob, st.sampled_from([b"1", b"22"]), st.sampled_from(["image/png", "text/csv"])),
    # References into s1, s2 or the user's scope (a session-less reference to a
    # session-scoped name is one ours refuses: see the script).
    st.builds(
        lambda target, version: ref(uri(target[0], version, target[1])),
        st.sampled_from(
            [(n, s) for n in NAMES for s in SESSIONS if s is not None or n.startswith("user:")]
        ),
        st.integers(0, 2),
    ),
)
calls = st.one_of(
    st.tuples(
        st.just("save_artifact"),
        st.fixed_dictionaries(
            {
                "filename": st.sampled_from(NAMES),
                "session_id": st.sampled_from(SESSIONS),
                "artifact": parts,
                "custom_metadata": st.one_of(st.none(), st.just({"k": 1})),
            }
        ),
    ),
    st.tuples(
        st.sampled_from(["load_artifact", "get_artifact_version"]),
        st.fixed_dictionaries(
            {
                "filename": st.sampled_from(NAMES),
                "session_id": st.sampled_from(SESSIONS),
                "version": st.one_of(st.none(), st.integers(-1, 3)),
            }
        ),
    ),
    st.tuples(
        st.sampled_from(["list_versions", "list_artifact_versions", "delete_artifact"]),
        st.fixed_dictionaries(
            {"filename": st.sampled_from(NAMES), "session_id": st.sampled_from(SESSIONS)}
        ),
    ),
    st.tuples(
        st.just("list_artifact_keys"),
        st.fixed_dictionaries({"session_id": st.sampled_from(SESSIONS)}),
    ),
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sequence=st.lists(calls, min_size=1, max_size=20))
async def test_a_random_sequence_answers_as_adks_in_memory_service(
    store: Store, sequence: list[tuple[str, dict[str, Any]]]
) -> None:
    app = f"h{uuid.uuid4().hex[:12]}"  # a fresh namespace in the shared store
    memory, ours = InMemoryArtifactService(), DurableArtifactService(store)
    for method, kwargs in sequence:
        if method == "save_artifact" and kwargs["artifact"].file_data is not None:
            # References name the app: point them at this example's.
            target = str(kwargs["artifact"].file_data.file_uri).replace(
                f"apps/{APP}/", f"apps/{app}/"
            )
            kwargs = {**kwargs, "artifact": ref(target)}
        step = Step(method, {"app_name": app, "user_id": USER, **kwargs})
        adk, mine = await outcome(memory, step), await outcome(ours, step)
        if adk.error is None:
            assert mine.error is None and mine.value == adk.value, f"{step}: ADK {adk}, ours {mine}"
        else:
            assert isinstance(mine.error, type(adk.error)), f"{step}: ADK {adk}, ours {mine}"

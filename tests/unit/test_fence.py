"""RunFence: trusted until its local deadline, undecided past it, lost for good."""

from __future__ import annotations

import asyncio
import time

import pytest

from durable_adk import errors
from durable_adk.fencing.fence import (
    FENCE_EPOCH_HEADER,
    FENCE_EXPIRED,
    FENCE_HEADERS,
    FENCE_RUN_HEADER,
    FENCE_SUPERSEDED,
    FENCE_VALID_UNTIL_HEADER,
    FenceToken,
    RunFence,
    current_fence,
    fence_headers,
    using_fence,
)


async def test_a_fence_is_trusted_until_its_deadline_then_undecided_until_renewed() -> None:
    fence = RunFence("run-1", 3, trusted_until=time.monotonic() + 60)
    assert fence.trusted() and fence.lost is None
    fence.check()
    await fence.confirm()
    past = RunFence("run-1", 3, trusted_until=time.monotonic() - 1)
    assert not past.trusted()
    with pytest.raises(errors.Fenced, match="not renewed in time"):
        past.check()
    past.check_not_lost()  # undecided is not lost
    waiting = asyncio.create_task(past.confirm())
    await asyncio.sleep(0.05)
    assert not waiting.done()  # waits for the heartbeat's verdict
    past.renewed(time.monotonic() + 60)  # a renewal at our epoch: trust comes back
    await asyncio.wait_for(waiting, 5)
    assert past.trusted()


async def test_a_lost_fence_refuses_for_good() -> None:
    fence = RunFence("run-1", 3, trusted_until=time.monotonic() - 1)
    waiting = asyncio.create_task(fence.confirm())
    await asyncio.sleep(0.05)
    fence.lose("the run was taken over")
    with pytest.raises(errors.Fenced, match="taken over"):
        await asyncio.wait_for(waiting, 5)
    fence.renewed(time.monotonic() + 60)  # too late: a lost fence never comes back
    fence.lose("second reason")
    assert fence.lost == "the run was taken over" and not fence.trusted()
    with pytest.raises(errors.Fenced):
        fence.check()
    with pytest.raises(errors.Fenced):
        await fence.confirm()
    assert await asyncio.wait_for(fence.wait_lost(), 5) == "the run was taken over"


async def test_the_current_fence_is_set_only_inside_its_block() -> None:
    fence = RunFence("run-1", 1, trusted_until=time.monotonic() + 60)
    assert current_fence() is None
    with using_fence(fence):
        assert current_fence() is fence

        async def in_a_child_task() -> RunFence | None:
            return current_fence()

        assert await asyncio.create_task(in_a_child_task()) is fence
        assert await asyncio.to_thread(current_fence) is fence
    assert current_fence() is None


def test_a_trusted_fence_gives_headers_whose_valid_until_is_its_deadline_on_the_wall_clock() -> (
    None
):
    fence = RunFence("run-7", 4, trusted_until=time.monotonic() + 30)
    before = time.time()
    headers = fence.headers()
    after = time.time()
    assert set(headers) == set(FENCE_HEADERS)
    assert headers[FENCE_RUN_HEADER] == "run-7" and headers[FENCE_EPOCH_HEADER] == "4"
    until = float(headers[FENCE_VALID_UNTIL_HEADER])
    assert before + 29 < until <= after + 30  # the local deadline, read now, never later
    token = FenceToken.from_headers(headers)
    assert token is not None and (token.run_id, token.epoch) == ("run-7", 4)
    assert token.valid_until == until


def test_fence_headers_are_empty_outside_a_run_and_refused_once_the_lease_is_not_trusted() -> None:
    assert fence_headers() == {}
    fence = RunFence("run-1", 2, trusted_until=time.monotonic() + 60)
    with using_fence(fence):
        assert fence_headers()[FENCE_EPOCH_HEADER] == "2"
    past = RunFence("run-1", 2, trusted_until=time.monotonic() - 1)
    with using_fence(past), pytest.raises(errors.Fenced, match="not renewed in time"):
        fence_headers()
    fence.lose("taken over")
    with using_fence(fence), pytest.raises(errors.Fenced, match="taken over"):
        fence_headers()


def test_a_token_is_refused_past_its_valid_until_or_below_the_highest_epoch_seen() -> None:
    token = FenceToken("run-1", 3, valid_until=1000.0)
    assert token.refusal(now=999.0, highest_epoch=None) is None
    assert token.refusal(now=999.0, highest_epoch=3) is None
    assert token.refusal(now=999.0, highest_epoch=2) is None
    assert token.refusal(now=1000.0, highest_epoch=None) == FENCE_EXPIRED
    assert token.refusal(now=999.0, highest_epoch=4) == FENCE_SUPERSEDED
    assert token.refusal(now=2000.0, highest_epoch=4) == FENCE_SUPERSEDED


@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        ({FENCE_RUN_HEADER: "r", FENCE_EPOCH_HEADER: "1"}, "missing"),
        ({FENCE_RUN_HEADER: "", FENCE_EPOCH_HEADER: "1", FENCE_VALID_UNTIL_HEADER: "5"}, "Run"),
        ({FENCE_RUN_HEADER: "r", FENCE_EPOCH_HEADER: "x", FENCE_VALID_UNTIL_HEADER: "5"}, "Epoch"),
        (
            {FENCE_RUN_HEADER: "r", FENCE_EPOCH_HEADER: "1", FENCE_VALID_UNTIL_HEADER: "inf"},
            "Valid",
        ),
        ({FENCE_RUN_HEADER: "r", FENCE_EPOCH_HEADER: "1", FENCE_VALID_UNTIL_HEADER: "-3"}, "Valid"),
    ],
)
def test_incomplete_or_malformed_fence_headers_are_invalid(
    headers: dict[str, str], problem: str
) -> None:
    with pytest.raises(errors.InvalidArgument, match=problem):
        FenceToken.from_headers(headers)
    assert FenceToken.from_headers({"Content-Type": "application/json"}) is None

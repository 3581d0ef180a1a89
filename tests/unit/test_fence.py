"""RunFence: trusted until its local deadline, undecided past it, lost for good."""

from __future__ import annotations

import asyncio
import time

import pytest

from durable_adk import errors
from durable_adk.fence import RunFence, current_fence, using_fence


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

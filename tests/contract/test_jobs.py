"""The job table on both backends (DESIGN.md 3.5): create, attach, complete, claim, expire."""

from __future__ import annotations

import asyncio

import pytest

from durable_adk import errors
from durable_adk.effect_tables.jobs import JobNotFound, JobState, JobTable
from durable_adk.store import Store, open_store

CALL = {
    "app_name": "shop",
    "user_id": "u1",
    "session_id": "s1",
    "invocation_id": "e-1",
    "function_call_id": "call-1",
}


async def started(jobs: JobTable, job_id: str = "report:2026-Q3:EMEA", **call: str) -> None:
    await jobs.create(job_id, tool_name="start_report", deadline=60, request={"q": "2026-Q3"})
    await jobs.attach(job_id, **{**CALL, **call})


async def test_create_is_idempotent(store: Store) -> None:
    jobs = JobTable(store)
    job, created = await jobs.create(
        "report:2026-Q3:EMEA", tool_name="start_report", deadline=60, request={"q": "2026-Q3"}
    )
    again, created_again = await jobs.create(
        "report:2026-Q3:EMEA", tool_name="other", deadline=1, request={"q": "x"}
    )
    assert (created, created_again) == (True, False)
    assert again == job
    assert job.state is JobState.STARTED and job.request == {"q": "2026-Q3"}
    assert job.deadline_at - job.created_at == pytest.approx(60, abs=1)
    assert not job.attached


async def test_attach_fills_only_empty_columns(store: Store) -> None:
    jobs = JobTable(store)
    await jobs.create("j", tool_name="t", deadline=60)
    first = await jobs.attach("j", **CALL)
    second = await jobs.attach("j", **{**CALL, "function_call_id": "call-2", "session_id": "s9"})
    assert first.attached and first.function_call_id == "call-1"
    assert (second.function_call_id, second.session_id) == ("call-1", "s1")
    with pytest.raises(JobNotFound):
        await jobs.attach("nope", **CALL)


async def test_submission_is_won_once(store: Store) -> None:
    jobs = JobTable(store)
    await jobs.create("j", tool_name="t", deadline=60)
    wins = await asyncio.gather(*(jobs.mark_submitted("j") for _ in range(5)))
    assert sorted(wins) == [False, False, False, False, True]
    job = await jobs.get("j")
    assert job is not None and job.submitted_at is not None


async def test_first_terminal_result_wins_and_duplicates_succeed(store: Store) -> None:
    jobs = JobTable(store)
    await started(jobs)
    first = await jobs.complete("report:2026-Q3:EMEA", JobState.SUCCEEDED, {"url": "u1"})
    duplicate = await jobs.complete("report:2026-Q3:EMEA", "SUCCEEDED", {"url": "u1"})
    late = await jobs.complete("report:2026-Q3:EMEA", JobState.FAILED, {"error": "late"})
    assert (first.changed, duplicate.changed, late.changed) == (True, False, False)
    for outcome in (duplicate, late):
        assert outcome.job.state is JobState.SUCCEEDED and outcome.job.result == {"url": "u1"}
    assert first.job.completed_at is not None


async def test_completion_of_unknown_job_or_bad_state_changes_nothing(store: Store) -> None:
    jobs = JobTable(store)
    with pytest.raises(JobNotFound):
        await jobs.complete("nope", JobState.SUCCEEDED, {})
    await started(jobs)
    for bad in ("EXPIRED", "STARTED", "DONE"):
        with pytest.raises(errors.InvalidArgument):
            await jobs.complete("report:2026-Q3:EMEA", bad, {})
    with pytest.raises(errors.InvalidArgument):
        await jobs.complete("report:2026-Q3:EMEA", JobState.SUCCEEDED, {"x": object()})
    job = await jobs.get("report:2026-Q3:EMEA")
    assert job is not None and job.state is JobState.STARTED and job.result is None


async def test_completion_before_attach_is_kept_and_resumed_once_attached(store: Store) -> None:
    jobs = JobTable(store)
    await jobs.create("j", tool_name="t", deadline=60)
    done = await jobs.complete("j", JobState.SUCCEEDED, {"rows": 3})
    assert done.changed and not done.job.attached
    assert await jobs.claim_for_resume("r1") == []  # one half only: nothing to answer
    await jobs.attach("j", **CALL)
    claimed = await jobs.claim_for_resume("r1")
    assert [j.job_id for j in claimed] == ["j"] and claimed[0].result == {"rows": 3}
    assert await jobs.mark_resumed("r1", claimed, "run-1") == {"j"}
    assert await jobs.claim_for_resume("r2") == []
    job = await jobs.get("j")
    assert job is not None and job.resume_run_id == "run-1" and job.resumed_at is not None


async def test_a_claim_whose_resumer_died_is_claimable_after_its_lease(store: Store) -> None:
    jobs = JobTable(store)
    await started(jobs, "j")
    await jobs.complete("j", JobState.SUCCEEDED, {})
    dead = await jobs.claim_for_resume("dead", lease=30)
    assert len(dead) == 1 and await jobs.claim_for_resume("fresh") == []
    await jobs.backdate("j", 60)  # the lease runs out on the database clock
    fresh = await jobs.claim_for_resume("fresh")
    assert len(fresh) == 1 and fresh[0].resume_epoch == dead[0].resume_epoch + 1
    # The dead claim is fenced: it can neither mark nor release the job.
    assert await jobs.mark_resumed("dead", dead, "run-dead") == set()
    assert await jobs.release("dead", dead) == set()
    assert await jobs.mark_resumed("fresh", fresh, "run-fresh") == {"j"}


async def test_release_makes_a_claim_ready_again(store: Store) -> None:
    jobs = JobTable(store)
    await started(jobs, "j")
    await jobs.complete("j", JobState.FAILED, {"error": "x"})
    claimed = await jobs.claim_for_resume("r1")
    assert await jobs.release("r1", claimed) == {"j"}
    assert [j.job_id for j in await jobs.claim_for_resume("r2")] == ["j"]


async def test_claims_filter_by_app(store: Store) -> None:
    jobs = JobTable(store)
    await started(jobs, "j")
    await jobs.complete("j", JobState.SUCCEEDED, {})
    assert await jobs.claim_for_resume("r", app_name="other") == []
    assert len(await jobs.claim_for_resume("r", app_name="shop")) == 1


async def test_a_finished_call_waits_for_its_open_sibling_up_to_gather(store: Store) -> None:
    jobs = JobTable(store)
    await started(jobs, "a", function_call_id="call-a")
    await started(jobs, "b", function_call_id="call-b")
    await jobs.complete("a", JobState.SUCCEEDED, {})
    assert await jobs.claim_for_resume("r", gather=30) == []  # b is still open
    await jobs.complete("b", JobState.SUCCEEDED, {})
    both = await jobs.claim_for_resume("r", gather=30)
    assert sorted(j.job_id for j in both) == ["a", "b"]
    # Past the gather window a job goes alone.
    await started(jobs, "c", function_call_id="call-c", invocation_id="e-2")
    await started(jobs, "d", function_call_id="call-d", invocation_id="e-2")
    await jobs.complete("c", JobState.SUCCEEDED, {})
    await jobs.backdate("c", 60)
    assert [j.job_id for j in await jobs.claim_for_resume("r", gather=30)] == ["c"]


async def test_two_resumers_racing_one_wins_50_times(store_url: str) -> None:
    async with open_store(store_url) as one, open_store(store_url) as two:
        first, second = JobTable(one), JobTable(two)
        for i in range(50):
            job_id = f"race-{i}"
            await started(first, job_id, function_call_id=f"call-{i}", invocation_id=f"e-{i}")
            await first.complete(job_id, JobState.SUCCEEDED, {"i": i})
            a, b = await asyncio.gather(
                first.claim_for_resume("r1", limit=1), second.claim_for_resume("r2", limit=1)
            )
            winners = [j.job_id for j in a + b]
            assert winners == [job_id], f"round {i}: {winners}"
            owner, table, mine = ("r1", first, a) if a else ("r2", second, b)
            assert await table.mark_resumed(owner, mine, f"run-{i}") == {job_id}


async def test_progress_is_recorded_only_when_changed_and_throttled(store: Store) -> None:
    jobs = JobTable(store)
    await started(jobs, "j")
    assert await jobs.progress("j", {"percent": 10})
    assert not await jobs.progress("j", {"percent": 10})  # unchanged: nothing written
    first = await jobs.claim_progress(interval=60)
    assert [j.progress_sent for j in first] == [{"percent": 10}]
    assert await jobs.claim_progress(interval=60) == []  # nothing new
    assert await jobs.progress("j", {"percent": 40})
    assert await jobs.claim_progress(interval=60) == []  # changed, but within the interval
    await jobs.backdate("j", 61)
    assert [j.progress_sent for j in await jobs.claim_progress(interval=60)] == [{"percent": 40}]
    await jobs.complete("j", JobState.SUCCEEDED, {})
    assert not await jobs.progress("j", {"percent": 99})  # a finished job takes no progress


async def test_expiry_then_a_late_result_is_a_no_op(store: Store) -> None:
    jobs = JobTable(store)
    await started(jobs, "old")
    await started(jobs, "fresh", function_call_id="call-2")
    assert await jobs.expire() == []
    await jobs.backdate("old", 120)
    expired = await jobs.expire(result={"status": "expired", "message": "too slow"})
    assert [j.job_id for j in expired] == ["old"]
    assert expired[0].state is JobState.EXPIRED
    assert expired[0].result == {"status": "expired", "message": "too slow"}
    assert await jobs.expire() == []
    late = await jobs.complete("old", JobState.SUCCEEDED, {"url": "late"})
    assert not late.changed and late.job.state is JobState.EXPIRED
    assert late.job.result == {"status": "expired", "message": "too slow"}


async def test_list_and_get(store: Store) -> None:
    jobs = JobTable(store)
    await started(jobs, "a")
    await started(jobs, "b", session_id="s2")
    await jobs.complete("b", JobState.CANCELLED, {})
    assert await jobs.get("nope") is None
    assert {j.job_id for j in await jobs.list_jobs()} == {"a", "b"}
    assert [j.job_id for j in await jobs.list_jobs(state=JobState.CANCELLED)] == ["b"]
    assert [j.job_id for j in await jobs.list_jobs(session_id="s1")] == ["a"]


async def test_bad_arguments_are_refused_before_writing(store: Store) -> None:
    jobs = JobTable(store)
    for kwargs in ({"job_id": ""}, {"deadline": 0}, {"tool_name": ""}):
        args = {"job_id": "j", "tool_name": "t", "deadline": 5.0, **kwargs}
        with pytest.raises(errors.InvalidArgument):
            await jobs.create(
                str(args["job_id"]),
                tool_name=str(args["tool_name"]),
                deadline=float(args["deadline"]),
            )
    assert await jobs.list_jobs() == []


# ------------------------------------------------- every attached call is answered


async def test_a_second_call_of_one_job_is_kept_and_answered_on_its_own(store: Store) -> None:
    jobs = JobTable(store)
    await started(jobs, "j")  # call-1 in s1
    other = {**CALL, "session_id": "s2", "invocation_id": "e-9", "function_call_id": "call-9"}
    again = await jobs.attach("j", **other)
    assert again.function_call_id == "call-1"  # the row keeps its first call
    await jobs.attach("j", **other)  # a replay of the second attach: still one extra call
    await jobs.attach("j", **CALL)  # a replay of the first: not an extra call
    calls = await jobs.calls("j")
    assert [(c.session_id, c.invocation_id, c.function_call_id) for c in calls] == [
        ("s2", "e-9", "call-9")
    ]
    assert await jobs.claim_for_resume("r") == []  # not finished yet
    await jobs.complete("j", JobState.SUCCEEDED, {"rows": 3})
    claimed = await jobs.claim_for_resume("r", gather=0)
    seen = sorted((j.session_id, j.invocation_id, j.function_call_id) for j in claimed)
    assert seen == [("s1", "e-1", "call-1"), ("s2", "e-9", "call-9")]
    assert all(j.result == {"rows": 3} and j.job_id == "j" for j in claimed)
    assert await jobs.claim_for_resume("r2", gather=0) == []  # each call held once
    first = next(j for j in claimed if j.session_id == "s1")
    second = next(j for j in claimed if j.session_id == "s2")
    # Marking one call's run leaves the other call's claim as it was.
    assert await jobs.mark_resumed("r", [second], "run-s2") == {"j"}
    job = await jobs.get("j")
    assert job is not None and job.resumed_at is None and job.resume_run_id is None
    assert [c.resume_run_id for c in await jobs.calls("j")] == ["run-s2"]
    assert await jobs.release("r", [first]) == {"j"}
    again_claimed = await jobs.claim_for_resume("r3", gather=0)
    assert [(j.session_id, j.function_call_id) for j in again_claimed] == [("s1", "call-1")]
    assert await jobs.mark_resumed("r3", again_claimed, "run-s1") == {"j"}
    assert await jobs.claim_for_resume("r4", gather=0) == []
    job = await jobs.get("j")
    assert job is not None and job.resume_run_id == "run-s1"


async def test_a_call_attaching_after_the_job_was_answered_is_answered_too(store: Store) -> None:
    jobs = JobTable(store)
    await started(jobs, "j")
    await jobs.complete("j", JobState.FAILED, {"error": "x"})
    first = await jobs.claim_for_resume("r", gather=0)
    await jobs.mark_resumed("r", first, "run-1")
    late = {**CALL, "invocation_id": "e-2", "function_call_id": "call-2"}
    await jobs.attach("j", **late)
    claimed = await jobs.claim_for_resume("r", gather=0)
    assert [(j.function_call_id, j.state) for j in claimed] == [("call-2", JobState.FAILED)]


async def test_a_dead_claim_on_a_second_call_is_fenced_and_taken_over(store: Store) -> None:
    jobs = JobTable(store)
    await started(jobs, "j")
    await jobs.attach("j", **{**CALL, "session_id": "s2", "function_call_id": "call-2"})
    await jobs.complete("j", JobState.SUCCEEDED, {})
    dead = await jobs.claim_for_resume("dead", gather=0, lease=30)
    assert len(dead) == 2
    await jobs.backdate("j", 60)  # both claims run out
    fresh = await jobs.claim_for_resume("fresh", gather=0)
    assert len(fresh) == 2
    assert await jobs.mark_resumed("dead", dead, "run-dead") == set()
    assert await jobs.mark_resumed("fresh", fresh, "run-fresh") == {"j"}
    assert [c.resume_run_id for c in await jobs.calls("j")] == ["run-fresh"]


async def test_an_open_second_call_holds_back_its_sibling_up_to_gather(store: Store) -> None:
    jobs = JobTable(store)
    await started(jobs, "a", function_call_id="call-a", invocation_id="e-7")
    await started(jobs, "b", function_call_id="call-b", invocation_id="e-1")
    # b's job is also called from invocation e-7, still open.
    await jobs.attach("b", **{**CALL, "invocation_id": "e-7", "function_call_id": "call-b7"})
    await jobs.complete("a", JobState.SUCCEEDED, {})
    assert await jobs.claim_for_resume("r", gather=30) == []
    await jobs.complete("b", JobState.SUCCEEDED, {})
    got = await jobs.claim_for_resume("r", gather=30)
    assert sorted(j.function_call_id or "" for j in got) == ["call-a", "call-b", "call-b7"]


# ------------------------------------------------------- submission until accepted


async def test_a_submission_attempt_is_held_by_one_claimer(store: Store) -> None:
    jobs = JobTable(store)
    await jobs.create("j", tool_name="t", deadline=60)
    attempts = await asyncio.gather(*(jobs.claim_submit("j", lease=30) for _ in range(5)))
    won = [a for a in attempts if a]
    assert len(won) == 1 and won[0][0].submit_attempts == 1
    assert await jobs.claim_submit(lease=30) == []  # held by the attempt's lease


async def test_a_failed_submission_backs_off_then_is_retried_until_accepted(store: Store) -> None:
    jobs = JobTable(store)
    await jobs.create("j", tool_name="t", deadline=600)
    [first] = await jobs.claim_submit(tools=["t"], lease=30)
    assert await jobs.submit_failed("j", first.submit_attempts, "503", retry_in=20)
    job = await jobs.get("j")
    assert job is not None and job.submit_error == "503" and job.submitted_at is None
    assert await jobs.claim_submit(lease=30) == []  # backing off
    await jobs.backdate_submit("j", 21)
    [second] = await jobs.claim_submit(lease=30)
    assert second.submit_attempts == 2
    # The first attempt's late failure does not move the second one's lease.
    assert not await jobs.submit_failed("j", first.submit_attempts, "late", retry_in=0)
    assert await jobs.mark_submitted("j")
    assert not await jobs.mark_submitted("j")
    job = await jobs.get("j")
    assert job is not None and job.submitted_at is not None and job.submit_error is None
    await jobs.backdate_submit("j", 3600)
    assert await jobs.claim_submit(lease=30) == []  # accepted: never again
    assert job.deadline_at == pytest.approx((await jobs.get("j")).deadline_at)  # type: ignore[union-attr]


async def test_a_submission_is_not_attempted_past_the_deadline_or_for_other_tools(
    store: Store,
) -> None:
    jobs = JobTable(store)
    await jobs.create("late", tool_name="t", deadline=60)
    await jobs.create("other", tool_name="u", deadline=60)
    await jobs.backdate("late", 120)
    assert await jobs.claim_submit(tools=["t"], lease=30) == []
    assert [j.job_id for j in await jobs.claim_submit(tools=["u", "v"], lease=30)] == ["other"]
    with pytest.raises(errors.InvalidArgument):
        await jobs.claim_submit(lease=0)


async def test_concurrent_attaches_keep_one_call_on_the_row_and_every_other_beside(
    store_url: str,
) -> None:
    async with open_store(store_url) as one, open_store(store_url) as two:
        tables = [JobTable(one), JobTable(two)]
        await tables[0].create("j", tool_name="t", deadline=60)
        await asyncio.gather(
            *(
                tables[i % 2].attach("j", **{**CALL, "function_call_id": f"call-{i}"})
                for i in range(6)
            )
        )
        job = await tables[0].get("j")
        assert job is not None and job.function_call_id is not None
        others = {c.function_call_id for c in await tables[0].calls("j")}
        assert others | {job.function_call_id} == {f"call-{i}" for i in range(6)}
        assert job.function_call_id not in others and len(others) == 5


async def test_two_resumers_racing_over_two_calls_of_one_job_claim_each_once(
    store_url: str,
) -> None:
    async with open_store(store_url) as one, open_store(store_url) as two:
        first, second = JobTable(one), JobTable(two)
        for i in range(20):
            job_id = f"race-{i}"
            await started(first, job_id, function_call_id=f"call-{i}", invocation_id=f"e-{i}")
            other = {**CALL, "session_id": f"s-{i}", "invocation_id": f"f-{i}"}
            await first.attach(job_id, **{**other, "function_call_id": f"other-{i}"})
            await first.complete(job_id, JobState.SUCCEEDED, {"i": i})
            a, b = await asyncio.gather(
                first.claim_for_resume("r1", gather=0), second.claim_for_resume("r2", gather=0)
            )
            claimed = sorted(j.function_call_id or "" for j in a + b)
            assert claimed == [f"call-{i}", f"other-{i}"], f"round {i}: {claimed}"
            for owner, table, mine in (("r1", first, a), ("r2", second, b)):
                if mine:
                    assert await table.mark_resumed(owner, mine, f"run-{owner}-{i}") == {job_id}

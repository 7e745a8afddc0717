"""`flatshare.aiotasks.cancel`: a stopped task has finished unwinding; its own errors still surface."""

from __future__ import annotations

import asyncio

import pytest

from flatshare.aiotasks import cancel


def test_cancel_waits_for_the_task_to_unwind_and_skips_none() -> None:
    unwound: list[str] = []

    async def worker() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            await asyncio.sleep(0)
            unwound.append("done")

    async def main() -> asyncio.Task[None]:
        task = asyncio.create_task(worker())
        await asyncio.sleep(0)
        await cancel(None, task)
        return task

    task = asyncio.run(main())
    assert unwound == ["done"] and task.cancelled()


def test_an_error_the_task_ends_with_is_raised() -> None:
    async def broken() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            raise RuntimeError("while unwinding")

    async def main() -> None:
        task = asyncio.create_task(broken())
        await asyncio.sleep(0)
        await cancel(task)

    with pytest.raises(RuntimeError, match="while unwinding"):
        asyncio.run(main())

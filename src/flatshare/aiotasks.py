"""Stopping asyncio tasks: cancel, then wait until each has finished unwinding."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel(*tasks: asyncio.Task[Any] | None) -> None:
    """Cancel each task (None is skipped) and wait for it to end; its CancelledError is swallowed, any
    other exception it ends with is raised."""
    for task in tasks:
        if task is None:
            continue
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

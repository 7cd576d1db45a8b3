"""deskctl.aio on a real Docker engine: a task cancelled while an action runs in the container destroys the
container (the destroy does not wait for the action), and the ledger row ends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from deskctl import aio
from deskctl.ledger import open_ledger
from docker_provider._docker_target import docker_leftovers

pytestmark = pytest.mark.docker


@pytest.mark.timeout(240, method="thread")  # a regression hangs on the endless command: end the run
def test_a_task_cancelled_mid_action_leaves_no_container(docker_sdk: Any) -> None:
    seen: dict[str, Any] = {}

    async def body() -> None:
        async with aio.open_desktop("docker", geometry="320x240") as desk:
            seen.update(id=desk.id, handle=desk.handle)
            await desk.click(5, 5)
            assert await desk.cursor_position() == (5, 5)
            seen["shot"] = await desk.screenshot()
            await desk.exec("touch /tmp/started; exec sleep infinity", timeout=3600)

    def started() -> bool:
        container = docker_sdk.containers.get(seen["handle"].resource_id)
        return bool(container.exec_run(["test", "-e", "/tmp/started"]).exit_code == 0)

    async def run() -> None:
        task = asyncio.create_task(body())
        while "shot" not in seen or not await asyncio.to_thread(started):
            if task.done():
                task.result()
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert (seen["shot"].width, seen["shot"].height) == (320, 240)
    assert docker_leftovers(seen["handle"]) == []
    with open_ledger() as book:
        record = book.get(seen["id"])
    assert record is not None and (record.status, record.reason) == ("failed", "cancelled")
    assert record.ended_at is not None

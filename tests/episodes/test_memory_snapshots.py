"""Snapshots on the memory provider (the inner loop's desktop): what was typed, the clipboard and the windows come
back, a later change is gone, 20 restores leave nothing behind, and the Gym env resets by restore there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import deskctl
from deskctl.episodes import delete_snapshot
from deskctl.episodes.store import list_snapshots
from deskctl.ledger import open_ledger
from deskctl.paths import runtime_dir


def _typed(desk: Any) -> str:
    return str(desk.exec('cat "$DESKCTL_MEMORY_DESKTOP/typed.txt" 2>/dev/null').stdout)


def test_restore_brings_back_typing_clipboard_and_windows() -> None:
    with deskctl.open_desktop("memory", geometry="320x240") as desk:
        desk.type("kept")
        desk.clipboard_set("clip")
        desk.launch("xmessage", "-title", "keepme")
        desk.wait_for("keepme", 10)
        snap = desk.snapshot("m")
        desk.type(" and later")
        desk.clipboard_set("later")
        desk.launch("xmessage", "-title", "later")
        desk.wait_for("later", 10)
        desk.restore(snap)
        assert _typed(desk) == "kept"
        assert desk.clipboard_get() == "clip"
        assert desk.window_titles() == ["keepme"]
    with open_ledger() as book:
        delete_snapshot(book, "m")
    assert not (runtime_dir() / "snapshots" / "memory" / snap.snapshot_id).exists()


def test_twenty_restores_leave_nothing(deskctl_home: Path) -> None:
    with deskctl.open_desktop("memory", geometry="200x100") as desk:
        desk.type("0")
        snap = desk.snapshot("zero")
        for i in range(20):
            desk.type(str(i + 1))
            desk.restore(snap)
            assert _typed(desk) == "0"
        assert [p.name for p in (runtime_dir() / "memory").iterdir()] == [desk.id]
        with open_ledger() as book:
            assert len(book.sessions()) == 1 and [s.restores for s in list_snapshots(book)] == [20]
    assert list((runtime_dir() / "memory").iterdir()) == []
    with open_ledger() as book:
        delete_snapshot(book, snap)
    assert list((runtime_dir() / "snapshots" / "memory").iterdir()) == []


def test_gym_check_env_on_memory_resets_by_restore() -> None:
    from gymnasium.utils.env_checker import check_env

    from deskctl.gym import DesktopEnv, Task

    def setup(desk: Any) -> None:
        desk.launch("xmessage", "-title", "question")
        desk.wait_for("question", 10)

    task = Task(setup=setup, evaluate=lambda d: "question" not in d.window_titles())
    env = DesktopEnv("memory", geometry="160x120", task=task, max_steps=4)
    try:
        check_env(env, skip_render_check=True)
        _, info = env.reset(seed=1)
        assert info["restored"] is True
        _, reward, terminated, _, _ = env.step(env.action_space.sample())
        assert reward == 0.0 and not terminated  # nothing a random step does closes the window here
    finally:
        env.close()
    with open_ledger() as book:
        assert list_snapshots(book) == [] and book.sessions(active=True) == []

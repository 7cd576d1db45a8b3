"""deskctl.gym.DesktopEnv through Gymnasium itself: its env checker, and real episodes of a small GUI task (answer
a dialog) on host Xvfb and on Docker, solved by a scripted policy (reward 1) and not by a random one (0)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

gymnasium = pytest.importorskip("gymnasium")
from gymnasium.utils.env_checker import check_env  # noqa: E402

from deskctl.episodes import LABEL_SNAPSHOT  # noqa: E402
from deskctl.episodes.store import list_snapshots  # noqa: E402
from deskctl.gym import ENV_ID, DesktopEnv, make_vector  # noqa: E402
from deskctl.ledger import open_ledger  # noqa: E402

from ._dialog import dialog_task, scripted_policy  # noqa: E402

pytestmark = pytest.mark.timeout(900)


def _episode(env: DesktopEnv, policy: Any, seed: int) -> tuple[float, dict[str, Any]]:
    _, info = env.reset(seed=seed)
    total = 0.0
    actions = policy(env) if callable(policy) else None
    for i in range(env.max_steps):
        action = actions[i] if actions is not None and i < len(actions) else env.action_space.sample()
        _, reward, terminated, truncated, _ = env.step(action)
        total += reward
        if terminated or truncated:
            break
    return total, info


def _active_sessions() -> list[Any]:
    with open_ledger() as book:
        return book.sessions(active=True)


def test_check_env_on_xvfb(tmp_path: Path) -> None:
    env = DesktopEnv("xvfb", geometry="320x240", task=dialog_task(str(tmp_path / "answer")), max_steps=5,
                     windows=True)
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()
    assert _active_sessions() == []


def test_scripted_policy_solves_the_dialog_and_random_does_not_on_xvfb(tmp_path: Path) -> None:
    env = gymnasium.make(ENV_ID, provider="xvfb", geometry="640x480", task=dialog_task(str(tmp_path / "answer")),
                         max_steps=8, record=tmp_path / "rec")
    inner: DesktopEnv = env.unwrapped
    try:
        scripted = [_episode(inner, scripted_policy, seed)[0] for seed in range(3)]
        inner.action_space.seed(1234)
        randomly = [_episode(inner, None, seed)[0] for seed in range(3)]
    finally:
        env.close()
    assert scripted == [1.0, 1.0, 1.0]
    assert randomly == [0.0, 0.0, 0.0]
    assert _active_sessions() == []
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == [f"episode-{i:04d}" for i in range(1, 7)]
    assert (tmp_path / "rec" / "episode-0001" / "trajectory.jsonl").read_text().count("\n") >= 2


@pytest.mark.docker
def test_check_env_and_episodes_on_docker_reset_by_restore(docker_sdk: Any) -> None:
    images_before = {i["Id"] for i in docker_sdk.api.images(filters={"label": LABEL_SNAPSHOT})}
    env = DesktopEnv("docker", geometry="640x480", task=dialog_task("/tmp/answer"), max_steps=8)
    try:
        check_env(env, skip_render_check=True)
        scripted = []
        for seed in range(3):
            total, info = _episode(env, scripted_policy, seed)
            scripted.append(total)
            assert info["restored"] is True  # check_env reset it first: every reset here restores the snapshot
        env.action_space.seed(99)
        randomly = [_episode(env, None, seed)[0] for seed in range(3)]
        session = env.desk.id if env.desk else ""
        assert len(docker_sdk.api.containers(all=True, filters={"label": f"deskctl.session={session}"})) == 1
    finally:
        env.close()
    assert scripted == [1.0, 1.0, 1.0]
    assert randomly == [0.0, 0.0, 0.0]
    assert _active_sessions() == []
    assert docker_sdk.api.containers(all=True, filters={"label": f"deskctl.session={session}"}) == []
    assert {i["Id"] for i in docker_sdk.api.images(filters={"label": LABEL_SNAPSHOT})} == images_before
    with open_ledger() as book:
        assert list_snapshots(book) == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_of_two_desktops(mode: str) -> None:
    envs = make_vector(2, mode=mode, provider="xvfb", geometry="320x240", max_steps=3)
    try:
        observations, infos = envs.reset(seed=0)
        assert observations.shape == (2, 240, 320, 3)
        assert len(set(infos["session"])) == 2
        actions = envs.action_space.sample()
        observations, rewards, _, _, _ = envs.step(actions)
        assert observations.shape == (2, 240, 320, 3) and list(rewards) == [0.0, 0.0]
        assert len(_active_sessions()) == 2
    finally:
        envs.close()
    assert _active_sessions() == []

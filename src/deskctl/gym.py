"""A Gymnasium environment over any deskctl provider (the optional extra ``deskctl[gym]``; docs/episodes.md).

``DesktopEnv`` is a :class:`gymnasium.Env`: ``reset`` gives a desktop in its start state (restored from a start
snapshot where the provider has ``snapshots``, else a new desktop) and runs the task's ``setup``; ``step`` applies
one deskctl action from the action space, which is declared from :mod:`deskctl.action_table`; the task's
``evaluate(desk)`` gives the reward and says when the episode is over; ``close`` destroys the desktop. Many at
once: :func:`make_vector` (Gymnasium's vector API, one desktop per environment).

An action is a dict: ``{"action": i, "x": .., "y": .., ...}``; ``action`` indexes :attr:`DesktopEnv.action_names`,
and only the parameters of that action are read. An action the desktop refuses (a key name that does not exist,
text of the wrong shape) is a wasted step: reward 0, ``info["error"]`` says why.
"""

from __future__ import annotations

import string
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np
from gymnasium import spaces

from deskctl.action_table import REQUIRED, ActionSpec, Param, by_name
from deskctl.errors import DeskctlError

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from deskctl.episodes.store import Snapshot
    from deskctl.session import Desktop

__all__ = ["DEFAULT_ACTIONS", "ENV_ID", "DesktopEnv", "Task", "make_vector", "observation_of"]

#: the id under which Gymnasium knows the environment (``gymnasium.make("deskctl/Desktop-v0", ...)``)
ENV_ID = "deskctl/Desktop-v0"
#: the actions an environment offers unless told otherwise: the pointer and the keyboard of the action table
DEFAULT_ACTIONS = ("click", "double_click", "right_click", "move", "drag", "scroll", "type", "key")
#: longest text of a ``type`` or ``key`` action in the space (the table allows more; a policy types in pieces)
TEXT_LENGTH = 64
#: the characters of the text spaces: printable ASCII without line breaks and tabs (Return and Tab are keys)
CHARSET = "".join(c for c in string.printable if c not in "\t\n\r\x0b\x0c")
#: the characters of the window list (titles, one per line)
_TITLE_CHARSET = CHARSET + "\n"
#: wheel clicks of one scroll in the space (the table allows more)
SCROLL_CLICKS = 10


@dataclass
class Task:
    """What an episode is for. ``setup(desk)`` runs after every reset; ``evaluate(desk)`` after every step gives
    the reward: a number, a bool (1 or 0), or ``(reward, done)``; without ``done`` the episode is over once the
    reward reaches ``success``."""

    evaluate: Callable[[Desktop], float | bool | tuple[float, bool]]
    setup: Callable[[Desktop], None] | None = None
    success: float = 1.0
    name: str = "task"


def _zero(desk: Desktop) -> float:
    return 0.0


def observation_of(desk: Desktop) -> NDArray[np.uint8]:
    """The screen as an (height, width, 3) RGB array of uint8."""
    frame = desk.raw_frame()
    if frame.mode == "BGRX":
        stride = frame.stride or frame.width * 4
        pixels = np.frombuffer(frame.data, np.uint8).reshape(frame.height, stride)[:, :frame.width * 4]
        return np.ascontiguousarray(pixels.reshape(frame.height, frame.width, 4)[:, :, 2::-1])
    return np.asarray(frame.image(), dtype=np.uint8)


def _in_space(param: Param) -> bool:
    """Whether the action space has ``param``: not one the CLI never takes, nor an optional structured one (a
    pointer command's coordinate ``space``: the agent acts in the screen's own pixels)."""
    return param.cli != "none" and not (param.kind == "json" and param.default is not REQUIRED)


def _param_space(spec: ActionSpec, name: str, kind: str, choices: tuple[str, ...], size: tuple[int, int]) -> Any:
    width, height = size
    if name in ("x", "x1", "x2"):
        return spaces.Discrete(width)
    if name in ("y", "y1", "y2"):
        return spaces.Discrete(height)
    if name in ("dx", "dy"):
        return spaces.Discrete(2 * SCROLL_CLICKS + 1, start=-SCROLL_CLICKS)
    if choices:
        return spaces.Discrete(len(choices))
    if kind == "str":
        return spaces.Text(TEXT_LENGTH, min_length=0 if name == "text" else 1, charset=CHARSET)
    if kind == "int":
        return spaces.Discrete(3, start=1)
    raise ValueError(f"action {spec.name!r}: parameter {name!r} ({kind}) has no Gymnasium space")


class DesktopEnv(gymnasium.Env[Any, dict[str, Any]]):
    """A desktop as a Gymnasium environment; see the module docstring.

    ``provider``/``geometry``/``open_options``: what :func:`deskctl.open_desktop` gets. ``task``: setup and
    evaluate. ``max_steps`` / ``max_seconds``: an episode is truncated there. ``windows``: the observation is
    ``{"screen": array, "windows": titles joined by newlines}`` instead of the array. ``record``: a directory;
    each episode is recorded into ``record/episode-NNNN`` (docs/recording.md). ``use_snapshot``: reset by
    restoring a start snapshot (default: where the provider can), else by a new desktop.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, provider: str = "xvfb", *, task: Task | None = None, geometry: str = "640x480",
                 actions: Sequence[str] = DEFAULT_ACTIONS, max_steps: int = 100, max_seconds: float | None = None,
                 windows: bool = False, record: str | Path | None = None, use_snapshot: bool | None = None,
                 render_mode: str | None = None, open_options: Mapping[str, Any] | None = None) -> None:
        from deskctl.spec import Geometry

        self.provider_name = provider
        self.task = task or Task(evaluate=_zero)
        self.geometry = geometry
        size = Geometry.parse(geometry)
        self.size = (size.width, size.height)
        self.max_steps = int(max_steps)
        self.max_seconds = max_seconds
        self.windows = windows
        self.record = Path(record) if record is not None else None
        self.use_snapshot = use_snapshot
        self.render_mode = render_mode
        self.open_options = dict(open_options or {})
        self.action_specs = tuple(by_name(a) for a in actions)
        self.action_names = tuple(a.name for a in self.action_specs)
        params: dict[str, Any] = {"action": spaces.Discrete(len(self.action_specs))}
        for spec in self.action_specs:
            for p in spec.params:
                if not _in_space(p) or p.name in params:
                    continue
                params[p.name] = _param_space(spec, p.name, p.kind, p.choices, self.size)
        self.action_space = spaces.Dict(params)
        screen = spaces.Box(0, 255, (self.size[1], self.size[0], 3), np.uint8)
        self.observation_space: Any = (spaces.Dict({"screen": screen, "windows": spaces.Text(
            4096, min_length=0, charset=_TITLE_CHARSET)}) if windows else screen)
        self.desk: Desktop | None = None
        self.start: Snapshot | None = None
        self.episode = 0
        self.steps = 0
        self._started = 0.0
        self._last: Any = None

    # -- the Gymnasium API -------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        restored = False
        if self.desk is not None and self.start is not None and not options.get("recreate"):
            self.desk.restore(self.start)
            restored = True
        else:
            self._close_desk()
            self.desk = self._open()
            if self._snapshots():
                self.start = self.desk.snapshot(f"gym-start-{self.desk.id}", replace=True)
        self.episode += 1
        self.steps = 0
        if self.record is not None:
            self._record_episode()
        if self.task.setup is not None:
            self.task.setup(self.desk)
        self._started = time.monotonic()
        observation = self._observe()
        return observation, {"session": self.desk.id, "episode": self.episode, "restored": restored}

    def step(self, action: Mapping[str, Any]) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.desk is None:
            raise gymnasium.error.ResetNeeded("call reset() before step()")
        self.steps += 1
        info: dict[str, Any] = {"step": self.steps, "actor": "agent"}
        spec = self.action_specs[int(action["action"])]
        info["action"] = spec.name
        try:
            self._apply(spec, action)
        except DeskctlError as exc:
            if exc.exit_code != 2:  # a refused action is the policy's; anything else is not
                raise
            info["error"] = exc.code
        reward, terminated = self._evaluate()
        truncated = not terminated and (self.steps >= self.max_steps or (
            self.max_seconds is not None and time.monotonic() - self._started >= self.max_seconds))
        return self._observe(), reward, terminated, truncated, info

    def render(self) -> NDArray[np.uint8] | None:
        if self.render_mode != "rgb_array" or self.desk is None:
            return None
        return observation_of(self.desk)

    def close(self) -> None:
        """Destroy the desktop and delete the start snapshot."""
        self._close_desk()
        super().close()

    # -- the parts ---------------------------------------------------------------------------------------
    def _snapshots(self) -> bool:
        if self.use_snapshot is False:
            return False
        assert self.desk is not None
        able = bool(getattr(self.desk.provider.capabilities, "snapshots", False))
        if self.use_snapshot and not able:
            from deskctl.errors import UsageError

            raise UsageError(f"provider {self.provider_name!r} cannot snapshot a desktop", code="usage.unsupported",
                             provider=self.provider_name, remedy="use_snapshot=None resets by a new desktop")
        return able

    def _open(self) -> Desktop:
        from deskctl.session import open_desktop

        return open_desktop(self.provider_name, geometry=self.geometry, **self.open_options)

    def _close_desk(self) -> None:
        desk, start = self.desk, self.start
        self.desk, self.start = None, None
        if desk is None:
            return
        try:
            desk.close()
        finally:
            if start is not None:
                from deskctl.episodes import delete_snapshot

                delete_snapshot(desk.ledger, start)

    def _record_episode(self) -> None:
        from deskctl.recording import Recorder

        assert self.desk is not None and self.record is not None
        recorder = Recorder.create(self.record / f"episode-{self.episode:04d}")
        self.desk._recorder = recorder
        recorder.started(self.desk)

    def _apply(self, spec: ActionSpec, action: Mapping[str, Any]) -> None:
        assert self.desk is not None
        args: dict[str, Any] = {}
        for p in spec.params:
            if not _in_space(p):
                continue
            value = action[p.name]
            if p.choices:
                value = p.choices[int(value)]
            elif p.kind == "int":
                value = int(value)
            elif p.kind == "str":
                value = str(value)
            args[p.name] = value
        getattr(self.desk, spec.method)(**args)

    def _evaluate(self) -> tuple[float, bool]:
        assert self.desk is not None
        said = self.task.evaluate(self.desk)
        if isinstance(said, tuple):
            reward, done = float(said[0]), bool(said[1])
        else:
            reward = float(said)
            done = reward >= self.task.success
        return reward, done

    def _observe(self) -> Any:
        assert self.desk is not None
        screen = observation_of(self.desk)
        if not self.windows:
            return screen
        titles = "\n".join("".join(c for c in t if c in CHARSET) for t in self.desk.window_titles())
        return {"screen": screen, "windows": titles[:4096]}


def make_vector(num_envs: int, *, mode: str = "sync", **env_kwargs: Any) -> gymnasium.vector.VectorEnv[Any, Any, Any]:
    """``num_envs`` environments (one desktop each) behind Gymnasium's vector API; ``mode`` ``sync`` (one process)
    or ``async`` (a process per environment)."""
    def factory() -> DesktopEnv:
        return DesktopEnv(**env_kwargs)

    if mode == "async":
        return gymnasium.vector.AsyncVectorEnv([factory] * num_envs, shared_memory=False)
    return gymnasium.vector.SyncVectorEnv([factory] * num_envs)


def _register() -> None:
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(ENV_ID, entry_point="deskctl.gym:DesktopEnv")


_register()

"""What a task's Dockerfile says, read from its text alone (no build): the images its FROM lines name, the
build arguments it declares, and why deskctl could not make a desktop of it."""

from __future__ import annotations

import re
from collections.abc import Mapping


def _declares_arg(dockerfile: str, name: str) -> bool:
    return re.search(rf"(?im)^\s*ARG\s+{re.escape(name)}\b", dockerfile) is not None


_FROM_RE = re.compile(r"(?im)^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$")
_ARG_RE = re.compile(r"(?im)^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?\s*$")


def _from_images(dockerfile: str, buildargs: Mapping[str, str]) -> list[str]:
    """The images a Dockerfile's FROM lines name (``${ARG}`` resolved from the build arguments and the ARG
    defaults before the first FROM; build stages and ``scratch`` left out)."""
    text = re.sub(r"\\\n", " ", dockerfile)
    first = _FROM_RE.search(text)
    defaults = {m.group(1): (m.group(2) or "").strip("\"'") for m in
                _ARG_RE.finditer(text[:first.start() if first else 0])}
    values = {**defaults, **buildargs}
    stages: set[str] = set()
    images: list[str] = []
    for match in _FROM_RE.finditer(text):
        ref = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: values.get(m.group(1), ""), match.group(1))
        if ref and ref.lower() != "scratch" and ref.lower() not in stages:
            images.append(ref)
        if match.group(2):
            stages.add(match.group(2).lower())
    return list(dict.fromkeys(images))


def _dockerfile_problem(dockerfile: str) -> str | None:
    """Why deskctl cannot make a desktop of the image a Dockerfile builds, when the text alone tells (nothing is
    built): no FROM, a final stage FROM scratch (no shell to start Xvfb with), a Windows base."""
    text = re.sub(r"\\\n", " ", dockerfile)
    froms = list(_FROM_RE.finditer(text))
    if not froms:
        return "has no FROM line"
    stages = {m.group(2).lower(): m.group(1) for m in froms if m.group(2)}
    last = froms[-1].group(1)
    seen: set[str] = set()
    while last.lower() in stages and last.lower() not in seen:  # FROM a build stage: what that stage is FROM
        seen.add(last.lower())
        last = stages[last.lower()]
    if last.lower() == "scratch":
        return "ends FROM scratch: the image has no shell in which deskctl could start the display"
    if re.search(r"(^|/)(windows|nanoserver|servercore)([:/]|$)", last.lower()):
        return f"ends FROM {last}, a Windows image: deskctl's docker desktops are Linux"
    return None



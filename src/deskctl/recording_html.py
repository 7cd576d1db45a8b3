"""A static HTML page of a recorded trajectory (``deskctl trajectory html DIR``).

One file, no script, nothing fetched from anywhere: a step list, then per step its action, times, error and
annotations, and the screen before and after it with the action drawn over both (a ring at a click, an arrow
for a drag or a scroll). The screenshots are linked by relative path (the page works where it was written, and
beside the recording) or, with ``embed=True``, inlined as ``data:`` URLs so the page can travel alone.
"""

from __future__ import annotations

import base64
import datetime
import os
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

from deskctl.recording import Trajectory

__all__ = ["action_label", "render_html"]

_CSS = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d2330;background:#f4f5f7}
header{padding:16px 24px;background:#1d2330;color:#fff}
header h1{margin:0 0 4px;font-size:20px}
header p{margin:2px 0;color:#c9d1e0}
.layout{display:grid;grid-template-columns:260px 1fr;gap:0}
nav{position:sticky;top:0;align-self:start;max-height:100vh;overflow:auto;padding:12px;border-right:1px solid #d8dce3;
background:#fff}
nav ol{margin:0;padding-left:28px}
nav li{margin:2px 0}
nav a{color:#1d4ed8;text-decoration:none}
nav li.failed a{color:#b91c1c}
main{padding:12px 24px}
section.step{background:#fff;border:1px solid #d8dce3;border-radius:8px;padding:12px 16px;margin:0 0 16px}
section.step.failed{border-color:#ef4444}
section.step h2{margin:0 0 6px;font-size:16px}
.meta{display:flex;flex-wrap:wrap;gap:4px 18px;margin:0 0 8px;color:#4b5563}
.meta b{color:#1d2330;font-weight:600}
.error{color:#b91c1c;font-weight:600}
table.annotations{border-collapse:collapse;margin:0 0 8px}
table.annotations td,table.annotations th{border:1px solid #d8dce3;padding:2px 8px;text-align:left;
font-family:ui-monospace,monospace;font-size:12px}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:12px}
figure{margin:0}
.frame{position:relative;border:1px solid #9ca3af;background:#000;line-height:0}
.frame img{display:block;width:100%;height:auto}
.frame svg{position:absolute;left:0;top:0;width:100%;height:100%;pointer-events:none}
figcaption{color:#4b5563;font-size:12px;margin-top:4px;word-break:break-all}
.badge{display:inline-block;padding:0 6px;border-radius:4px;background:#e5e7eb;font-size:12px}
.badge.warn{background:#fde68a}
.noshot{padding:40px;text-align:center;color:#6b7280;border:1px dashed #9ca3af;line-height:1.4}
"""

_MARK = "#ff2d55"


def action_label(action: dict[str, Any]) -> str:
    """A short human form of a row's action: ``click (10, 20)``, ``type "héllo"``, ``key ctrl+s`` ..."""
    kind = str(action.get("kind", "?"))
    if kind == "click":
        count = int(action.get("count") or 1)
        extra = "" if action.get("button", "left") == "left" else f" {action['button']}"
        times = {1: "", 2: " double", 3: " triple"}.get(count, f" x{count}")
        return f"click ({action.get('x')}, {action.get('y')}){extra}{times}"
    if kind in ("move", "mouse_down", "mouse_up"):
        extra = "" if kind == "move" or action.get("button", "left") == "left" else f" {action['button']}"
        return f"{kind} ({action.get('x')}, {action.get('y')}){extra}"
    if kind == "drag":
        return f"drag ({action.get('x1')}, {action.get('y1')}) -> ({action.get('x2')}, {action.get('y2')})"
    if kind == "scroll":
        return f"scroll ({action.get('x')}, {action.get('y')}) dy={action.get('dy')} dx={action.get('dx')}"
    if kind == "type":
        text = str(action.get("text", ""))
        return f"type {text[:60]!r}" + ("..." if len(text) > 60 else "")
    if kind == "key":
        return "key " + "+".join(str(k) for k in action.get("keys") or [])
    if kind in ("key_down", "key_up"):
        return f"{kind} {action.get('key')}"
    return kind


def _overlay(action: dict[str, Any], width: int, height: int, ident: str) -> str:
    """SVG in screen coordinates (its viewBox is the screenshot's pixel grid) drawing where the action acted."""
    kind = str(action.get("kind"))
    ring = max(6, round(min(width, height) / 40))
    stroke = max(2, round(ring / 4))
    arrow = f"arrow-{ident}"
    parts: list[str] = []

    def num(key: str) -> int:
        value = action.get(key)
        return int(value) if isinstance(value, int | float) else 0

    def marker(x: int, y: int, *, fill: str = "none", cls: str = "marker") -> None:
        parts.append(f'<circle class="{cls}" data-x="{x}" data-y="{y}" cx="{x}" cy="{y}" r="{ring}" fill="{fill}" '
                     f'stroke="{_MARK}" stroke-width="{stroke}"/>')
        parts.append(f'<circle cx="{x}" cy="{y}" r="{max(1, stroke // 2 + 1)}" fill="{_MARK}"/>')

    def line(x1: int, y1: int, x2: int, y2: int) -> None:
        parts.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{_MARK}" stroke-width="{stroke}" '
                     f'marker-end="url(#{arrow})"/>')

    if kind in ("click", "mouse_down", "mouse_up"):
        marker(num("x"), num("y"), fill="rgba(255,45,85,0.25)" if kind == "mouse_down" else "none")
        if kind == "click" and num("count") > 1:
            parts.append(f'<text x="{num("x") + ring + 2}" y="{num("y") - ring}" fill="{_MARK}" '
                         f'font-size="{ring * 2}" font-family="sans-serif">x{num("count")}</text>')
    elif kind == "move":
        x, y = num("x"), num("y")
        marker(x, y)
        parts.append(f'<path d="M{x - 2 * ring} {y}H{x + 2 * ring}M{x} {y - 2 * ring}V{y + 2 * ring}" '
                     f'stroke="{_MARK}" stroke-width="{max(1, stroke // 2)}"/>')
    elif kind == "drag":
        marker(num("x1"), num("y1"))
        line(num("x1"), num("y1"), num("x2"), num("y2"))
        marker(num("x2"), num("y2"), fill="rgba(255,45,85,0.25)", cls="marker-end")
    elif kind == "scroll":
        x, y = num("x"), num("y")
        marker(x, y)
        if num("dx") or num("dy"):
            step = 3 * ring
            line(x, y, x + max(-4, min(4, num("dx"))) * step, y + max(-4, min(4, num("dy"))) * step)
    if not parts:
        return ""
    defs = (f'<defs><marker id="{arrow}" viewBox="0 0 10 10" refX="8" refY="5" markerWidth="5" markerHeight="5" '
            f'orient="auto-start-reverse"><path d="M0 0L10 5L0 10z" fill="{_MARK}"/></marker></defs>')
    return (f'<svg class="overlay" viewBox="0 0 {width} {height}" preserveAspectRatio="none" '
            f'xmlns="http://www.w3.org/2000/svg">{defs}{"".join(parts)}</svg>')


def _image_src(trajectory: Trajectory, image: dict[str, Any], page_dir: Path, embed: bool) -> str:
    path = trajectory.directory / str(image["path"])
    if embed:
        try:
            return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
        except OSError:
            pass  # shown as missing, with the path it should have had
    return quote(Path(os.path.relpath(path, page_dir)).as_posix())


def _figure(trajectory: Trajectory, row: dict[str, Any], which: str, page_dir: Path, embed: bool) -> str:
    image = row.get(which)
    step = row["step"]
    if not image:
        return (f'<figure class="shot {which}"><div class="noshot">no {which} shot</div>'
                f"<figcaption>{which}</figcaption></figure>")
    status = trajectory.image_status(image)
    width, height = int(image.get("width") or 1), int(image.get("height") or 1)
    badge = "" if status == "ok" else f' <span class="badge warn">{escape(status)}</span>'
    return (
        f'<figure class="shot {which}"><div class="frame">'
        f'<img class="{which}" src="{escape(_image_src(trajectory, image, page_dir, embed))}" width="{width}" '
        f'height="{height}" alt="{which} step {step}" loading="lazy">'
        f"{_overlay(row.get('action') or {}, width, height, f'{step}-{which}')}</div>"
        f"<figcaption>{which} &middot; {width}x{height} &middot; sha256 {escape(str(image.get('sha256', ''))[:16])}"
        f"&hellip;{badge}</figcaption></figure>"
    )


def _when(wall: Any) -> str:
    if not isinstance(wall, int | float):
        return "?"
    stamp = datetime.datetime.fromtimestamp(float(wall), tz=datetime.UTC)
    return stamp.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _step_section(trajectory: Trajectory, row: dict[str, Any], page_dir: Path, embed: bool) -> str:
    step = row["step"]
    action = row.get("action") or {}
    error = row.get("error")
    before, after = row.get("before") or {}, row.get("after") or {}
    changed = ""
    if before and after:
        changed = "screen changed" if before.get("sha256") != after.get("sha256") else "screen unchanged"
    meta = [f"<span><b>time</b> {escape(_when(row.get('wall')))}</span>",
            f"<span><b>session</b> {escape(str(row.get('session')))}</span>"]
    if isinstance(row.get("latency_ms"), int | float):
        meta.append(f"<span><b>action</b> {float(row['latency_ms']):.1f} ms</span>")
    if isinstance(row.get("step_ms"), int | float):
        meta.append(f"<span><b>step</b> {float(row['step_ms']):.1f} ms</span>")
    if changed:
        meta.append(f'<span class="badge">{changed}</span>')
    offset = trajectory.video_offset(row)
    if offset is not None:  # a media fragment: the browser opens the video at the step
        meta.append(f'<span><a class="video-at" href="{escape(_video_src(trajectory, page_dir))}#t={offset:.3f}">'
                    f"video at {offset:.1f} s</a></span>")
    if error:
        meta.append(f'<span class="error">{escape(str(error.get("code")))}: {escape(str(error.get("message")))}</span>')
    notes = row.get("annotations") or {}
    table = ""
    if notes:
        cells = "".join(f"<tr><th>{escape(str(k))}</th><td>{escape(_value(v))}</td></tr>" for k, v in notes.items())
        table = f'<table class="annotations">{cells}</table>'
    return (
        f'<section class="step{" failed" if error else ""}" id="step-{step}" data-step="{step}" '
        f'data-kind="{escape(str(action.get("kind")))}">'
        f"<h2>Step {step} &middot; {escape(action_label(action))}</h2>"
        f'<div class="meta">{"".join(meta)}</div>{table}'
        f'<div class="pair">{_figure(trajectory, row, "before", page_dir, embed)}'
        f"{_figure(trajectory, row, 'after', page_dir, embed)}</div></section>"
    )


def _video_src(trajectory: Trajectory, page_dir: Path) -> str:
    from deskctl.recording_video import VIDEO_NAME

    return quote(Path(os.path.relpath(trajectory.directory / VIDEO_NAME, page_dir)).as_posix())


def _video_player(trajectory: Trajectory, page_dir: Path) -> str:
    """The session's video (linked, also with ``--embed``: a video is too big to inline), when there is one."""
    if not any(v.get("type") == "video" for v in trajectory.videos):
        return ""
    ended = [v for v in trajectory.videos if v.get("type") == "video_end"]
    note = ""
    if ended:
        note = f" &middot; {escape(str(ended[-1].get('seconds')))} s, {escape(str(ended[-1].get('reason')))}"
    return (f'<section class="video" id="video"><h2>Video{note}</h2>'
            f'<video controls preload="metadata" src="{escape(_video_src(trajectory, page_dir))}" '
            'style="max-width:100%"></video><p>each step links to its moment in the video</p></section>')


def _value(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_html(trajectory: Trajectory, page_path: Path, *, embed: bool = False) -> str:
    """The page for ``trajectory`` as it will be written at ``page_path`` (image links are relative to it)."""
    page_dir = page_path.absolute().parent
    summary = trajectory.summary()
    errors = sum(summary["errors"].values())
    title = f"deskctl trajectory: {trajectory.directory.name}"
    facts = [f"{summary['steps']} steps", ", ".join(summary["sessions"]) or "no session",
             ", ".join(summary["providers"]), ", ".join(summary["geometries"])]
    if summary["seconds"] is not None:
        facts.append(f"{summary['seconds']:.1f} s")
    facts.append(f"{errors} error{'s' if errors != 1 else ''}")
    items = []
    for row in trajectory.steps:
        label = escape(action_label(row.get("action") or {}))
        failed = ' class="failed"' if row.get("error") else ""
        items.append(f'<li value="{row["step"]}"{failed}><a href="#step-{row["step"]}">{label}</a></li>')
    sections = "".join(_step_section(trajectory, row, page_dir, embed) for row in trajectory.steps)
    damaged = ""
    if trajectory.damaged:
        count = len(trajectory.damaged)
        damaged = (f"<p>skipped {count} unreadable line{'s' if count != 1 else ''} of the JSONL (line "
                   f"{', '.join(map(str, trajectory.damaged))})</p>")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>{escape(title)}</h1><p>{escape(' · '.join(f for f in facts if f))}</p>"
        f"<p>{escape(str(trajectory.directory))}</p>{damaged}</header>"
        f'<div class="layout"><nav><ol id="step-list">{"".join(items)}</ol></nav>'
        f"<main>{_video_player(trajectory, page_dir)}{sections or '<p>no steps recorded</p>'}</main></div>"
        "</body></html>\n"
    )

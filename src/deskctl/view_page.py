"""The page of :mod:`deskctl.view`: one self-contained HTML document (no external resource: the view's
Content-Security-Policy allows none) that shows the stream and, with control, sends the pointer and keys back as
JSON input events (:func:`deskctl.view.input_action` reads them) and offers the takeover buttons.
"""

from __future__ import annotations

__all__ = ["render_page"]

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<link rel="icon" href="data:,">
<title>deskctl view __ID__</title>
<style>
html, body { margin: 0; background: #1d2026; color: #c9ced6; font: 13px/1.4 system-ui, sans-serif; }
#bar { height: 24px; padding: 2px 8px; display: flex; gap: 16px; align-items: center; }
#bar b { color: #fff; }
#screen { display: block; max-width: 100vw; max-height: calc(100vh - 28px); width: auto; height: auto;
          image-rendering: auto; outline: none; user-select: none; -webkit-user-drag: none; }
body.control #screen { cursor: crosshair; }
#status.err { color: #ff8a80; }
#help { color: #ffd54f; }
</style></head>
<body class="__CLASS__">
<div id="bar"><b>deskctl view</b><span>__ID__</span><span>__PROVIDER__</span><span>__WIDTH__x__HEIGHT__</span>
<span id="mode">__MODE__</span><span id="status"></span>
<button id="takeover" hidden>Take control</button><span id="help"></span></div>
<img id="screen" alt="desktop __ID__" width="__WIDTH__" height="__HEIGHT__" tabindex="0" draggable="false">
<script>
"use strict";
const token = new URLSearchParams(location.search).get("token") || "";
const control = __CONTROL__;
const takeoverMode = __TAKEOVER__;
const takeoverButton = document.getElementById("takeover");
const help_ = document.getElementById("help");
let holding = false;
const screen_ = document.getElementById("screen");
const status_ = document.getElementById("status");
// after the load event: a stream never ends, and an image still loading would hold the page's load forever
window.addEventListener("load", () => { screen_.src = "/stream?token=" + encodeURIComponent(token); });
screen_.addEventListener("error", () => { status_.textContent = "stream ended"; status_.className = "err"; });
const pending = [];
let busy = false;
function send(event) {
  // One request at a time, in order (a press must reach the desktop before its release). Keys typed while a
  // request is out are joined into one text, and a drag's moves into the latest, so a fast typist is not
  // held back by one round trip per key.
  const last = pending.length ? pending[pending.length - 1] : null;
  if (last && event.type === "type" && last.event.type === "type") { last.event.text += event.text; last.n++; }
  else if (last && event.type === "move" && last.event.type === "move") { last.event = event; last.n++; }
  else pending.push({event: event, n: 1});
  if (!busy) pump();
}
async function pump() {
  busy = true;
  while (pending.length) {
    const item = pending.shift();
    try {
      const r = await fetch("/input?token=" + encodeURIComponent(token), {
        method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(item.event)});
      if (!r.ok) {
        status_.textContent = "input refused: " + r.status + " " + await r.text();
        status_.className = "err";
      } else {  // for tests and the curious: how many of the page's input events the desktop has taken
        window.deskctlInputsDone = (window.deskctlInputsDone || 0) + item.n;
      }
    } catch (e) { status_.textContent = "input failed: " + e; status_.className = "err"; }
  }
  busy = false;
}
if (takeoverMode) {
  // --takeover: the page drives the desktop only while the person holds it; the agent's actions wait meanwhile
  takeoverButton.hidden = false;
  takeoverButton.addEventListener("click", async () => {
    const r = await fetch("/takeover?token=" + encodeURIComponent(token), {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({hold: !holding})});
    if (r.ok) show(await r.json());
    else { status_.textContent = "takeover refused: " + r.status + " " + await r.text(); status_.className = "err"; }
  });
  function show(info) {
    holding = info.held;
    takeoverButton.textContent = holding ? "Release" : "Take control";
    document.getElementById("mode").textContent = holding ? "you hold control: the agent waits"
                                                          : "the agent has control";
    help_.textContent = info.request ? "the agent asks for help: " + info.request.reason : "";
  }
  async function poll() {
    try {
      const r = await fetch("/takeover?token=" + encodeURIComponent(token));
      if (r.ok) show(await r.json());
    } catch (e) {}
    setTimeout(poll, 500);
  }
  poll();
}
function point(e) {
  const r = screen_.getBoundingClientRect();
  return {x: e.clientX - r.left, y: e.clientY - r.top, w: r.width, h: r.height};
}
const BUTTONS = ["left", "middle", "right"];
const KEYS = {Enter: "enter", Backspace: "backspace", Tab: "tab", Escape: "escape", Delete: "delete",
  Home: "home", End: "end", PageUp: "pageup", PageDown: "pagedown", Insert: "insert", ArrowUp: "up",
  ArrowDown: "down", ArrowLeft: "left", ArrowRight: "right", " ": "space", ContextMenu: "menu"};
if (control) {
  let held = 0;
  let pendingMove = null;
  screen_.addEventListener("mousedown", (e) => {
    e.preventDefault(); screen_.focus();
    held |= 1 << e.button;
    send(Object.assign({type: "down", button: BUTTONS[e.button] || "left"}, point(e)));
  });
  window.addEventListener("mouseup", (e) => {
    if (!(held & (1 << e.button))) return;
    held &= ~(1 << e.button);
    send(Object.assign({type: "up", button: BUTTONS[e.button] || "left"}, point(e)));
  });
  screen_.addEventListener("mousemove", (e) => {
    if (!held) return;  // hovering sends nothing; a drag sends its path, one move per animation frame
    const first = pendingMove === null;
    pendingMove = point(e);
    if (first) requestAnimationFrame(() => { send(Object.assign({type: "move"}, pendingMove)); pendingMove = null; });
  });
  screen_.addEventListener("contextmenu", (e) => e.preventDefault());
  screen_.addEventListener("wheel", (e) => {
    e.preventDefault();
    const steps = (d) => d === 0 ? 0 : Math.sign(d) * Math.max(1, Math.round(Math.abs(d) / 100));
    send(Object.assign({type: "scroll", dx: steps(e.deltaX), dy: steps(e.deltaY)}, point(e)));
  }, {passive: false});
  window.addEventListener("keydown", (e) => {
    if (e.isComposing) return;
    const mods = [];
    if (e.ctrlKey) mods.push("ctrl");
    if (e.altKey) mods.push("alt");
    if (e.metaKey) mods.push("super");
    let name = KEYS[e.key] || (/^F([1-9]|1[0-9]|2[0-4])$/.test(e.key) ? e.key.toLowerCase() : null);
    if (name === null && e.key.length === 1 && mods.length === 0) {
      e.preventDefault(); send({type: "type", text: e.key}); return;
    }
    if (name === null && e.key.length === 1) name = e.key.toLowerCase();
    if (name === null) return;  // a lone modifier, or a key the desktop has no name for
    if (e.shiftKey) mods.push("shift");
    e.preventDefault();
    send({type: "key", chord: mods.concat([name]).join("+")});
  });
}
</script>
</body></html>
"""


def render_page(session_id: str, provider: str, size: tuple[int, int], control: bool,
                takeover: bool = False) -> bytes:
    import html

    values = {"__ID__": html.escape(session_id), "__PROVIDER__": html.escape(provider),
              "__WIDTH__": str(size[0]), "__HEIGHT__": str(size[1]),
              "__MODE__": "control on: clicks and keys go to the desktop" if control else "view only",
              "__CLASS__": "control" if control else "", "__CONTROL__": "true" if control else "false",
              "__TAKEOVER__": "true" if takeover else "false"}
    page = _PAGE
    for key, value in values.items():
        page = page.replace(key, value)
    return page.encode()

"""A scripted model behind an OpenAI-compatible chat-completions endpoint on ``127.0.0.1``, for Harbor's
``computer-1`` agent (its generic provider talks to the model through litellm's OpenAI client):

    harbor run ... -a computer-1 -m openai/scripted --ak provider=litellm --ak api_base=<ScriptedModel.url>

Every ``POST /v1/chat/completions`` answers with the next action of a fixed list, as computer-1's JSON template
(``harbor/agents/computer_1/templates/computer-1-json.txt``) asks a model to answer: one JSON object with
``analysis``, ``plan`` and ``action``. Which action comes next is read from the request itself (the number of
assistant turns in its history), so one server serves many trials at once. A test can hold the answer to one turn
(``hold_at``) until it has looked at the desktop (:meth:`wait_held`, then :meth:`release`).

Run as a script (``python tests/fakes/scripted_model.py FORM``) it serves until killed and prints its URL."""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = ["FORM_ACTIONS", "ScriptedModel", "Turn"]

#: computer-1's actions that fill and submit tests/harbor/gui_task's form (file:///opt/task/form.html): open the
#: page, click into the tall Name field, type, press Enter, then `done` twice (computer-1 asks to confirm)
FORM_ACTIONS: list[dict[str, Any]] = [
    {"type": "navigate", "url": "file:///opt/task/form.html"},
    {"type": "click", "x": 512, "y": 420},
    {"type": "type", "text": "deskctl-on-harbor"},
    {"type": "keypress", "keys": ["enter"]},
    {"type": "done", "result": "submitted"},
    {"type": "done", "result": "submitted"},
]


@dataclass
class Turn:
    """One request the server answered: the turn's index, whether it carried a screenshot, the model name."""

    index: int
    images: int
    model: str


@dataclass
class _State:
    actions: list[dict[str, Any]]
    hold_at: int | None
    hold_timeout: float
    turns: list[Turn] = field(default_factory=list)
    held: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


class ScriptedModel:
    """The server; a context manager. ``actions`` are computer-1 actions (``{"type": "click", "x": ..}``)."""

    def __init__(self, actions: list[dict[str, Any]] | None = None, *, hold_at: int | None = None,
                 hold_timeout: float = 600.0) -> None:
        self._state = _State(actions=list(actions or FORM_ACTIONS), hold_at=hold_at, hold_timeout=hold_timeout)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The ``api_base`` to give the agent (litellm appends ``/chat/completions``)."""
        if self._server is None:
            raise RuntimeError("the scripted model is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def turns(self) -> list[Turn]:
        with self._state.lock:
            return list(self._state.turns)

    def wait_held(self, timeout: float) -> bool:
        """Whether a request for the held turn arrived within ``timeout`` seconds (its answer waits)."""
        return self._state.held.wait(timeout)

    def release(self) -> None:
        self._state.released.set()

    def start(self) -> Self:
        state = self._state

        class Handler(_Handler):
            pass

        Handler.state = state
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    state: _State
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "deskctl"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, {"error": {"message": "the body is not JSON", "type": "invalid_request_error"}})
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            self._send(400, {"error": {"message": "messages is required", "type": "invalid_request_error"}})
            return
        if body.get("stream"):
            self._send(400, {"error": {"message": "the scripted model does not stream",
                                       "type": "invalid_request_error"}})
            return
        state = self.state
        index = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        last = messages[-1] if isinstance(messages[-1], dict) else {}
        content = last.get("content")
        images = sum(1 for part in content if isinstance(part, dict) and part.get("type") == "image_url") \
            if isinstance(content, list) else 0
        with state.lock:
            state.turns.append(Turn(index=index, images=images, model=str(body.get("model", ""))))
        if state.hold_at is not None and index == state.hold_at:
            state.held.set()
            state.released.wait(state.hold_timeout)
        action = state.actions[min(index, len(state.actions) - 1)]
        answer = {"analysis": f"scripted turn {index}", "plan": "follow the script", "action": action}
        text = json.dumps(answer)
        prompt_tokens = sum(len(json.dumps(m)) for m in messages) // 4
        self._send(200, {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model", "scripted")),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(text) // 4,
                      "total_tokens": prompt_tokens + len(text) // 4},
        })


def main() -> None:
    """Serve FORM_ACTIONS (or the JSON list of actions in argv[1]) until killed; print the api_base."""
    actions = json.loads(sys.argv[1]) if len(sys.argv) > 1 else FORM_ACTIONS
    with ScriptedModel(actions) as model:
        print(model.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()

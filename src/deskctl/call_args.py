"""Checks of :class:`~deskctl.session.Desktop` call arguments beyond the action model's (which the in-desktop
agent shares, so it stays in :mod:`deskctl.actions`, apart from these): the URL ``open_url`` takes, and the terms
of ``wait_for`` (sync and async alike)."""

from __future__ import annotations

from deskctl.errors import UsageError, WaitTimeout

__all__ = ["check_url", "wait_terms"]



def check_url(url: str) -> None:
    """What ``open_url`` accepts: ``scheme://host...``, ``file:`` with an absolute path, or an absolute path
    (``/srv/page.html``, ``C:\\pages\\a.html``). An opener handed anything else (``not a url``) fails on the
    desktop, where nobody sees it, after the call reported success."""
    import re
    from urllib.parse import urlsplit

    problem = None
    if url.startswith("/") or re.match(r"[A-Za-z]:[\\/]", url):
        if "\0" in url or "\n" in url:
            problem = "is a path with a NUL or a line break"
    else:
        parts = urlsplit(url)
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme or "-"):
            problem = "has no scheme (https://...) and is no absolute path"
        elif parts.scheme.lower() == "file":
            if not parts.path.startswith("/"):
                problem = "is a file: URL without an absolute path (file:///dir/page.html)"
        elif not parts.hostname:
            problem = "names no host (scheme://host/...)"
        elif any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
            problem = "holds a space or a control character (percent-encode it: %20)"
    if problem:
        raise UsageError(f"{url!r} is not a URL to open: it {problem}", code="usage.bad_url",
                         remedy="give scheme://host/... (https://example.com), file:///absolute/path, or an "
                                "absolute path")


def wait_terms(what: object, timeout: float, interval: float, provider: str) -> WaitTimeout:
    """Check ``wait_for``'s arguments (sync and async alike) and return the error its timeout raises."""
    if isinstance(what, str):
        if not what:
            raise UsageError("wait_for needs a non-empty window title", code="usage.invalid")
        described = f"a window titled {what!r}"
    elif callable(what):
        described = getattr(what, "__name__", "the condition")
    else:
        raise UsageError("wait_for takes a window title or a callable", code="usage.invalid")
    from deskctl.limits import check_number

    check_number("wait_timeout", timeout, what="timeout")
    check_number("wait_interval", interval, what="interval")
    return WaitTimeout(f"{described} did not appear within {timeout:g}s", provider=provider)

"""The few Docker Engine API calls of the hot CLI paths, spoken over the socket directly.

``deskctl down`` runs once per desktop in a fleet's teardown; the ``docker`` SDK (with ``requests`` and
``urllib3``) costs about 100 ms of imports per process, more than the removal itself, and even :mod:`http.client`
brings :mod:`ssl` and :mod:`email` (tens of ms). :class:`EngineApi` speaks the same HTTP/1.1 (a request, then a
response with ``Content-Length``, chunked or up to the close; a file's download asks in HTTP/1.0, answered
without framing) to the same engine: the local socket,
``unix://PATH``, ``tcp://HOST:PORT`` and, as for the Docker CLI, TLS when ``DOCKER_TLS_VERIFY`` is set or
``DOCKER_CERT_PATH`` is given (``ca.pem``, ``cert.pem``, ``key.pem`` from that folder, default ``~/.docker``).
An ``ssh://`` engine has no client here (:func:`engine_api` gives None): the SDK's transport serves it.

Errors are deskctl's, as :func:`deskctl.providers.docker.images.docker_errors` gives them for the SDK: 404 is
:class:`~deskctl.errors.NotFound`, another refusal :class:`~deskctl.errors.ProviderApiError` (with its
``status``), no answer / refused TLS / a socket that may not be opened
:class:`~deskctl.errors.ProviderUnreachable` with the remedy. One connection per client is kept open (keep-alive)
and used under a lock; a kept connection the engine closed meanwhile is opened again once.
"""

from __future__ import annotations

import os
from _socket import AF_UNIX, SOCK_STREAM
from _socket import socket as _plain_socket

from deskctl import _threads
from deskctl._jsonc import dumps, loads
from deskctl.errors import DeskctlError, NotFound, ProviderApiError, ProviderUnreachable
from deskctl.providers.docker.engine_http import _Closed, _Connection, quote, urlencode, urlsplit

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from collections.abc import Generator, Iterator, Mapping
    from types import TracebackType
    from typing import Any

    from deskctl.providers._tar import FileTar
    from deskctl.providers.docker.archive import ArchiveBody

__all__ = ["DEFAULT_SOCKET", "EngineApi", "engine_api"]

DEFAULT_SOCKET = "/var/run/docker.sock"
_PROVIDER = "docker"


def engine_api(engine: str | None = None, *, timeout: float = 60.0,
               environment: Mapping[str, str] | None = None) -> EngineApi | None:
    """The client of ``engine`` (a Docker host URL; default ``DOCKER_HOST``, else the local socket), or None for
    an ``ssh://`` engine (the SDK's transport reaches it)."""
    env = os.environ if environment is None else environment
    url = engine or env.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
    if url.startswith("ssh://"):
        return None
    return EngineApi(url, timeout=timeout, environment=env, named=engine or None)


class EngineApi:
    """HTTP/1.1 to one Docker engine; see the module docstring."""

    def __init__(self, url: str, *, timeout: float = 60.0, environment: Mapping[str, str] | None = None,
                 named: str | None = None) -> None:
        env = os.environ if environment is None else environment
        self.url = url
        self.timeout = timeout
        self._named = named  # the engine as the caller named it (for the remedy), None: the environment's
        parts = urlsplit(url)
        self._unix_path: str | None = None
        self._tls: ssl.SSLContext | None = None
        if parts.scheme in ("unix", "http+unix", "npipe") or url.startswith("/"):
            self._unix_path = parts.path or url
            self._host, self._port = "localhost", 80
        elif parts.scheme in ("tcp", "http", "https"):
            self._host = parts.hostname or "127.0.0.1"
            verify_raw = env.get("DOCKER_TLS_VERIFY")
            verify = verify_raw is not None and verify_raw != ""
            cert_path = env.get("DOCKER_CERT_PATH") or ""
            if verify or cert_path or parts.scheme == "https":
                from deskctl.providers.docker.common import tls_context  # (an engine over TLS loads ssl anyway)

                self._tls = tls_context(cert_path or os.path.join(os.path.expanduser("~"), ".docker"), verify)
            self._port = parts.port or (2376 if self._tls is not None else 2375)
        else:
            raise ProviderUnreachable(f"the Docker engine {url!r} is not a unix:// or tcp:// URL", provider=_PROVIDER,
                                      remedy="name it as DOCKER_HOST does, for example tcp://10.0.0.5:2375")
        self._lock = _threads.Lock()
        self._conn: _Connection | None = None

    #: a bulk call's clone (:meth:`_bulk`): its connections are :class:`socket.socket` (``sendfile``)
    _streams = False

    # -- the connection ------------------------------------------------------------------------------------
    def _connect(self) -> _Connection:
        # The local socket as _socket's plain socket object: socket.py (its enums of constants are a twelfth of the
        # instructions of a whole `deskctl down` process) only for TCP, TLS and the bulk calls' sendfile.
        if self._unix_path is not None:
            kind: Any = _plain_socket
            if self._streams:
                import socket
                kind = socket.socket
            sock = kind(AF_UNIX, SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self._unix_path)
            except BaseException:
                sock.close()
                raise
            return _Connection(sock)
        import socket
        sock = socket.create_connection((self._host, self._port), timeout=self.timeout)
        if self._tls is not None:
            try:
                sock = self._tls.wrap_socket(sock, server_hostname=self._host)
            except BaseException:
                sock.close()
                raise
        return _Connection(sock)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> EngineApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _errors(self, doing: str) -> _Errors:
        """A ``with`` block whose exceptions, other than deskctl's, are raised as :meth:`_translate` says."""
        return _Errors(self, doing)

    def _translate(self, doing: str, exc: Exception) -> DeskctlError:
        import ssl  # only here: a process that speaks over the local socket never loads it

        from deskctl.providers.docker.images import TLS_REMEDY, daemon_remedy

        remedy = daemon_remedy(self._named)
        if isinstance(exc, ssl.SSLError):
            reason = exc.reason or type(exc).__name__
            return ProviderUnreachable(f"cannot {doing}: the TLS handshake with the Docker engine failed ({reason})",
                                       provider=_PROVIDER, remedy=TLS_REMEDY)
        if isinstance(exc, PermissionError):
            return ProviderUnreachable(f"cannot {doing}: permission denied on the Docker socket", provider=_PROVIDER,
                                       remedy="add your user to the docker group (`sudo usermod -aG docker $USER`, "
                                              "then log in again), or run as root")
        if isinstance(exc, TimeoutError):
            return ProviderUnreachable(f"cannot {doing}: the Docker daemon did not answer in time",
                                       provider=_PROVIDER, remedy=remedy)
        if isinstance(exc, ConnectionError | FileNotFoundError):
            return ProviderUnreachable(f"cannot {doing}: the Docker daemon does not answer", provider=_PROVIDER,
                                       remedy=remedy)
        if isinstance(exc, OSError):
            return ProviderUnreachable(f"cannot {doing}: {exc.strerror or exc}", provider=_PROVIDER, remedy=remedy)
        # a response that is not HTTP (the engine speaks TLS to a plain client, or something else answers)
        return ProviderUnreachable(f"cannot {doing}: the Docker engine answered no HTTP/1.1 ({exc})",
                                   provider=_PROVIDER, remedy=remedy)

    def request(self, method: str, path: str, doing: str, *, query: Mapping[str, Any] | None = None,
                body: bytes | None = None, headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
        """``(status, body)`` of one request; a status of 400 or more is raised (404: NotFound)."""
        status, data, _ = self._request(method, path, doing, query=query, body=body, headers=headers)
        return status, data

    def _request(self, method: str, path: str, doing: str, *, query: Mapping[str, Any] | None = None,
                 body: bytes | None = None,
                 headers: Mapping[str, str] | None = None) -> tuple[int, bytes, dict[bytes, bytes]]:
        """:meth:`request`, with the response's headers."""
        target = path + ("?" + urlencode(query) if query else "")
        with self._errors(doing), self._lock:
            for attempt in (0, 1):
                reused = self._conn is not None
                if self._conn is None:
                    self._conn = self._connect()
                conn = self._conn
                try:
                    conn.send_request(method, target, body, headers)
                    status, keep, data = conn.read_response(head=method == "HEAD")
                    answered = conn.headers
                except (_Closed, BrokenPipeError, ConnectionResetError):
                    conn.close()
                    self._conn = None
                    if reused and attempt == 0:  # the engine closed the idle connection: once more, on a new one
                        continue
                    raise
                except BaseException:
                    conn.close()
                    self._conn = None
                    raise
                if not keep:
                    conn.close()
                    self._conn = None
                break
        if status >= 400:
            message = _message(data)
            if status == 404:
                raise NotFound(f"cannot {doing}: {message}", provider=_PROVIDER)
            if status == 400 and "HTTP request to an HTTPS server" in message:
                from deskctl.providers.docker.images import TLS_REMEDY

                raise ProviderUnreachable(f"cannot {doing}: the Docker engine demands TLS (it speaks HTTPS; this "
                                          "client spoke plain HTTP)", provider=_PROVIDER, remedy=TLS_REMEDY)
            raise ProviderApiError(f"cannot {doing}: Docker said {status}: {message}", status=status,
                                   provider=_PROVIDER)
        return status, data, answered

    # -- the calls -----------------------------------------------------------------------------------------
    def ping(self) -> None:
        self.request("GET", "/_ping", "reach the Docker daemon")

    def inspect_container(self, container: str) -> dict[str, Any]:
        _, data = self.request("GET", f"/containers/{quote(container, safe='')}/json",
                               f"inspect the container {container}")
        result: dict[str, Any] = _parsed(data)
        return result

    def stat_path(self, container: str, path: str, doing: str) -> dict[str, Any] | None:
        """``HEAD /containers/{id}/archive?path=``: the path's stat as the archive endpoints give it (``name``,
        ``size``, ``mode`` with Go's type bits, ``linkTarget``), without running anything in the container; None
        when the path does not exist (the container's absence is :class:`~deskctl.errors.NotFound` all the
        same: ask :meth:`inspect_container` to tell them apart)."""
        import base64

        target = f"/containers/{quote(container, safe='')}/archive"
        try:
            _, _, headers = self._request("HEAD", target, doing, query={"path": path})
        except NotFound:
            return None
        raw = headers.get(b"x-docker-container-path-stat")
        stat: dict[str, Any] = _parsed(base64.b64decode(raw)) if raw else {}
        return stat

    def remove_container(self, container: str, *, force: bool = True, volumes: bool = True) -> int:
        """The status: 204 once the container is removed (the engine answers when it is gone)."""
        return self.request("DELETE", f"/containers/{quote(container, safe='')}", f"remove the container {container}",
                            query={"force": int(force), "v": int(volumes)})[0]

    def wait_removed(self, container: str, until: float) -> None:
        """Return when the engine reports ``container`` destroyed, or at the wall time ``until`` (whole seconds,
        the engine's resolution); on a connection of its own (the events stream holds it)."""
        filters = dumps({"container": [container], "event": ["destroy"]})
        with self._errors("wait for the container's removal"):
            conn = self._connect()
            try:
                query = urlencode({"filters": filters, "until": int(until)})
                conn.send_request("GET", f"/events?{query}", None, None)
                status = conn.read_head()[0]
                if status == 200:
                    conn.read_line()  # the first event (a chunk's size line), or the end of the stream at `until`
            finally:
                conn.close()


    # -- bulk calls: each on a connection of its own (a stream holds it), with ``timeout`` for every read ----
    def _bulk(self, timeout: float) -> EngineApi:
        clone = EngineApi.__new__(EngineApi)
        clone.__dict__.update(self.__dict__)
        clone.timeout, clone._lock, clone._conn, clone._streams = timeout, _threads.Lock(), None, True
        return clone

    def _open_stream(self, method: str, path: str, doing: str, *, body: bytes | None = None,
                     chunks: Iterator[bytes] | None = None, prepared: FileTar | None = None,
                     headers: Mapping[str, str] | None = None, timeout: float | None = None,
                     version: str = "1.1") -> tuple[_Connection, int, dict[bytes, bytes]]:
        """A request whose response is read by the caller: ``(connection, status, headers)``; an error status is
        raised (its body read) and the connection closed. The body: ``body``, ``chunks`` (chunked encoding) or
        ``prepared`` (its length said up front, the file sent by ``sendfile``). ``version`` "1.0": an HTTP/1.0
        request, whose answer the engine sends without framing, up to the close."""
        from deskctl.providers._tar import peer_closed

        api = self._bulk(timeout or self.timeout)
        with api._errors(doing):
            conn = api._connect()
            try:
                if prepared is not None:
                    conn.send_request(method, path, None, {**(headers or {}), "Content-Length": str(prepared.length)},
                                      length=False)
                    try:
                        prepared.send(conn.sock)
                    except OSError as exc:
                        if not peer_closed(exc):
                            raise
                        # the engine answered (a refusal) before it read the body: its answer is read below
                elif chunks is None:
                    conn.send_request(method, path, body, headers, version=version)
                else:
                    conn.send_request(method, path, None, {**(headers or {}), "Transfer-Encoding": "chunked"},
                                      length=False)
                    try:
                        for chunk in chunks:
                            if chunk:
                                conn.sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                        conn.sock.sendall(b"0\r\n\r\n")
                    except OSError as exc:
                        if not peer_closed(exc):
                            raise
                        # the engine answered (a refusal) before it read the body: its answer is read below
                status, chunked, length = conn.read_head()
                if status >= 400:
                    data = conn.read_body(chunked, length, status)
                    conn.close()
                    self._raise_status(status, data, doing)
            except BaseException:
                conn.close()
                raise
        return conn, status, conn.headers

    def _raise_status(self, status: int, data: bytes, doing: str) -> None:
        message = _message(data)
        if status == 404:
            raise NotFound(f"cannot {doing}: {message}", provider=_PROVIDER)
        raise ProviderApiError(f"cannot {doing}: Docker said {status}: {message}", status=status, provider=_PROVIDER)

    def put_archive(self, container: str, path: str, chunks: Iterator[bytes] | FileTar, doing: str, *,
                    timeout: float = 3600.0) -> None:
        """``PUT /containers/{id}/archive?path=``: the tar ``chunks`` sent as they come (chunked encoding), or a
        prepared tar of one file in one body of known length."""
        from deskctl.providers._tar import FileTar

        target = f"/containers/{quote(container, safe='')}/archive?" + urlencode({"path": path})
        prepared = chunks if isinstance(chunks, FileTar) else None
        conn, _, _ = self._open_stream("PUT", target, doing, chunks=None if prepared else chunks,  # type: ignore[arg-type]
                                       prepared=prepared, timeout=timeout,
                                       headers={"Content-Type": "application/x-tar"})
        with self._errors(doing):
            try:
                status, chunked, length = conn.last_head
                conn.read_body(chunked, length, status)
            finally:
                conn.close()

    def get_archive(self, container: str, path: str, doing: str, *,
                    timeout: float = 3600.0) -> tuple[dict[str, Any], Generator[bytes, None, None]]:
        """``GET /containers/{id}/archive?path=``: the path's stat (as the SDK decodes it) and the tar as chunks
        (the connection closes when they are read, or when the iterator is closed)."""
        import base64

        target = f"/containers/{quote(container, safe='')}/archive?" + urlencode({"path": path})
        conn, _, headers = self._open_stream("GET", target, doing, timeout=timeout)
        raw = headers.get(b"x-docker-container-path-stat")
        stat: dict[str, Any] = _parsed(base64.b64decode(raw)) if raw else {}
        return stat, self._chunks(conn, doing)

    def get_archive_into(self, container: str, path: str, doing: str, buffer: bytearray, *,
                         timeout: float = 3600.0) -> tuple[dict[str, Any], ArchiveBody]:
        """:meth:`get_archive`, the tar read into ``buffer`` as it arrives: each step a list of views of ``buffer``
        (valid until the next step), no bytes object made per read; for a large file written straight out, or
        moved from the socket to the file by the kernel (:meth:`ArchiveBody.splice_to`). Asked in HTTP/1.0, so
        that the engine sends the tar as it is, up to the close, without the chunks' framing (a size line per
        32 KiB, written by the engine and read here)."""
        import base64

        target = f"/containers/{quote(container, safe='')}/archive?" + urlencode({"path": path})
        conn, _, headers = self._open_stream("GET", target, doing, timeout=timeout, version="1.0")
        raw = headers.get(b"x-docker-container-path-stat")
        stat: dict[str, Any] = _parsed(base64.b64decode(raw)) if raw else {}
        from deskctl.providers.docker.archive import ArchiveBody

        return stat, ArchiveBody(conn.sock, conn.last_head[1:], self._views(conn, doing, buffer),
                                 lambda: self._errors(doing))

    def _views(self, conn: _Connection, doing: str, buffer: bytearray) -> Generator[list[memoryview], None, None]:
        try:
            with self._errors(doing):
                _, chunked, length = conn.last_head
                yield from conn.body_into(chunked, length, buffer)
        finally:
            conn.close()

    def _chunks(self, conn: _Connection, doing: str) -> Generator[bytes, None, None]:
        try:
            with self._errors(doing):
                _, chunked, length = conn.last_head
                yield from conn.iter_body(chunked, length)
        finally:
            conn.close()

    def exec_run(self, container: str, argv: list[str], doing: str, *, user: str = "",
                 environment: Mapping[str, str] | None = None,
                 timeout: float = 60.0) -> tuple[int | None, bytes, bytes]:
        """``docker exec`` without a TTY: ``(exit code, stdout, stderr)`` (the code None when the engine has none)."""
        config = {"AttachStdout": True, "AttachStderr": True, "AttachStdin": False, "Tty": False, "Cmd": argv,
                  "User": user, "Env": [f"{k}={v}" for k, v in (environment or {}).items()] or None}
        _, created = self.request("POST", f"/containers/{quote(container, safe='')}/exec", doing,
                                  body=dumps(config).encode(), headers={"Content-Type": "application/json"})
        exec_id = str(_parsed(created)["Id"])
        conn, _, _ = self._open_stream("POST", f"/exec/{exec_id}/start", doing, timeout=timeout,
                                       body=dumps({"Detach": False, "Tty": False}).encode(),
                                       headers={"Content-Type": "application/json", "Connection": "Upgrade",
                                                "Upgrade": "tcp"})
        out, err = bytearray(), bytearray()
        with self._errors(doing):
            try:
                while True:  # the multiplexed stream: 8-byte frame headers (stream, size), up to the close
                    header = conn.read_upto(8)
                    if len(header) < 8:
                        break
                    size = int.from_bytes(header[4:8], "big")
                    payload = conn.read_upto(size)
                    (err if header[0] == 2 else out).extend(payload)
                    if len(payload) < size:
                        break
            finally:
                conn.close()
        _, inspected = self.request("GET", f"/exec/{exec_id}/json", doing)
        code = _parsed(inspected).get("ExitCode")
        return (int(code) if code is not None else None), bytes(out), bytes(err)


def _message(data: bytes) -> str:
    try:
        doc = _parsed(data)
    except ValueError:
        return data.decode(errors="replace").strip()[:500]
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return str(doc["message"]).strip()
    return data.decode(errors="replace").strip()[:500]


def _parsed(data: bytes) -> Any:
    """``json.loads(data)``: a body the engine wrote (UTF-8), through deskctl's :mod:`~deskctl._jsonc`."""
    return loads(data.decode("utf-8", "surrogatepass"))


class _Errors:
    """:meth:`EngineApi._errors`: an exception (not deskctl's) raised in the block becomes the API's translation."""

    __slots__ = ("_api", "_doing")

    def __init__(self, api: EngineApi, doing: str) -> None:
        self._api, self._doing = api, doing

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if isinstance(exc, Exception) and not isinstance(exc, DeskctlError):
            raise self._api._translate(self._doing, exc) from exc

"""Commands and files in a docker desktop: the Engine API exec (streams apart, streamed as they come) and the
archive endpoints (what `docker cp` uses), streamed both ways."""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Callable, Mapping

from deskctl.errors import (
    InfrastructureError,
    NotFound,
    ProviderApiError,
    ProviderUnreachable,
    UsageError,
)
from deskctl.providers._tar import (
    GO_MODE_DIR,
    GO_MODE_SYMLINK,
    FileTar,
    tar_stream,
    unpack_only_file,
    untar_stream,
)
from deskctl.providers.base import (
    ExecResult,
    RemoteHandle,
)
from deskctl.providers.docker.common import (
    _XAUTHORITY,
    DESKTOP_USER,
    DockerHandleData,
    _exec_user,
    _owner_ids,
    _via_agent,
)
from deskctl.providers.docker.container import _DockerCreate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path
    from typing import Any

    import docker

    from deskctl.providers.docker.engine_api import EngineApi


__all__ = ["_DockerFiles"]


def _quote(word: str) -> str:
    import shlex  # here: a `deskctl do` or `down` process never quotes a shell word

    return shlex.quote(word)


class _DockerFiles(_DockerCreate):
    """Commands and files: the Engine API exec and archive endpoints."""

    def _engine_api_or_bulk_client(self, engine: str) -> contextlib.AbstractContextManager[
            tuple[EngineApi | None, Any]]:
        """For one copy: the Engine API over the socket (no SDK: `deskctl cp` is a process per copy), else (an
        ssh:// engine) a bulk SDK client."""
        api = self._engine_api(engine)
        if api is not None:
            return contextlib.nullcontext((api, None))
        return self._with_bulk(engine)

    @contextlib.contextmanager
    def _with_bulk(self, engine: str) -> Iterator[tuple[EngineApi | None, Any]]:
        with self._bulk_client(engine) as client:
            yield None, client

    @contextlib.contextmanager
    def _bulk_client(self, engine: str) -> Iterator[docker.DockerClient]:
        """A client for one copy, closed afterwards: the daemon answers a PUT only once it has unpacked
        everything, which for a large tree takes longer than any API call (hence an hour's read timeout)."""
        client = self._connect(engine, self._api_timeout())
        client.api.timeout = 3600
        try:
            yield client
        finally:
            with contextlib.suppress(Exception):
                client.close()

    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False, on_output: Callable[[str, str], None] | None = None) -> ExecResult:
        """Run ``command`` with ``sh -c`` through the Engine API exec, as the desktop user (DISPLAY set) or as
        ``user``, with ``env`` added (both passed to the API as they are: no quoting), in ``cwd`` (a ``cd`` in
        the shell line, so that a missing folder fails as on every provider: exit 2, the shell's message).
        ``background``: detached from the exec's streams, its pid (in the container) returned at once.

        The command is killed after ``timeout`` seconds (exit code 124, as coreutils ``timeout`` says).
        """
        from deskctl.providers._guest import background_pid, check_exec_options, posix_line

        extra = check_exec_options(env, user, self.name)
        if DockerHandleData.of(handle).task_image and not _via_agent(handle):
            # the display's cookie for every X client a command starts (DISPLAY alone reaches the display); the
            # task image's own environment is otherwise left as it is
            extra.setdefault("XAUTHORITY", _XAUTHORITY)
        container = DockerHandleData.of(handle).container
        seconds = max(1, round(timeout))
        line = posix_line(command, cwd=cwd, background=background) if cwd or background else command
        argv = ["timeout", "-k", "5", str(seconds), "sh", "-c", line]
        engine = self._engine_of(handle)
        api = self._engine_api(engine) if on_output is None else None
        client = None if api is not None else \
            self._client_on(engine) if timeout + 10 <= 60 else self._connect(engine, timeout + 15)
        out: bytes | None
        err: bytes | None
        code: Any
        try:
            if api is not None:  # over the socket directly: a CLI process (`deskctl cp`) loads no SDK for it
                code, out, err = api.exec_run(container, argv, "run a command", user=user or _exec_user(handle),
                                              environment=extra, timeout=timeout + 15)
            else:
                assert client is not None
                with self._errors("run a command"):
                    exec_id = str(client.api.exec_create(container, argv, stdout=True, stderr=True,
                                                         user=user or _exec_user(handle),
                                                         environment=extra or None)["Id"])
                    if on_output is None:
                        out, err = client.api.exec_start(exec_id, demux=True)
                    else:
                        out, err = _stream_exec(client, exec_id, on_output)
                    code = client.api.exec_inspect(exec_id).get("ExitCode")
        except (NotFound, InfrastructureError) as exc:
            if isinstance(exc, ProviderUnreachable):
                raise
            state = self._state(container, engine)
            if state is None or not state.get("Running"):
                raise self._gone_error(handle, state, "run a command") from exc
            raise
        finally:
            if client is not None and client is not self._client and client not in self._engine_clients.values():
                with contextlib.suppress(Exception):
                    client.close()
        result = ExecResult(exit_code=int(code if code is not None else -1),
                            stdout=(out or b"").decode(errors="replace"),
                            stderr=(err or b"").decode(errors="replace"))
        if background and result.exit_code == 0:
            return ExecResult(0, result.stdout, result.stderr, pid=background_pid(result))
        if user and result.exit_code == 126 and not result.stderr and (
                not result.stdout or "unable to find user" in result.stdout):
            # the engine could not start the process: its message (sometimes none at all) comes on stdout
            known = self.exec(handle, f"id -u -- {_quote(user.split(':')[0])}", 30.0)
            if known.exit_code != 0 and not user.split(":")[0].isdigit():
                raise UsageError(f"no user {user!r} in the container {DockerHandleData.of(handle).name}",
                                 code="usage.bad_user", provider=self.name)
        return result

    # -- files: the Engine API's archive endpoints (what `docker cp` uses), streamed both ways -------------------
    def _remote_path(self, handle: RemoteHandle, remote: str) -> str:
        """``remote`` as an absolute path in the container; a relative one is taken from the desktop user's
        working directory, as ``exec`` does."""
        if not remote:
            raise UsageError("an empty path on the desktop", code="usage.bad_path", provider=self.name)
        if remote.startswith("/"):
            return posixpath.normpath(remote)
        here = self.exec(handle, "pwd", 30.0)
        return posixpath.normpath(posixpath.join(here.stdout.strip() or "/", remote))

    def upload(self, handle: RemoteHandle, local: str, remote: str) -> None:
        """One ``PUT /containers/{id}/archive`` of a tar streamed as it is made (the desktop user owns what
        arrives). When the parent folder is missing, it is made (``mkdir -p``, as the desktop user) and the PUT
        sent again."""
        from pathlib import Path

        from deskctl.providers._files import no_such_file

        source = Path(local)
        if not source.exists() and not source.is_symlink():
            raise no_such_file(local, "here", self.name)
        path = self._remote_path(handle, remote)
        parent, name = posixpath.split(path)
        if not name:
            raise UsageError(f"cannot replace {path} on the desktop", code="usage.bad_path", provider=self.name)
        # the engine's archive PUT replaces a folder by a file (and the other way) without a word: refuse, as
        # the other providers do, rather than lose the folder. The same look names the file system the copy
        # lands on: the PUT writes the image's file system, under a tmpfs or kernel mount (/proc, /sys, /dev,
        # /dev/shm) where nobody sees it, and answers 200
        container = DockerHandleData.of(handle).container
        engine = self._engine_of(handle)
        api = self._engine_api(engine)
        there, mount = (self._upload_target(api, container, path) if api is not None else
                        self._upload_target_by_exec(handle, path, parent))
        if mount is not None:
            raise UsageError(f"cannot copy to {path}: {mount[0]} on the desktop is a {mount[1]} mount, "
                             "which the engine's archive copy does not write (it would report success and leave "
                             "nothing there)", code="usage.bad_path", provider=self.name,
                             remedy="copy to a path on the desktop's own file system (under /tmp or the home "
                                    "folder, say)")
        if there and (there == "dir") != source.is_dir():
            what = "folder" if there == "dir" else "file"
            raise UsageError(f"{path} on the desktop is a {what}: a {'folder' if source.is_dir() else 'file'} "
                             "cannot replace it", code="usage.bad_path", provider=self.name,
                             remedy="copy into it with a path under it, or remove it first")
        uid, gid = _owner_ids(DockerHandleData.of(handle).file_owner or DESKTOP_USER)
        try:
            self._put_archive(handle, container, engine, source, name, parent, uid, gid, local, path)
        except BaseException:
            if not there:  # what the failed copy made goes again (the engine unpacks as it receives): no half tree
                with contextlib.suppress(Exception):  # as the desktop user, who owns it (a hardened root may not)
                    self.exec(handle, f"rm -rf -- {_quote(path)}", 30.0)
            raise

    def _put_archive(self, handle: RemoteHandle, container: str, engine: str, source: Path, name: str, parent: str,
                     uid: int, gid: int, local: str, path: str) -> None:
        """One archive PUT of ``source`` as ``name`` into ``parent``; a missing parent is made and the PUT sent
        again."""
        with self._engine_api_or_bulk_client(engine) as (api, client):
            for attempt in range(2):
                prepared = FileTar.of(source, name, uid, gid, provider=self.name) if api is not None else None
                stream = prepared or tar_stream(source, name, uid, gid, provider=self.name)
                try:
                    if api is not None:
                        api.put_archive(container, parent, stream, f"copy {local} to {path}")
                    else:
                        with self._errors(f"copy {local} to {path}", engine):
                            client.api.put_archive(container, parent, stream)
                    return
                except NotFound as exc:
                    state = self._state(container, engine)
                    if state is None or not state.get("Running"):
                        raise self._gone_error(handle, state, "copy files") from exc
                    if attempt:
                        raise ProviderApiError(f"docker: the folder {parent} vanished while copying into it",
                                               provider=self.name) from exc
                finally:
                    stream.close()
                made = self.exec(handle, f"mkdir -p -- {_quote(parent)}", 60.0)
                if made.exit_code != 0:
                    raise ProviderApiError(f"docker: cannot make the folder {parent}: "
                                           f"{made.stderr.strip()[-300:]}", provider=self.name)

    def _upload_target(self, api: EngineApi, container: str, path: str) -> tuple[str, tuple[str, str] | None]:
        """What is at ``path`` (``dir``, ``file`` or ``""``) and the mount the archive PUT cannot write that it is
        under (its mount point and kind), if any: by the archive endpoint's stat (HEAD, as `docker cp` asks) and
        the container's mounts, where an exec (a process started in the container) cost 20 times as much."""
        doing = f"look at {path} on the desktop"
        stat = api.stat_path(container, path, doing)
        for _ in range(8):  # a symlink is followed, as `[ -d PATH ]` does
            mode, link = int((stat or {}).get("mode") or 0), str((stat or {}).get("linkTarget") or "")
            if not (stat and mode & GO_MODE_SYMLINK and link):
                break
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), link))
            stat = api.stat_path(container, path, doing)
        there = "" if not stat else "dir" if int(stat.get("mode") or 0) & GO_MODE_DIR else "file"
        try:
            attrs = api.inspect_container(container)
        except NotFound:
            return there, None  # gone: the PUT says so, as for any copy
        mounts = dict(_KERNEL_MOUNTS)
        mounts.update({str(point): "tmpfs" for point in (attrs.get("HostConfig") or {}).get("Tmpfs") or {}})
        mounts.update({str(m.get("Destination")): "tmpfs" for m in attrs.get("Mounts") or []
                       if m.get("Type") == "tmpfs" and m.get("Destination")})
        for point, kind in sorted(mounts.items(), key=lambda item: -len(item[0])):
            if path == point or path.startswith(point.rstrip("/") + "/"):
                return there, (point, kind)
        return there, None

    def _upload_target_by_exec(self, handle: RemoteHandle, path: str,
                               parent: str) -> tuple[str, tuple[str, str] | None]:
        """:meth:`_upload_target` where no Engine API client serves (an ssh:// engine): by a shell command, which
        names the file system of the nearest folder that exists."""
        seen = self.exec(handle, f"if [ -d {_quote(path)} ]; then echo dir; "
                                 f"elif [ -e {_quote(path)} ]; then echo file; else echo none; fi; "
                                 # the nearest folder that exists (no dirname: any image may be a desktop)
                                 f"d={_quote(parent or '/')}; case \"$d\" in /*) ;; *) d=/ ;; esac; "
                                 'while [ ! -e "$d" ] && [ "$d" != / ]; do d=${d%/*}; d=${d:-/}; done; '
                                 'echo "$d"; stat -f -c %T "$d" 2>/dev/null || echo unknown',
                         60.0).stdout.strip().splitlines()
        there = seen[0].strip() if seen and seen[0].strip() in ("dir", "file") else ""
        if len(seen) >= 3 and seen[2].strip() in _MOUNTS_THE_ARCHIVE_MISSES:
            return there, (seen[1].strip(), seen[2].strip())
        return there, None

    def download(self, handle: RemoteHandle, remote: str, local: str) -> None:
        """One ``GET /containers/{id}/archive``, unpacked as it streams in (the ``data`` filter: nothing lands
        outside ``local``); a file is written beside ``local`` and renamed over it."""
        path = self._remote_path(handle, remote)
        container = DockerHandleData.of(handle).container
        from pathlib import Path

        target = Path(local)
        with self._engine_api_or_bulk_client(self._engine_of(handle)) as (api, client):
            self._download(handle, api or client, container, path, remote, target)

    def _download(self, handle: RemoteHandle, via: Any, container: str, path: str, remote: str,
                  target: Path) -> None:
        """``via``: the Engine API over the socket, or an SDK client (an ssh:// engine)."""
        from deskctl.providers._files import no_such_file
        from deskctl.providers.docker.engine_api import EngineApi

        buffer = bytearray(1 << 20) if isinstance(via, EngineApi) else None
        for _ in range(8):  # a symlink is followed (to its target, as the other providers' tar -C does)
            try:
                if isinstance(via, EngineApi):
                    assert buffer is not None
                    stat, stream = via.get_archive_into(container, path, f"copy {path} from the desktop", buffer)
                else:
                    with self._errors(f"copy {path} from the desktop", self._engine_of(handle)):
                        stream, stat = via.api.get_archive(container, path, chunk_size=None)
            except NotFound as exc:
                state = self._state(container, self._engine_of(handle))
                if state is None or not state.get("Running"):
                    raise self._gone_error(handle, state, "copy files") from exc
                raise no_such_file(remote, "on the desktop", self.name) from exc
            mode = int((stat or {}).get("mode") or 0)
            link = str((stat or {}).get("linkTarget") or "")
            if mode & GO_MODE_SYMLINK and link:
                stream.close()
                path = posixpath.normpath(posixpath.join(posixpath.dirname(path), link))
                continue
            break
        try:
            if buffer is None:  # the SDK's chunks (an ssh:// engine)
                untar_stream(stream, target, is_dir=bool(mode & GO_MODE_DIR), provider=self.name)
            elif mode & GO_MODE_DIR:  # a tree: tarfile reads it (bytes of the views, as they come)
                untar_stream((bytes(view) for views in stream for view in views), target, is_dir=True,
                             provider=self.name)
            else:  # a file: its bytes go from the socket to the file (or from the response's buffer to the file)
                unpack_only_file(stream, target, provider=self.name, splice=stream.splice_to)
        finally:
            with contextlib.suppress(Exception):
                stream.close()


#: the kernel's mounts in every container (what is under /dev: tmpfs, devpts, mqueue, shm), which the archive
#: endpoint does not reach
_KERNEL_MOUNTS = {"/proc": "proc", "/sys": "sysfs", "/dev": "tmpfs"}
#: file systems (``stat -f -c %T``) mounted in a container whose contents the archive endpoint does not reach
_MOUNTS_THE_ARCHIVE_MISSES = frozenset({"proc", "sysfs", "tmpfs", "ramfs", "devpts", "mqueue", "cgroupfs",
                                        "cgroup2fs", "debugfs", "securityfs", "tracefs", "pstorefs", "bpf_fs"})


def _stream_exec(client: docker.DockerClient, exec_id: str,
                 on_output: Callable[[str, str], None]) -> tuple[bytes, bytes]:
    """Start an exec and hand each chunk of its output to ``on_output(text, "stdout" | "stderr")`` as it comes
    (decoded incrementally: a character split between chunks is not mangled); returns all of it."""
    import codecs

    parts: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    decoders = {name: codecs.getincrementaldecoder("utf-8")(errors="replace") for name in parts}
    for out, err in client.api.exec_start(exec_id, stream=True, demux=True):
        for name, chunk in (("stdout", out), ("stderr", err)):
            if chunk:
                parts[name].append(chunk)
                text = decoders[name].decode(chunk)
                if text:
                    on_output(text, name)
    for name, decoder in decoders.items():
        rest = decoder.decode(b"", final=True)
        if rest:
            on_output(rest, name)
    return b"".join(parts["stdout"]), b"".join(parts["stderr"])

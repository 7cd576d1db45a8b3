"""Screen capture through MIT-SHM for the X11 driver: a segment passed as a file descriptor (memfd) or SysV."""

from __future__ import annotations

import _socket
import contextlib
import os
import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from Xlib.display import Display


def _shm_requests() -> tuple[Any, Any, Any, Any]:
    """The MIT-SHM requests deskctl sends (python-xlib has no MIT-SHM module): Attach (System V id), Detach,
    GetImage and AttachFd (MIT-SHM 1.2: the segment travels as a file descriptor beside the request)."""
    from Xlib.protocol import rq

    class ShmAttach(rq.Request):  # type: ignore[misc]
        _request = rq.Struct(
            rq.Card8("opcode"), rq.Opcode(1), rq.RequestLength(),
            rq.Card32("shmseg"), rq.Card32("shmid"), rq.Bool("read_only"), rq.Pad(3),
        )

    class ShmDetach(rq.Request):  # type: ignore[misc]
        _request = rq.Struct(rq.Card8("opcode"), rq.Opcode(2), rq.RequestLength(), rq.Card32("shmseg"))

    class ShmGetImage(rq.ReplyRequest):  # type: ignore[misc]
        _request = rq.Struct(
            rq.Card8("opcode"), rq.Opcode(4), rq.RequestLength(),
            rq.Card32("drawable"), rq.Int16("x"), rq.Int16("y"), rq.Card16("width"), rq.Card16("height"),
            rq.Card32("plane_mask"), rq.Card8("format"), rq.Pad(3), rq.Card32("shmseg"), rq.Card32("offset"),
        )
        _reply = rq.Struct(
            rq.ReplyCode(), rq.Card8("depth"), rq.Card16("sequence_number"), rq.ReplyLength(),
            rq.Card32("visual"), rq.Card32("size"), rq.Pad(16),
        )

    class ShmAttachFd(rq.Request):  # type: ignore[misc]
        _request = rq.Struct(
            rq.Card8("opcode"), rq.Opcode(6), rq.RequestLength(), rq.Card32("shmseg"), rq.Bool("read_only"),
            rq.Pad(3),
        )

    return ShmAttach, ShmDetach, ShmGetImage, ShmAttachFd


class _FdPassingSocket:
    """python-xlib's socket for the span of one request: its first ``send`` carries ``fd`` (SCM_RIGHTS) with
    the bytes, as MIT-SHM's AttachFd needs; everything else goes to the socket unchanged."""

    def __init__(self, sock: socket.socket, fd: int) -> None:
        self._sock = sock
        self._fd: int | None = fd

    def send(self, data: bytes) -> int:
        if self._fd is None:
            return self._sock.send(data)
        import array

        sent = self._sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [self._fd]))])
        self._fd = None
        return sent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _Shm:
    """A shared-memory segment attached to the X server for ShmGetImage. Two ways, the first that works:

    * a memfd passed as a file descriptor (MIT-SHM 1.2 AttachFd) over a unix socket: works across IPC
      namespaces, so a Docker desktop whose X socket is shared through a volume gets shared memory too;
    * a System V segment attached by id (same host and IPC namespace; also what a server older than 1.2 takes).

    Raises OSError when the server takes neither (another host, another user's server)."""

    def __init__(self, display: Display, opcode: int, size: int) -> None:
        self.display = display
        self.opcode = opcode
        self.size = size
        self._attach_cls, self._detach_cls, self._get_image_cls, self._attach_fd_cls = _shm_requests()
        self._map: Any = None  # the memfd's mmap
        self._sysv: tuple[Any, int] | None = None  # (libc, address) of a System V segment
        self.seg = display.display.allocate_resource_id()
        sock = display.display.socket
        # a local connection (x11auth makes it with _socket; a python-xlib one is a socket.socket, its subclass)
        if isinstance(sock, _socket.socket) and sock.family == _socket.AF_UNIX and hasattr(os, "memfd_create"):
            try:
                self._attach_memfd()
                return
            except OSError:
                pass
        self._attach_sysv()

    def _attached(self, send: Any) -> None:
        """Send the attach request ``send(onerror)`` and confirm it with a round trip; OSError if refused."""
        from Xlib.error import CatchError

        caught = CatchError()
        send(caught)
        self.display.sync()
        if caught.get_error() is not None:
            raise OSError(f"the X server cannot attach shared memory: {type(caught.get_error()).__name__}")

    def _attach_memfd(self) -> None:
        import mmap

        fd = os.memfd_create("deskctl-capture", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, self.size)
            mapped = mmap.mmap(fd, self.size)
            holder = self.display.display
            self.display.flush()  # what is queued leaves first, without the descriptor
            original = holder.socket
            holder.socket = _FdPassingSocket(original, fd)
            try:
                self._attached(lambda caught: self._attach_fd_cls(
                    display=holder, onerror=caught, opcode=self.opcode, shmseg=self.seg, read_only=False))
            except BaseException:
                mapped.close()
                raise
            finally:
                holder.socket = original
            self._map = mapped
        finally:
            os.close(fd)  # the server holds its own copy; the mapping keeps the memory

    def _attach_sysv(self) -> None:
        # ctypes (and ctypes.util's subprocess, shutil, tempfile) only for this way: a click never needs it
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.shmget.restype = ctypes.c_int
        libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
        libc.shmat.restype = ctypes.c_void_p
        libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        libc.shmdt.argtypes = [ctypes.c_void_p]
        libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        shmid = libc.shmget(0, self.size, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT | rw owner
        if shmid < 0:
            raise OSError(ctypes.get_errno(), "shmget failed")
        address = libc.shmat(shmid, None, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            libc.shmctl(shmid, 0, None)
            raise OSError(ctypes.get_errno(), "shmat failed")
        try:
            self._attached(lambda caught: self._attach_cls(
                display=self.display.display, onerror=caught, opcode=self.opcode, shmseg=self.seg, shmid=shmid,
                read_only=False))
        except BaseException:
            # the server cannot see our segment (another host, container or IPC namespace, another user)
            libc.shmdt(ctypes.c_void_p(address))
            raise
        finally:
            # Marked for removal now: the kernel frees it when both we and the server have detached.
            libc.shmctl(shmid, 0, None)  # IPC_RMID
        self._sysv = (libc, address)

    @property
    def by_fd(self) -> bool:
        """Whether the segment was passed as a file descriptor (MIT-SHM 1.2) rather than a System V id."""
        return self._map is not None

    def get_image(self, drawable: int, width: int, height: int) -> bytes:
        reply = self._get_image_cls(
            display=self.display.display, opcode=self.opcode, drawable=drawable, x=0, y=0, width=width,
            height=height, plane_mask=0xFFFFFFFF, format=2, shmseg=self.seg, offset=0,  # format 2 = ZPixmap
        )
        length = min(int(reply.size) or self.size, self.size)
        if self._map is not None:
            return self._map[:length]  # type: ignore[no-any-return]
        import ctypes

        assert self._sysv is not None
        return ctypes.string_at(self._sysv[1], length)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._detach_cls(display=self.display.display, opcode=self.opcode, shmseg=self.seg)
            self.display.flush()
        if self._map is not None:
            self._map.close()
        elif self._sysv is not None:
            import ctypes

            libc, address = self._sysv
            libc.shmdt(ctypes.c_void_p(address))

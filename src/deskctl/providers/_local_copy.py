"""A folder copied on this host (the xvfb provider's ``upload`` and ``download``: the desktop's files are this
host's) in as few system calls as ``cp -r`` makes, keeping what :func:`shutil.copytree` keeps.

``shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)`` made 2000 small files in 1.3-1.7 times the time of
``cp -r``: per file it opens both ends through :func:`io.open` (an ``fstat``, an ``ioctl`` and an ``lseek`` each),
stats the source three times, and sets the mode and times by path and lists the source's extended attributes.
:func:`copy_tree` opens each end once with :func:`os.open`, takes the size, mode and times from one ``fstat``,
moves the bytes in the kernel (``copy_file_range``, else ``sendfile``), and sets the times on the open file (and
the mode only where the creation's mode, less the umask, did not already give it).

The same result as copytree's: a folder merged into one that is there (a file there replaced, its mode set),
symbolic links copied as links, the modes and the access and modification times kept (of folders too, set after
their contents), a special file (a FIFO, a device, a socket) refused with :class:`shutil.SpecialFileError`. The
first error ends the copy (copytree went on and listed them all at the end); the caller removes what it made.
Extended attributes are not copied (``cp -r`` does not copy them either).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat

__all__ = ["copy_tree"]

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
# O_NONBLOCK: opening a FIFO does not wait for a writer (it is refused once open); nothing else heeds it
_READ = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
#: copy_file_range's answers that mean "not between these two files": sendfile does it instead
_NO_RANGE_COPY = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM, errno.ETXTBSY}


def _umask() -> int:
    """This process's umask, read where no other thread can see it change (Linux says it in /proc); else set and
    set back."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def copy_tree(src: str, dst: str) -> None:
    """Make ``dst`` (made if missing, merged into if there) a copy of the folder ``src``. Where the platform lacks
    ``copy_file_range`` or ``sendfile``, :func:`shutil.copytree` does it."""
    if not hasattr(os, "sendfile") or not hasattr(os, "copy_file_range"):
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
        return
    _Copier(_umask()).folder(src, dst)


class _Copier:
    def __init__(self, umask: int) -> None:
        self.umask = umask
        self.range_copy = True

    def folder(self, src: str, dst: str) -> None:
        os.makedirs(dst, exist_ok=True)
        with os.scandir(src) as listing:
            entries = list(listing)
        for entry in entries:
            target = os.path.join(dst, entry.name)
            if entry.is_symlink():
                self.link(entry, target)
            elif entry.is_dir(follow_symlinks=False):
                self.folder(entry.path, target)
            else:
                self.file(entry.path, target)
        info = os.stat(src)
        os.chmod(dst, stat.S_IMODE(info.st_mode))  # after the contents: a read-only folder is filled first
        os.utime(dst, ns=(info.st_atime_ns, info.st_mtime_ns))

    @staticmethod
    def link(entry: os.DirEntry[str], target: str) -> None:
        pointed = os.readlink(entry.path)
        try:
            os.symlink(pointed, target)
        except FileExistsError:
            if os.path.isdir(target) and not os.path.islink(target):
                raise
            os.unlink(target)
            os.symlink(pointed, target)
        info = entry.stat(follow_symlinks=False)
        if os.utime in os.supports_follow_symlinks:
            os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)

    def file(self, src: str, dst: str) -> None:
        source = os.open(src, _READ)
        try:
            info = os.fstat(source)
            if not stat.S_ISREG(info.st_mode):
                raise shutil.SpecialFileError(f"`{src}` is not a regular file")
            mode = stat.S_IMODE(info.st_mode)
            try:
                target = os.open(dst, _CREATE | os.O_EXCL, mode)
                exact = not mode & self.umask  # a new file: its mode is the creation's, less the umask
            except FileExistsError:
                target = os.open(dst, _CREATE, mode)
                exact = False
            try:
                self.bytes(source, target, info.st_size)
                if not exact:
                    os.fchmod(target, mode)
                os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
            finally:
                os.close(target)
        finally:
            os.close(source)

    def bytes(self, source: int, target: int, size: int) -> None:
        """All of ``source`` into ``target``: ``size`` is what fstat said; a file that grew meanwhile is copied to
        its end."""
        chunk = max(size, 1 << 20)
        while self.range_copy:
            try:
                if not os.copy_file_range(source, target, chunk):
                    return
            except OSError as exc:
                if exc.errno not in _NO_RANGE_COPY or os.lseek(target, 0, os.SEEK_CUR):
                    raise
                self.range_copy = False  # this pair of file systems: sendfile from here on
        offset = 0
        while True:
            sent = os.sendfile(target, source, offset, chunk)
            if not sent:
                return
            offset += sent

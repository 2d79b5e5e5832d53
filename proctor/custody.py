"""Custody: taking the submission away from the student before anything grades it.

The student controls every byte inside its workdir and may have raced, linked or booby-trapped any
of it. At the end of a step the harness (root) copies each declared submission path out of the
workdir into a fresh grader-only directory, and judges read only that copy. This module is the only
code that touches the student's tree, and it trusts nothing in it:

- Every path component is opened relative to its parent's descriptor with `O_NOFOLLOW`, so no
  symlink (at the answer, at a parent directory, swapped in mid-walk) is ever followed; nothing
  here hands a student-controlled path string to a function that resolves it from `/`.
- Each entry is classified with `lstat` before it is opened, so a FIFO, socket or device node is
  never opened at all; `O_NONBLOCK` is a second layer so one swapped in after the check cannot
  block the open; after opening, `fstat` must show the very inode `lstat` saw.
- Only regular files and directories are accepted. Hard links to files the student does not own
  are refused (they would copy a file the student could not otherwise hand in).
- Sizes are checked on `st_size` before a byte is read (a 100 GB sparse file fails at once), and
  reads stop one byte past the cap, so a file that grows under us cannot exhaust memory or disk.
  Entry count and depth are capped while listing, before anything is copied; the walk is
  iterative, so no tree is deep enough to raise RecursionError.
- Names are handled as bytes end to end, so undecodable names arrive exactly as written.
- The copy holds content only: created 0600/0700, owned by the harness, no xattrs, no mode bits
  from the source (so no setuid), no ownership.

What it does not do: it does not freeze the student (the sandbox must prove no student process is
left before custody runs; the checks here are a second layer against a racer that survived), and it
does not look inside files (a pickle or a script is copied as bytes; running it safely is the
judge's job)."""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from .errors import ConfigError
from .sandbox.models import KillReport

if TYPE_CHECKING:
    from .sandbox import StudentSandbox

MiB = 1024 * 1024

Misbehaviour = Literal[
    "submission_symlink",
    "submission_special_file",
    "submission_hardlink",
    "submission_too_large",
    "submission_too_many_entries",
    "submission_too_deep",
    "submission_changed_during_copy",
]

__all__ = [
    "ArtifactReport", "CustodyError", "CustodyItem", "CustodyLimits", "CustodyReport", "Misbehaviour",
    "CustodyPoint", "MisbehaviourEvent", "SkippedEntry", "WHOLE_WORKDIR", "custody_point", "save_artifact", "take_custody",
]

WHOLE_WORKDIR = "*"
"""Declared alone (`submit=("*",)`): the whole workdir is one item, every entry in it copied under
the same strict rules as a declared path (the first symlink, special file, foreign hard link, cap
overrun or too-deep entry refuses it all)."""

_CHUNK = 1 * MiB
_REASON_PATH_CHARS = 300

# Source-side errors the student can cause (by racing, or by chmod when the harness lacks
# CAP_DAC_OVERRIDE). They refuse the item. Anything else (EMFILE, EIO, ENOMEM...) is the harness's
# own failure and is raised, so it is reported as infra_error, never as the student's fault.
_STUDENT_ERRNOS = {
    errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENXIO, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG,
    errno.EISDIR, errno.ENODEV, errno.EOVERFLOW, errno.ETXTBSY,
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CustodyLimits(_Model):
    """Caps on what one custody (all declared paths together) may copy."""

    max_file_bytes: int = Field(64 * MiB, ge=0, description="Largest regular file accepted, by st_size (so a sparse file counts at its full size).")
    max_total_bytes: int = Field(256 * MiB, ge=0, description="Most bytes of regular files accepted across all declared paths, by st_size.")
    max_entries: int = Field(10_000, ge=1, description="Most entries (files, directories and anything else listed) across all declared paths.")
    max_depth: int = Field(64, ge=1, le=256, description="Most path components below the workdir root an entry may have. The walk holds two descriptors per level, hence the upper bound.")


class CustodyError(ConfigError, ValueError):
    """Custody was called wrongly (a bad declared path, a used destination): an authoring or harness error, never the student's."""


class CustodyItem(_Model):
    """What custody did with one declared submission path."""

    path: str = Field(description="The declared path, relative to the workdir root, as the task wrote it.")
    status: Literal["copied", "missing", "refused"] = Field(description="copied: the copy is under dest at the same relative path. missing: some component does not exist (not misbehaviour). refused: nothing of it is in dest.")
    reason: str | None = Field(None, description="Why it is missing or refused, naming the offending relative path (undecodable bytes and control characters escaped).")
    misbehaviour: Misbehaviour | None = Field(None, description="The kind of misbehaviour a refusal is evidence of; None when refused for a reason that is not clearly an attack (e.g. permission denied).")
    files: int = Field(0, description="Regular files copied.")
    bytes: int = Field(0, description="Bytes copied.")
    links_left_out: int = Field(0, description=(
        "Whole workdir only: symlinks left out of the copy because they point at the system or stay inside the workdir "
        "(a virtual environment's bin/python, node_modules/.bin); any other link refuses the lot."))


class CustodyReport(_Model):
    """The outcome of one custody: one item per declared path, in declared order."""

    items: list[CustodyItem] = Field(description="One entry per declared path.")
    dest: str = Field(description="The grader-only directory holding the copies.")

    @computed_field(description="True when no item was refused (missing items are not refusals).")  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        return all(item.status != "refused" for item in self.items)


class SkippedEntry(_Model):
    """One entry save_artifact did not copy."""

    path: str = Field(description="Relative path below the root (undecodable bytes and control characters escaped).")
    reason: str = Field(description="Why it was skipped.")
    misbehaviour: Misbehaviour | None = Field(None, description="The kind of misbehaviour it is evidence of, if any.")


class ArtifactReport(_Model):
    """What save_artifact kept of a whole student tree, for people to inspect later."""

    dest: str = Field(description="Where the copy is.")
    files: int = Field(0, description="Regular files copied.")
    dirs: int = Field(0, description="Directories copied (not counting dest itself).")
    bytes: int = Field(0, description="Bytes copied.")
    skipped: list[SkippedEntry] = Field(default_factory=list, description="Everything not copied, with why. Links are recorded, never followed.")

    @computed_field(description="True when nothing was skipped.")  # type: ignore[prop-decorator]
    @property
    def complete(self) -> bool:
        return not self.skipped


class _Refusal(Exception):
    def __init__(self, kind: Misbehaviour | None, reason: str):
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


class _Missing(Exception):
    pass


def _show(rel: bytes) -> str:
    """A relative path as a human can read it: a name like b'\\xff\\n' cannot forge a log line."""
    text = rel.decode("utf-8", "backslashreplace")
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return text if len(text) <= _REASON_PATH_CHARS else text[:_REASON_PATH_CHARS] + "..."


_KIND_NAMES = {
    stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device", stat.S_IFLNK: "a symlink", stat.S_IFDIR: "a directory", stat.S_IFREG: "a regular file",
}


def _kind_name(mode: int) -> str:
    return _KIND_NAMES.get(stat.S_IFMT(mode), f"a file of unknown type {stat.S_IFMT(mode):o}")


def _same_inode(a: os.stat_result, b: os.stat_result) -> bool:
    return a.st_dev == b.st_dev and a.st_ino == b.st_ino and stat.S_IFMT(a.st_mode) == stat.S_IFMT(b.st_mode)


def _source_error(exc: OSError, rel: bytes, doing: str) -> _Refusal:
    """Turn an OSError on the student's side into a refusal, or re-raise the harness's own failure."""
    if exc.errno not in _STUDENT_ERRNOS:
        raise exc
    if exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENOTDIR, errno.ENXIO, errno.EISDIR):
        # lstat said one thing and the kernel now says another: the tree changed under us (ELOOP
        # from O_NOFOLLOW: it became a symlink; ENXIO: it became a socket).
        what = {errno.ELOOP: "became a symlink", errno.ENOENT: "vanished", errno.ENOTDIR: "stopped being a directory",
                errno.ENXIO: "became a socket", errno.EISDIR: "became a directory"}[exc.errno]
        return _Refusal("submission_changed_during_copy", f"{_show(rel)} {what} while being {doing}")
    return _Refusal(None, f"could not {doing.removesuffix('ed')} {_show(rel)}: {os.strerror(exc.errno or 0)}")


@dataclass
class _Frame:
    src: int
    dst: int
    names: list[bytes]
    rel: bytes
    depth: int
    next: int = 0

    def close(self) -> None:
        os.close(self.src)
        os.close(self.dst)


# Where a whole workdir's absolute symlinks may point and be left out rather than refused: the
# read-only system tree and the student runtime, which every sandbox shows anyway.
_SYSTEM_LINK_TARGETS = (b"/usr/", b"/bin/", b"/lib/", b"/lib64/", b"/opt/proctor/student-runtime/")


@dataclass
class _Copier:
    """The safe copy shared by take_custody (strict: first bad entry refuses the item) and
    save_artifact (lenient: bad entries are skipped and recorded)."""

    limits: CustodyLimits
    owner_uid: int
    lenient: bool
    entries: int = 0
    bytes: int = 0
    files: int = 0
    dirs: int = 0
    skipped: list[SkippedEntry] = field(default_factory=list)
    inner_links: bool = False  # the whole workdir: leave benign links out instead of refusing
    workdir_at: bytes | None = None  # the workdir's path inside the sandbox, with a trailing /
    links_left_out: int = 0
    _entries_capped: bool = False

    def leaves_out(self, parent: int, name: bytes, st: os.stat_result, rel: bytes) -> bool:
        """A whole workdir's symlink that is harmless to leave out of the copy: one to the system's
        read-only tree or the student runtime (a venv's bin/python), or a relative one that stays
        inside the workdir (node_modules/.bin). Honest tools make these; refusing them zeroed honest
        solves. Leaving one out can only take from what the student handed in, never add to it."""
        if not (self.inner_links and stat.S_ISLNK(st.st_mode)):
            return False
        try:
            target = os.readlink(name, dir_fd=parent)
        except OSError:
            return False
        if target.startswith(b"/"):
            prefixes = (*_SYSTEM_LINK_TARGETS, self.workdir_at) if self.workdir_at else _SYSTEM_LINK_TARGETS
            benign = any(target.startswith(p) for p in prefixes) and b"/../" not in target + b"/" and b"/./" not in target + b"/"
        else:
            inside = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
            benign = not (inside == b".." or inside.startswith(b"../") or inside.startswith(b"/"))
        if benign:
            self.links_left_out += 1
        return benign

    # -- checks -------------------------------------------------------------------------------

    def vet(self, st: os.stat_result, rel: bytes) -> None:
        """Refuse anything but a directory or a regular file within caps. Runs on lstat before
        opening (so nothing dangerous is ever opened) and again on fstat after (so a swap cannot slip by)."""
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            return
        if stat.S_ISLNK(mode):
            # Following it would copy whatever it points at: /etc/shadow, another sandbox, the grader.
            raise _Refusal("submission_symlink", f"{_show(rel)} is a symlink")
        if not stat.S_ISREG(mode):
            # Opening a FIFO blocks the harness forever; a device can be endless (/dev/zero) or have side effects.
            raise _Refusal("submission_special_file", f"{_show(rel)} is {_kind_name(mode)}")
        if st.st_nlink > 1 and st.st_uid != self.owner_uid:
            # A hard link shares the inode: the student would hand in a file someone else wrote
            # (a reference solution, another rollout's answer) that it could never have produced.
            raise _Refusal("submission_hardlink", f"{_show(rel)} is a hard link ({st.st_nlink} links) to a file owned by uid {st.st_uid}, not the student")
        limits = self.limits
        if st.st_size > limits.max_file_bytes:
            # Checked on st_size before reading: a 100 GB sparse file fails now, not after an hour of zeros.
            raise _Refusal("submission_too_large", f"{_show(rel)} is {st.st_size} bytes; max_file_bytes is {limits.max_file_bytes}")
        if self.bytes + st.st_size > limits.max_total_bytes:
            raise _Refusal("submission_too_large", f"{_show(rel)} ({st.st_size} bytes) takes the submission past max_total_bytes ({limits.max_total_bytes})")

    def lstat(self, parent: int, name: bytes, rel: bytes) -> os.stat_result:
        try:
            return os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError as exc:
            raise _source_error(exc, rel, "listed") from None

    def open(self, parent: int, name: bytes, lst: os.stat_result, rel: bytes) -> tuple[int, os.stat_result]:
        """Open an entry already vetted by lstat, and prove the descriptor is that same inode."""
        # O_NOFOLLOW: a symlink swapped in after lstat fails with ELOOP instead of being followed.
        # O_NONBLOCK: a FIFO swapped in after lstat opens at once instead of blocking on a writer.
        # O_NOCTTY: a terminal swapped in cannot become our controlling terminal.
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
        if stat.S_ISDIR(lst.st_mode):
            flags |= os.O_DIRECTORY
        try:
            fd = os.open(name, flags, dir_fd=parent)
        except OSError as exc:
            refusal = _source_error(exc, rel, "opened")
            if refusal.kind == "submission_changed_during_copy":
                # Say what it became: with O_DIRECTORY the kernel answers a symlink with ENOTDIR, not ELOOP.
                try:
                    now = os.stat(name, dir_fd=parent, follow_symlinks=False)
                    refusal = _Refusal(refusal.kind, f"{_show(rel)} was replaced by {_kind_name(now.st_mode)} while being opened")
                except OSError:
                    pass
            raise refusal from None
        try:
            st = os.fstat(fd)
            if not _same_inode(lst, st):
                # Renamed over between lstat and open: what we checked is not what we hold.
                raise _Refusal("submission_changed_during_copy", f"{_show(rel)} was replaced while being opened (now {_kind_name(st.st_mode)})")
            self.vet(st, rel)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def list(self, fd: int, rel: bytes, depth: int) -> list[bytes]:
        """Names in an opened directory, at most as many as the entry budget allows (plus one to
        know it was exceeded), so 100k tiny files are refused after reading 10k names, copying none."""
        remaining = self.limits.max_entries - self.entries
        try:
            # scandir on a descriptor dups it: the directory we vetted, not a path the student can swap.
            with os.scandir(fd) as it:
                # Names come back fsdecoded (surrogateescape); fsencode restores the exact bytes.
                names = [os.fsencode(entry.name) for entry in islice(it, max(remaining, 0) + 1)]
        except OSError as exc:
            raise _source_error(exc, rel, "listed") from None
        if names and depth + 1 > self.limits.max_depth:
            refusal = _Refusal("submission_too_deep", f"{_show(rel)} has entries deeper than max_depth ({self.limits.max_depth})")
            if not self.lenient:
                raise refusal
            self.skip(rel + b"/*", refusal)
            return []
        if len(names) > remaining:
            refusal = _Refusal("submission_too_many_entries", f"{_show(rel)} takes the submission past max_entries ({self.limits.max_entries})")
            if not self.lenient:
                raise refusal
            if not self._entries_capped:
                self._entries_capped = True
                self.skip(rel, refusal)
            names = names[: max(remaining, 0)]
        self.entries += len(names)
        return sorted(names)

    def count_entry(self, rel: bytes) -> None:
        if self.entries + 1 > self.limits.max_entries:
            raise _Refusal("submission_too_many_entries", f"{_show(rel)} takes the submission past max_entries ({self.limits.max_entries})")
        self.entries += 1

    def skip(self, rel: bytes, refusal: _Refusal) -> None:
        self.skipped.append(SkippedEntry(path=_show(rel), reason=refusal.reason, misbehaviour=refusal.kind))

    # -- copying ------------------------------------------------------------------------------

    def copy_entry(self, src_parent: int, name: bytes, lst: os.stat_result, rel: bytes, depth: int, dst_parent: int) -> None:
        """Copy one vetted entry (a whole subtree for a directory) to dst_parent/name."""
        if stat.S_ISDIR(lst.st_mode):
            self._copy_dir(src_parent, name, lst, rel, depth, dst_parent)
        else:
            self._copy_file(src_parent, name, lst, rel, dst_parent)

    def _copy_file(self, src_parent: int, name: bytes, lst: os.stat_result, rel: bytes, dst_parent: int) -> None:
        src, st = self.open(src_parent, name, lst, rel)
        try:
            # O_EXCL|O_NOFOLLOW on our own side too: dest is ours, but never write through a link.
            dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst_parent)
            try:
                # Set exactly (umask may only remove bits), never the source's mode: only whether it was executable,
                # so a script or binary the student built still runs where it is graded; never setuid/setgid/sticky.
                os.fchmod(dst, 0o700 if st.st_mode & stat.S_IXUSR else 0o600)
                cap = min(self.limits.max_file_bytes, self.limits.max_total_bytes - self.bytes)
                copied = _copy_bounded(src, dst, cap)
                after = os.fstat(src)
                if copied > cap:
                    # Grew between fstat and read (a racer still appending): stopped one byte past the cap.
                    raise _Refusal("submission_too_large", f"{_show(rel)} grew past {cap} bytes while being copied")
                if copied != st.st_size or after.st_size != st.st_size or after.st_mtime_ns != st.st_mtime_ns:
                    raise _Refusal("submission_changed_during_copy", f"{_show(rel)} changed while being copied ({st.st_size} bytes at open, {copied} read)")
            except BaseException:
                os.close(dst)
                dst = -1
                os.unlink(name, dir_fd=dst_parent)
                raise
            finally:
                if dst >= 0:
                    os.close(dst)
        finally:
            os.close(src)
        self.files += 1
        self.bytes += copied

    def _open_dir_pair(self, src_parent: int, name: bytes, lst: os.stat_result, rel: bytes, depth: int, dst_parent: int) -> _Frame:
        src, _ = self.open(src_parent, name, lst, rel)
        try:
            names = self.list(src, rel, depth)
            os.mkdir(name, 0o700, dir_fd=dst_parent)
            dst = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dst_parent)
            os.fchmod(dst, 0o700)  # no setgid inherited, no source mode
        except BaseException:
            os.close(src)
            raise
        self.dirs += 1
        return _Frame(src, dst, names, rel, depth)

    def _copy_dir(self, src_parent: int, name: bytes, lst: os.stat_result, rel: bytes, depth: int, dst_parent: int) -> None:
        # An explicit stack, not recursion: a 10,000-deep tree must hit max_depth, not RecursionError.
        frames = [self._open_dir_pair(src_parent, name, lst, rel, depth, dst_parent)]
        try:
            while frames:
                frame = frames[-1]
                if frame.next == len(frame.names):
                    frames.pop().close()
                    continue
                child = frame.names[frame.next]
                frame.next += 1
                child_rel = frame.rel + b"/" + child
                try:
                    st = self.lstat(frame.src, child, child_rel)
                    if self.leaves_out(frame.src, child, st, child_rel):
                        continue
                    self.vet(st, child_rel)
                    if stat.S_ISDIR(st.st_mode):
                        frames.append(self._open_dir_pair(frame.src, child, st, child_rel, frame.depth + 1, frame.dst))
                    else:
                        self._copy_file(frame.src, child, st, child_rel, frame.dst)
                except _Refusal as refusal:
                    if not self.lenient:
                        raise
                    self.skip(child_rel, refusal)
        finally:
            for frame in frames:
                frame.close()


def _copy_bounded(src: int, dst: int, cap: int) -> int:
    """Copy src to dst, reading at most cap + 1 bytes: enough to know the cap was passed, never more,
    whatever the source does (grows, is endless)."""
    copied = 0
    while copied <= cap:
        chunk = os.read(src, min(_CHUNK, cap + 1 - copied))
        if not chunk:
            break
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view):]
        copied += len(chunk)
    return copied


def _declared_parts(path: str, limits: CustodyLimits) -> tuple[bytes, ...]:
    """Split a declared path into components, refusing what can only be an authoring error."""
    if not isinstance(path, str) or not path.strip():
        raise CustodyError(f"declared submission path {path!r} is empty; name a file or directory relative to /workdir")
    if path.startswith("/"):
        raise CustodyError(f"declared submission path {path!r} is absolute; write it relative to /workdir (e.g. 'answer.txt')")
    if "\0" in path:
        raise CustodyError(f"declared submission path {path!r} contains a NUL byte")
    parts = tuple(os.fsencode(p) for p in path.split("/") if p not in ("", "."))
    if b".." in parts:
        raise CustodyError(f"declared submission path {path!r} contains '..'; submissions must stay inside /workdir")
    if not parts:
        raise CustodyError(f"declared submission path {path!r} names the workdir itself; declare the files or directories to grade")
    if len(parts) > limits.max_depth:
        raise CustodyError(f"declared submission path {path!r} is {len(parts)} components deep; max_depth is {limits.max_depth}")
    return parts


def _open_root(root: str | Path) -> tuple[int, os.stat_result]:
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise CustodyError(f"custody root {str(root)!r} cannot be opened as a directory ({os.strerror(exc.errno or 0)}); pass the sandbox's workdir") from None
    return fd, os.fstat(fd)


def _make_dest(dest: str | Path, root: str | Path) -> int:
    """Create (or adopt an empty) grader-only destination: 0700, owned by the harness."""
    dest_abs = os.path.realpath(dest)
    root_abs = os.path.realpath(root)
    if dest_abs == root_abs or dest_abs.startswith(root_abs.rstrip("/") + "/"):
        raise CustodyError(f"custody destination {str(dest)!r} is inside the student's tree {str(root)!r}; use a grader-only directory")
    try:
        os.mkdir(dest, 0o700)
    except FileExistsError:
        st = os.stat(dest, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode) or os.listdir(dest):
            raise CustodyError(f"custody destination {str(dest)!r} exists and is not an empty directory; give each custody a fresh one") from None
    except FileNotFoundError:
        os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
        os.mkdir(dest, 0o700)
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, 0o700)
        if os.geteuid() == 0:
            os.fchown(fd, 0, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove_entry(parent: int, name: bytes) -> None:
    """Remove parent/name and everything below it, iteratively, by descriptor (dest is ours, but
    its names are the student's bytes and its depth is the student's choice)."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    stack: list[tuple[int, bytes, int]] = []  # (parent fd, name, fd of that dir)
    stack.append((parent, name, os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)))
    try:
        while stack:
            up, dname, fd = stack[-1]
            subdir = None
            for child in os.listdir(fd):
                child_b = os.fsencode(child)
                if stat.S_ISDIR(os.stat(child_b, dir_fd=fd, follow_symlinks=False).st_mode):
                    subdir = child_b
                    break
                os.unlink(child_b, dir_fd=fd)
            if subdir is not None:
                stack.append((fd, subdir, os.open(subdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)))
                continue
            stack.pop()
            os.close(fd)
            os.rmdir(dname, dir_fd=up)
    finally:
        for _, _, fd in stack:
            os.close(fd)


def _owner(student_uid: int | None, root_st: os.stat_result) -> int:
    # Without a student uid, the workdir root's owner stands in for the student: a hard link to a
    # file anyone else owns is still refused.
    return student_uid if student_uid is not None else root_st.st_uid


def _check_overlap(declared: list[tuple[str, tuple[bytes, ...]]]) -> None:
    for i, (a, pa) in enumerate(declared):
        for b, pb in declared[i + 1:]:
            shorter = min(len(pa), len(pb))
            if pa[:shorter] == pb[:shorter]:
                raise CustodyError(f"declared submission paths {a!r} and {b!r} overlap; declare each file or directory once")


def starting_files(root: str | Path, *, max_files: int = 20_000, max_bytes: int = 256 * 2**20) -> dict[str, str]:
    """SHA-256 of every regular file under a workdir, keyed by its path relative to it: what the
    task gave the student (workdir_files, an image's files), read before any student process ran.
    Judges use it to tell the task's own files from the student's (PytestJudge never flags a file
    that is byte-for-byte one the student was given). Links are not followed; past `max_files`
    or `max_bytes` the rest is left out (those files are then simply not known as the task's)."""
    import hashlib

    digests: dict[str, str] = {}
    total = 0
    base = str(root)
    for dirpath, dirs, names, dir_fd in os.fwalk(base, follow_symlinks=False):
        dirs.sort()
        for name in sorted(names):
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode):
                    continue
                if len(digests) >= max_files or total + st.st_size > max_bytes:
                    return digests
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as fh:
                digests[os.path.relpath(os.path.join(dirpath, name), base)] = hashlib.file_digest(fh, "sha256").hexdigest()
            total += st.st_size
    return digests


def take_custody(
    root: str | Path,
    paths: Sequence[str],
    dest: str | Path,
    *,
    student_uid: int | None,
    limits: CustodyLimits = CustodyLimits(),
    workdir_at: str | None = None,
) -> CustodyReport:
    """Copy each declared path out of the student's tree `root` into the fresh directory `dest`.
    `workdir_at`: where `root` is inside the sandbox (its workdir, e.g. /app), so a whole-workdir
    submission's absolute link back into it is left out like a relative one, not refused.

    Each item is copied whole or not at all: a symlink, special file, foreign hard link, cap
    overrun or mid-copy swap anywhere in it refuses the item (with the misbehaviour kind and the
    offending relative path) and removes its partial copy. A component that does not exist makes it
    missing. Student-controlled weirdness never raises; CustodyError (a ValueError) is raised only
    for authoring errors: a declared path that is empty, absolute or contains '..', overlapping
    declarations, or a destination that is not fresh. Caps apply to all items together; a refused
    item's share is given back."""
    if isinstance(paths, str):
        raise CustodyError(f"paths must be a list of declared paths, not the string {paths!r}")
    if WHOLE_WORKDIR in paths:
        if len(paths) != 1:
            raise CustodyError(f"declared submission paths {list(paths)!r}: '*' (the whole workdir) must be declared alone")
        return _take_whole(root, dest, student_uid, limits, workdir_at)
    declared = [(p, _declared_parts(p, limits)) for p in paths]
    _check_overlap(declared)
    root_fd, root_st = _open_root(root)
    try:
        dest_fd = _make_dest(dest, root)
        try:
            copier = _Copier(limits=limits, owner_uid=_owner(student_uid, root_st), lenient=False)
            items = [_take_item(copier, root_fd, dest_fd, p, parts) for p, parts in declared]
        finally:
            os.close(dest_fd)
    finally:
        os.close(root_fd)
    return CustodyReport(items=items, dest=os.path.abspath(dest))


def _take_whole(root: str | Path, dest: str | Path, student_uid: int | None, limits: CustodyLimits,
                workdir_at: str | None = None) -> CustodyReport:
    """The whole workdir as one strict item: each top-level entry is copied like a declared path;
    the first refusal anywhere empties dest and refuses the lot."""
    root_fd, root_st = _open_root(root)
    try:
        dest_fd = _make_dest(dest, root)
        try:
            copier = _Copier(limits=limits, owner_uid=_owner(student_uid, root_st), lenient=False, inner_links=True,
                             workdir_at=os.fsencode(workdir_at.rstrip("/") + "/") if workdir_at else None)
            try:
                for name in copier.list(root_fd, b".", 0):
                    st = copier.lstat(root_fd, name, name)
                    if copier.leaves_out(root_fd, name, st, name):
                        continue
                    copier.vet(st, name)
                    copier.copy_entry(root_fd, name, st, name, 1, dest_fd)
            except _Refusal as refusal:
                for name in os.listdir(dest_fd):
                    _remove_entry(dest_fd, os.fsencode(name))
                item = CustodyItem(path=WHOLE_WORKDIR, status="refused", reason=refusal.reason, misbehaviour=refusal.kind)
            else:
                item = CustodyItem(path=WHOLE_WORKDIR, status="copied", files=copier.files, bytes=copier.bytes,
                                   links_left_out=copier.links_left_out)
        finally:
            os.close(dest_fd)
    finally:
        os.close(root_fd)
    return CustodyReport(items=[item], dest=os.path.abspath(dest))


def _take_item(copier: _Copier, root_fd: int, dest_fd: int, declared: str, parts: tuple[bytes, ...]) -> CustodyItem:
    before = (copier.entries, copier.bytes, copier.files, copier.dirs)
    created: list[tuple[int, bytes]] = []  # dest dirs this item made for its parents: (parent fd, name)
    opened: list[int] = []
    try:
        parent = root_fd
        for i, name in enumerate(parts):
            rel = b"/".join(parts[: i + 1])
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                raise _Missing(f"{_show(rel)} does not exist") from None
            except OSError as exc:
                raise _source_error(exc, rel, "listed") from None
            last = i == len(parts) - 1
            if not last and stat.S_ISREG(st.st_mode):
                raise _Missing(f"{_show(rel)} is a regular file, not a directory")
            # A symlinked parent directory is refused like a symlinked answer: following
            # out -> / would make out/etc/shadow "the submission".
            copier.vet(st, rel)
            if last:
                copier.count_entry(rel)
                dst_parent = _dest_parents(dest_fd, parts[:-1], created, opened)
                copier.copy_entry(parent, name, st, rel, len(parts), dst_parent)
            else:
                fd, _ = copier.open(parent, name, st, rel)
                opened.append(fd)
                parent = fd
    except _Missing as missing:
        _undo(dest_fd, parts, created)
        return CustodyItem(path=declared, status="missing", reason=str(missing))
    except _Refusal as refusal:
        _undo(dest_fd, parts, created)
        copier.entries, copier.bytes, copier.files, copier.dirs = before
        return CustodyItem(path=declared, status="refused", reason=refusal.reason, misbehaviour=refusal.kind)
    except BaseException:
        # The harness's own failure (disk full, out of descriptors): leave dest as clean as we can, then raise.
        try:
            _undo(dest_fd, parts, created)
        except OSError:
            pass
        raise
    finally:
        for fd in opened:
            os.close(fd)
    return CustodyItem(path=declared, status="copied", files=copier.files - before[2], bytes=copier.bytes - before[1])


def _dest_parents(dest_fd: int, parts: tuple[bytes, ...], created: list[tuple[int, bytes]], opened: list[int]) -> int:
    parent = dest_fd
    for name in parts:
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
            created.append((parent, name))
        except FileExistsError:
            pass
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        opened.append(fd)
        os.fchmod(fd, 0o700)
        parent = fd
    return parent


def _undo(dest_fd: int, parts: tuple[bytes, ...], created: list[tuple[int, bytes]]) -> None:
    """Remove everything a refused item put in dest: its copy, then the parent dirs it created."""
    parent = dest_fd
    fds = []
    try:
        for name in parts[:-1]:
            try:
                parent = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            except FileNotFoundError:
                return
            fds.append(parent)
        _remove_entry(parent, parts[-1])
    finally:
        for fd in fds:
            os.close(fd)
    for up, name in reversed(created):
        try:
            os.rmdir(name, dir_fd=up)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                raise


def save_artifact(
    root: str | Path,
    dest: str | Path,
    *,
    student_uid: int | None,
    limits: CustodyLimits = CustodyLimits(),
) -> ArtifactReport:
    """Copy the student's whole tree `root` into the fresh directory `dest`, for people to inspect.

    The same safe copy as take_custody, but forgiving: symlinks, special files, foreign hard links,
    oversized files and entries swapped mid-copy are skipped and recorded (never followed or
    opened); entries past max_entries and below max_depth are left out, and the report says so.
    Never raises on anything the student did."""
    root_fd, root_st = _open_root(root)
    try:
        dest_fd = _make_dest(dest, root)
        try:
            copier = _Copier(limits=limits, owner_uid=_owner(student_uid, root_st), lenient=True)
            # The root itself is trusted; its contents are copied into dest as they are listed.
            frame = _Frame(os.dup(root_fd), os.dup(dest_fd), [], b"", 0)
            try:
                try:
                    frame.names = copier.list(frame.src, b".", 0)
                except _Refusal as refusal:
                    copier.skip(b".", refusal)
                for child in frame.names:
                    try:
                        st = copier.lstat(frame.src, child, child)
                        copier.vet(st, child)
                        copier.copy_entry(frame.src, child, st, child, 1, frame.dst)
                    except _Refusal as refusal:
                        copier.skip(child, refusal)
            finally:
                frame.close()
        finally:
            os.close(dest_fd)
    finally:
        os.close(root_fd)
    return ArtifactReport(dest=os.path.abspath(dest), files=copier.files, dirs=copier.dirs, bytes=copier.bytes, skipped=copier.skipped)


# -- the custody point of a step ------------------------------------------------------------------


class MisbehaviourEvent(_Model):
    """One observed attempt, recorded whether or not it worked."""

    kind: str = Field(description="From the vocabulary: unreapable_processes, or a Misbehaviour kind.")
    detail: str = Field(description="What was seen, for a human.")


class CustodyPoint(_Model):
    """What happened at the end of a scored step, before any judge ran."""

    kill: KillReport = Field(description="The proof (or not) that no student process was left.")
    report: CustodyReport | None = Field(description="The copies; None when the sandbox could not be proven empty and nothing was copied.")
    misbehaviour: list[MisbehaviourEvent] = Field(default_factory=list)

    @property
    def gradable(self) -> bool:
        """True only when every process is proven gone and every declared path was copied or is simply missing."""
        return self.report is not None and self.report.ok


def custody_point(
    box: StudentSandbox, paths: Sequence[str], dest: str | Path, *, limits: CustodyLimits = CustodyLimits(), kill_deadline_s: float = 5.0
) -> CustodyPoint:
    """Kill every student process and prove it, then copy the declared paths out of the workdir.

    Order matters: a student process still running could rewrite or relink the answer after the
    copy's checks; so nothing is copied unless `kill_all` proves the sandbox empty. The workdir
    itself survives (multi-step tasks go on from it; the next step gets a fresh shell)."""
    kill = box.kill_all(deadline_s=kill_deadline_s)
    if not kill.empty:
        return CustodyPoint(kill=kill, report=None, misbehaviour=[MisbehaviourEvent(kind="unreapable_processes", detail=kill.detail)])
    report = take_custody(box.workdir, paths, dest, student_uid=box.uid, limits=limits,
                          workdir_at=getattr(getattr(box, "spec", None), "workdir", None))
    events = [
        MisbehaviourEvent(kind=item.misbehaviour, detail=item.reason or item.path)
        for item in report.items
        if item.misbehaviour is not None
    ]
    return CustodyPoint(kill=kill, report=report, misbehaviour=events)

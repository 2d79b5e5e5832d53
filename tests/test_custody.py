"""Custody against a hostile student: each test builds the attack with real files on the real kernel
(symlinks, FIFOs, sockets, hard links, sparse files, deep trees, undecodable names, a racing process)
and checks custody refuses it, never follows it, never hangs on it, and leaves dest clean."""

from __future__ import annotations

import collections
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from proctor import custody
from proctor.custody import (
    ArtifactReport,
    CustodyError,
    CustodyLimits,
    CustodyReport,
    save_artifact,
    take_custody,
)

if not sys.platform.startswith("linux") or os.geteuid() != 0:
    _why = "custody tests need Linux and root (to own files as a student uid)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(_why + "; in CI a skip would hide a missing defence", pytrace=False)
    pytest.skip(_why, allow_module_level=True)

STUDENT = 64000
SECRET = b"TOP-SECRET-7f3a9c-do-not-grade"
MiB = 1024 * 1024


# --- helpers -------------------------------------------------------------------------------------------


def bounded(fn: Callable, *args, seconds: float = 10.0, unblock: Callable[[], None] | None = None, **kwargs):
    """Run fn in a thread; fail (instead of hanging the suite) if it has not returned in `seconds`."""
    result: list = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn(*args, **kwargs))
        except BaseException as exc:  # re-raised in the test thread
            error.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if unblock is not None:
            unblock()
        thread.join(5)
        pytest.fail(f"{getattr(fn, '__name__', fn)} did not return within {seconds}s")
    if error:
        raise error[0]
    return result[0]


def custody_of(root: Path, paths: list[str], dest: Path, **limits) -> CustodyReport:
    return bounded(take_custody, root, paths, dest, student_uid=STUDENT, limits=CustodyLimits(**limits))


def put(root: Path, rel: str, data: bytes = b"", *, uid: int = STUDENT, mode: int = 0o644) -> Path:
    """Write a student file (parents made and owned by the student too)."""
    path = root / rel
    for parent in reversed(path.relative_to(root).parents):
        if str(parent) != "." and not (root / parent).exists():
            (root / parent).mkdir()
            os.chown(root / parent, uid, uid)
    path.write_bytes(data)
    os.chmod(path, mode)
    os.chown(path, uid, uid)
    return path


def tree_of(top: Path | bytes) -> dict[bytes, bytes | None]:
    """lstat walk of a custody copy: relative path -> content (file) or None (dir). Fails on any
    other kind of entry and on modes or owners other than 0600/0700 root (0700: an executable file)."""
    base = os.fsencode(top)
    out: dict[bytes, bytes | None] = {}
    stack = [b""]
    while stack:
        rel = stack.pop()
        for name in os.listdir(base + b"/" + rel if rel else base):
            crel = rel + b"/" + name if rel else name
            full = base + b"/" + crel
            st_ = os.lstat(full)
            assert st_.st_uid == 0, f"{crel!r} in the copy is owned by uid {st_.st_uid}"
            if stat.S_ISDIR(st_.st_mode):
                assert stat.S_IMODE(st_.st_mode) == 0o700, f"{crel!r} has mode {st_.st_mode:o}"
                out[crel] = None
                stack.append(crel)
            elif stat.S_ISREG(st_.st_mode):
                assert stat.S_IMODE(st_.st_mode) in (0o600, 0o700), f"{crel!r} has mode {st_.st_mode:o}"
                with open(full, "rb") as f:
                    out[crel] = f.read()
            else:
                raise AssertionError(f"custody copy holds a non-regular entry {crel!r}")
    return out


def leaked(dest: Path) -> bool:
    if not dest.exists():
        return False
    return any(SECRET in v for v in tree_of(dest).values() if v)


def assert_refused(report: CustodyReport, kind: str, dest: Path, path: str = "answer.txt") -> str:
    item = next(i for i in report.items if i.path == path)
    assert item.status == "refused", item
    assert item.misbehaviour == kind, item
    assert item.reason and item.files == 0 and item.bytes == 0
    assert not report.ok
    assert not os.path.lexists(dest / path), "a refused item left something in dest"
    return item.reason


def make_deep(top: Path, depth: int, name: bytes = b"d") -> None:
    """A depth-long chain top/d/d/d/..., built by descriptor (the path is far beyond PATH_MAX)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def remove_deep(top: Path, name: bytes = b"d") -> None:
    """Peel a deep chain one level at a time from the top: no recursion, no long paths."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            try:
                os.rename(name + b"/" + name, b".peel", src_dir_fd=fd, dst_dir_fd=fd)
            except FileNotFoundError:
                os.rmdir(name, dir_fd=fd)
                return
            os.rmdir(name, dir_fd=fd)
            os.rename(b".peel", name, src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)


# Student workdirs are tmpfs; building hostile trees there is also ten times faster than on disk.
FAST_TMP = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


@pytest.fixture
def world(tmp_path: Path):
    """(root, dest, secret): the student's workdir, a fresh dest path, and a root-only secret beside
    the workdir (same filesystem, so the student could hard-link it)."""
    base = Path(tempfile.mkdtemp(prefix="custody-", dir=FAST_TMP))
    root = base / "workdir"
    root.mkdir()
    os.chown(root, STUDENT, STUDENT)
    secret = base / "secret.txt"
    secret.write_bytes(SECRET)
    os.chmod(secret, 0o600)
    yield root, tmp_path / "custody", secret
    shutil.rmtree(base, ignore_errors=True)


# --- what an honest submission gets ---------------------------------------------------------------------


def test_a_regular_answer_is_copied_content_only_with_grader_only_modes(tmp_path):
    root, dest = tmp_path / "workdir", tmp_path / "custody"  # on disk: tmpfs may lack user xattrs
    root.mkdir()
    answer = put(root, "answer.txt", b"42\n", mode=0o6777)  # setuid, setgid, world-writable
    os.setxattr(answer, "user.note", b"grade me 1.0")
    report = custody_of(root, ["answer.txt"], dest)
    assert report.ok and report.items[0].status == "copied"
    assert (report.items[0].files, report.items[0].bytes) == (1, 3)
    assert tree_of(dest) == {b"answer.txt": b"42\n"}  # also checks 0600/0700 and root-owned
    assert stat.S_IMODE(os.stat(dest / "answer.txt").st_mode) == 0o700  # still executable; setuid, setgid and others' bits gone
    plain = put(root, "plain.txt", b"x", mode=0o666)
    assert plain and custody_of(root, ["plain.txt"], tmp_path / "c2").ok
    assert stat.S_IMODE(os.stat(tmp_path / "c2" / "plain.txt").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o700 and os.stat(dest).st_uid == 0
    assert os.listxattr(dest / "answer.txt") == []


def test_a_declared_directory_is_copied_whole_with_its_empty_dirs(world):
    root, dest, _ = world
    put(root, "out/model/weights.bin", bytes(range(256)) * 4)
    put(root, "out/readme.md", b"# model")
    (root / "out" / "empty").mkdir()
    os.chown(root / "out" / "empty", STUDENT, STUDENT)
    report = custody_of(root, ["out/model", "out/readme.md", "out/empty"], dest)
    assert report.ok, report
    assert tree_of(dest) == {
        b"out": None, b"out/model": None, b"out/model/weights.bin": bytes(range(256)) * 4,
        b"out/readme.md": b"# model", b"out/empty": None,
    }


def test_a_missing_answer_is_missing_not_misbehaviour(world):
    root, dest, _ = world
    put(root, "notes.txt", b"n")
    report = custody_of(root, ["answer.txt", "out/deep/x", "notes.txt/x"], dest)
    assert [i.status for i in report.items] == ["missing", "missing", "missing"]
    assert all(i.misbehaviour is None and i.reason for i in report.items)
    assert report.ok
    assert os.listdir(dest) == []


def test_the_students_own_hard_links_are_copied_as_independent_files(world):
    root, dest, _ = world
    put(root, "answer.txt", b"mine")
    os.link(root / "answer.txt", root / "backup.txt")
    report = custody_of(root, ["answer.txt", "backup.txt"], dest)
    assert report.ok, report
    assert os.stat(dest / "answer.txt").st_nlink == 1
    assert tree_of(dest) == {b"answer.txt": b"mine", b"backup.txt": b"mine"}


def test_undecodable_and_control_character_names_are_copied_byte_exact_and_reported_escaped(world):
    root, dest, secret = world
    base = os.fsencode(root)
    os.mkdir(base + b"/out")
    os.mkdir(base + b"/out/\xff\xfe")
    with open(base + b"/out/\xff\xfe/\x80name\xc3", "wb") as f:
        f.write(b"\x00\xffdata")
    report = custody_of(root, ["out"], dest)
    assert report.ok, report
    assert tree_of(dest) == {b"out": None, b"out/\xff\xfe": None, b"out/\xff\xfe/\x80name\xc3": b"\x00\xffdata"}

    # A name built to forge a log line is escaped in the reason, and the report still serialises.
    os.symlink(secret, base + b"/out/\xff\nstatus: copied \x1b[32m")
    report = custody_of(root, ["out"], dest.parent / "custody2")
    reason = assert_refused(report, "submission_symlink", dest.parent / "custody2", path="out")
    assert "\n" not in reason and "\x1b" not in reason and "\\xff" in reason
    assert '"ok":false' in report.model_dump_json()


# --- symlinks ------------------------------------------------------------------------------------------


def test_a_symlink_answer_pointing_at_a_secret_outside_the_workdir_is_refused(world):
    root, dest, secret = world
    os.symlink(secret, root / "answer.txt")
    report = custody_of(root, ["answer.txt"], dest)
    assert assert_refused(report, "submission_symlink", dest) == "answer.txt is a symlink"
    assert not leaked(dest)


def test_a_symlink_to_a_file_the_student_can_read_but_does_not_own_is_refused(tmp_path, world):
    root, dest, _ = world
    other = tmp_path / "other_rollout_answer.txt"
    other.write_bytes(SECRET)
    os.chmod(other, 0o644)  # readable by the student, but not its work
    os.symlink(other, root / "answer.txt")
    assert_refused(custody_of(root, ["answer.txt"], dest), "submission_symlink", dest)
    assert not leaked(dest)


@pytest.mark.parametrize("target", ["/dev/zero", "/proc/self/environ", "/etc/shadow"])
def test_a_symlink_to_a_system_file_is_refused_without_reading_it(world, target):
    root, dest, _ = world
    os.symlink(target, root / "answer.txt")
    assert_refused(custody_of(root, ["answer.txt"], dest, max_file_bytes=1024), "submission_symlink", dest)


def test_a_symlinked_parent_directory_is_refused(tmp_path, world):
    root, dest, _ = world
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "answer.txt").write_bytes(SECRET)
    os.symlink(outside, root / "out")
    report = custody_of(root, ["out/answer.txt"], dest)
    assert assert_refused(report, "submission_symlink", dest, path="out/answer.txt") == "out is a symlink"
    assert os.listdir(dest) == []


def test_a_symlink_deep_inside_a_declared_directory_refuses_it_entirely_and_leaves_dest_clean(world):
    root, dest, secret = world
    put(root, "out/good.txt", b"fine")
    put(root, "out/a/b/c/model.bin", b"weights")
    put(root, "out/z/later.txt", b"after the link in walk order")
    os.symlink(secret, root / "out/a/b/c/leak")
    report = custody_of(root, ["out"], dest)
    reason = assert_refused(report, "submission_symlink", dest, path="out")
    assert reason == "out/a/b/c/leak is a symlink"
    assert os.listdir(dest) == []


def test_a_refused_item_gives_back_its_share_and_does_not_stop_the_others(world):
    root, dest, secret = world
    put(root, "bad/a.txt", b"x" * 600)
    os.symlink(secret, root / "bad/zz")
    put(root, "answer.txt", b"y" * 600)
    report = custody_of(root, ["bad", "answer.txt"], dest, max_total_bytes=1000)
    assert [i.status for i in report.items] == ["refused", "copied"]
    assert tree_of(dest) == {b"answer.txt": b"y" * 600}


# --- special files -------------------------------------------------------------------------------------


def test_a_fifo_answer_is_refused_without_hanging(world):
    root, dest, _ = world
    os.mkfifo(root / "answer.txt")

    def unblock() -> None:  # release a reader stuck in open() so the suite carries on
        os.close(os.open(root / "answer.txt", os.O_WRONLY | os.O_NONBLOCK))

    started = time.monotonic()
    report = bounded(take_custody, root, ["answer.txt"], dest, student_uid=STUDENT, seconds=2, unblock=unblock)
    assert time.monotonic() - started < 2
    assert assert_refused(report, "submission_special_file", dest) == "answer.txt is a FIFO"


def test_a_unix_socket_answer_is_refused(world, monkeypatch):
    root, dest, _ = world
    monkeypatch.chdir(root)  # AF_UNIX paths are capped at 108 bytes: bind relative to the workdir
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind("answer.txt")
        report = custody_of(root, ["answer.txt"], dest)
    assert assert_refused(report, "submission_special_file", dest) == "answer.txt is a socket"


def test_a_fifo_inside_a_declared_directory_refuses_it_without_hanging(world):
    root, dest, _ = world
    put(root, "out/a.txt", b"a")
    os.mkfifo(root / "out" / "b.pipe")
    assert_refused(custody_of(root, ["out"], dest), "submission_special_file", dest, path="out")


# --- hard links ----------------------------------------------------------------------------------------


def test_a_hard_link_to_a_root_owned_file_is_refused(world):
    root, dest, secret = world
    os.link(secret, root / "answer.txt")
    reason = assert_refused(custody_of(root, ["answer.txt"], dest), "submission_hardlink", dest)
    assert "uid 0" in reason
    assert not leaked(dest)


def test_without_a_student_uid_the_workdir_owner_stands_in_for_the_hard_link_check(world):
    root, dest, secret = world
    os.link(secret, root / "answer.txt")
    put(root, "mine.txt", b"mine")
    os.link(root / "mine.txt", root / "mine2.txt")
    report = bounded(take_custody, root, ["answer.txt", "mine2.txt"], dest, student_uid=None)
    assert_refused(report, "submission_hardlink", dest)
    assert report.items[1].status == "copied"


# --- caps ----------------------------------------------------------------------------------------------


def test_a_sparse_100_gb_file_is_refused_in_under_a_second_by_the_default_cap(world):
    root, dest, _ = world
    answer = put(root, "answer.txt")
    os.truncate(answer, 100 * 2**30)
    started = time.monotonic()
    report = custody_of(root, ["answer.txt"], dest)
    assert time.monotonic() - started < 1.0
    reason = assert_refused(report, "submission_too_large", dest)
    assert str(100 * 2**30) in reason and "max_file_bytes" in reason  # refused on st_size, before a byte was read


def test_a_dense_file_over_the_cap_is_refused_and_one_at_the_cap_is_copied(world):
    root, dest, _ = world
    put(root, "over.bin", b"x" * (2 * MiB))
    put(root, "exact.bin", b"y" * MiB)
    report = custody_of(root, ["over.bin", "exact.bin"], dest, max_file_bytes=MiB)
    assert_refused(report, "submission_too_large", dest, path="over.bin")
    assert report.items[1].status == "copied" and report.items[1].bytes == MiB


def test_sparse_files_count_at_full_size_against_the_total_cap(world):
    root, dest, _ = world
    for name in ("a.bin", "b.bin"):
        os.truncate(put(root, f"out/{name}"), 600)
    report = custody_of(root, ["out"], dest, max_total_bytes=1000)
    assert "max_total_bytes" in assert_refused(report, "submission_too_large", dest, path="out")


def test_the_entry_cap_spans_all_declared_paths(world):
    root, dest, _ = world
    put(root, "a.txt", b"a")
    put(root, "b.txt", b"b")
    report = custody_of(root, ["a.txt", "b.txt"], dest, max_entries=1)
    assert report.items[0].status == "copied"
    assert_refused(report, "submission_too_many_entries", dest, path="b.txt")


def test_a_hundred_thousand_tiny_files_are_refused_at_max_entries_before_any_is_copied(world, monkeypatch):
    root, dest, _ = world
    out = root / "out"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(100_000):
            os.close(os.open(f"f{i}", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    reads = []
    real = custody._copy_bounded
    monkeypatch.setattr(custody, "_copy_bounded", lambda *a: reads.append(1) or real(*a))
    started = time.monotonic()
    report = custody_of(root, ["out"], dest)  # default max_entries: 10,000
    assert time.monotonic() - started < 2.0
    assert "max_entries" in assert_refused(report, "submission_too_many_entries", dest, path="out")
    assert reads == [], "files were copied before the entry cap refused the tree"


def test_a_ten_thousand_deep_tree_is_refused_without_recursion_error(world):
    root, dest, _ = world
    (root / "out").mkdir()
    make_deep(root / "out", 10_000)
    try:
        started = time.monotonic()
        report = custody_of(root, ["out"], dest)
        assert time.monotonic() - started < 2.0
        assert "max_depth (64)" in assert_refused(report, "submission_too_deep", dest, path="out")
        assert os.listdir(dest) == []

        artifact = bounded(save_artifact, root, dest.parent / "artifact", student_uid=STUDENT)
        assert artifact.dirs == 64 and [s.misbehaviour for s in artifact.skipped] == ["submission_too_deep"]
    finally:
        remove_deep(root / "out")
        shutil.rmtree(dest.parent / "artifact", ignore_errors=True)  # only 64 deep: fine to recurse
    assert os.listdir(root / "out") == []


# --- authoring errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", "  ", "/etc/shadow", "../secret.txt", "a/../../b", "out/..", ".", "./", "a\0b"])
def test_a_declared_path_that_is_empty_absolute_or_escapes_is_an_authoring_error(world, bad):
    root, dest, _ = world
    with pytest.raises(ValueError) as exc:
        take_custody(root, [bad], dest, student_uid=STUDENT)
    assert isinstance(exc.value, CustodyError) and repr(bad) in str(exc.value) and "\n" not in str(exc.value)
    assert not dest.exists(), "an authoring error must fail before anything is created"


@pytest.mark.parametrize("paths", [["out", "out/model"], ["a", "./a"]])
def test_overlapping_declared_paths_are_an_authoring_error(world, paths):
    root, dest, _ = world
    with pytest.raises(CustodyError, match="overlap"):
        take_custody(root, paths, dest, student_uid=STUDENT)


def test_a_used_or_student_reachable_destination_is_refused(world):
    root, dest, _ = world
    dest.mkdir()
    (dest / "stale").write_text("x")
    with pytest.raises(CustodyError, match="not an empty directory"):
        take_custody(root, ["answer.txt"], dest, student_uid=STUDENT)
    with pytest.raises(CustodyError, match="inside the student's tree"):
        take_custody(root, ["answer.txt"], root / "custody", student_uid=STUDENT)


def test_an_existing_empty_destination_is_made_grader_only(world):
    root, dest, _ = world
    dest.mkdir(mode=0o777)
    os.chmod(dest, 0o777)
    os.chown(dest, STUDENT, STUDENT)
    custody_of(root, ["answer.txt"], dest)
    st_ = os.stat(dest)
    assert (stat.S_IMODE(st_.st_mode), st_.st_uid, st_.st_gid) == (0o700, 0, 0)


# --- each layer against a swap that lands between the check and the use ---------------------------------
# A real racer (below) rarely lands in the microseconds between lstat and open; these tests hand the
# copier a stale lstat on purpose, so that each layer is proven on its own.


def _stale(root: Path, name: str) -> tuple[custody._Copier, int, os.stat_result]:
    copier = custody._Copier(limits=CustodyLimits(max_file_bytes=MiB), owner_uid=STUDENT, lenient=False)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    return copier, fd, os.stat(name, dir_fd=fd, follow_symlinks=False)


def test_a_fifo_swapped_in_after_the_type_check_is_opened_without_blocking(world):
    root, _, _ = world
    put(root, "answer.txt", b"ok")
    copier, fd, stale = _stale(root, "answer.txt")
    os.unlink(root / "answer.txt")
    os.mkfifo(root / "answer.txt")

    def unblock() -> None:
        os.close(os.open(root / "answer.txt", os.O_WRONLY | os.O_NONBLOCK))

    try:
        with pytest.raises(custody._Refusal) as exc:
            bounded(copier.open, fd, b"answer.txt", stale, b"answer.txt", seconds=2, unblock=unblock)
    finally:
        os.close(fd)
    assert exc.value.kind == "submission_changed_during_copy" and "FIFO" in exc.value.reason


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_a_symlink_swapped_in_after_the_type_check_is_not_followed(tmp_path, world, kind):
    root, _, secret = world
    target = secret if kind == "file" else tmp_path
    if kind == "file":
        put(root, "answer.txt", b"ok")
    else:
        (root / "answer.txt").mkdir()
    copier, fd, stale = _stale(root, "answer.txt")
    if kind == "file":
        os.unlink(root / "answer.txt")
    else:
        os.rmdir(root / "answer.txt")
    os.symlink(target, root / "answer.txt")
    try:
        with pytest.raises(custody._Refusal) as exc:
            bounded(copier.open, fd, b"answer.txt", stale, b"answer.txt")
    finally:
        os.close(fd)
    assert exc.value.kind == "submission_changed_during_copy" and "symlink" in exc.value.reason


def test_a_file_renamed_over_the_checked_one_is_caught_by_its_inode(world):
    root, _, _ = world
    put(root, "answer.txt", b"checked")
    copier, fd, stale = _stale(root, "answer.txt")
    put(root, "other.txt", b"swapped in")
    os.rename(root / "other.txt", root / "answer.txt")
    try:
        with pytest.raises(custody._Refusal) as exc:
            copier.open(fd, b"answer.txt", stale, b"answer.txt")
    finally:
        os.close(fd)
    assert exc.value.kind == "submission_changed_during_copy" and "replaced" in exc.value.reason


def test_a_file_that_grew_past_the_cap_after_its_check_is_refused_and_removed_from_dest(world, tmp_path):
    root, _, _ = world
    put(root, "answer.txt", b"small")
    copier, fd, stale = _stale(root, "answer.txt")
    with open(root / "answer.txt", "ab") as f:
        f.write(b"z" * (2 * MiB))
    out = tmp_path / "out"
    out.mkdir()
    out_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(custody._Refusal) as exc:
            copier.copy_entry(fd, b"answer.txt", stale, b"answer.txt", 1, out_fd)
    finally:
        os.close(fd)
        os.close(out_fd)
    assert exc.value.kind == "submission_too_large"
    assert os.listdir(out) == []


@pytest.mark.parametrize("change", ["append", "truncate", "rewrite"])
def test_a_file_written_to_while_it_is_being_copied_is_refused(world, monkeypatch, change):
    root, dest, _ = world
    answer = put(root, "answer.txt", b"first version")
    real = custody._copy_bounded

    def racer_writes_mid_copy(src: int, dst: int, cap: int) -> int:
        # What a surviving student process would do between custody's fstat and its read.
        if change == "append":
            with open(answer, "ab") as f:
                f.write(b" and more")
        elif change == "truncate":
            os.truncate(answer, 3)
        else:  # same size, new bytes, new mtime
            time.sleep(0.01)
            with open(answer, "r+b") as f:
                f.write(b"FIRST")
        return real(src, dst, cap)

    monkeypatch.setattr(custody, "_copy_bounded", racer_writes_mid_copy)
    assert_refused(custody_of(root, ["answer.txt"], dest), "submission_changed_during_copy", dest)


def test_reading_stops_one_byte_past_the_cap_even_if_the_source_never_ends(tmp_path):
    read_end, write_end = os.pipe()
    done = threading.Event()

    def endless() -> None:
        try:
            while not done.is_set():
                os.write(write_end, b"z" * 65536)
        except OSError:  # EPIPE once the reader is closed
            pass

    writer = threading.Thread(target=endless, daemon=True)
    writer.start()
    sink = os.open(tmp_path / "sink", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        copied = bounded(custody._copy_bounded, read_end, sink, 3 * MiB, seconds=5)
    finally:
        done.set()
        os.close(read_end)
        os.close(sink)
        writer.join(5)
        os.close(write_end)
    assert copied == 3 * MiB + 1
    assert os.path.getsize(tmp_path / "sink") == 3 * MiB + 1


# --- a racing student process ---------------------------------------------------------------------------

# The student's racer: atomically exchange two names as fast as it can (renameat2 RENAME_EXCHANGE),
# so the answer flips between an honest entry and a trap while custody walks it.
RACER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
a, b = sys.argv[2].encode(), sys.argv[3].encode()
print("racing", flush=True)
i = 0
while True:
    if libc.renameat2(fd, a, fd, b, 2) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")
    i += 1
    if i % 3 == 0:
        time.sleep(0.00002)  # let custody sometimes see a settled state, so both outcomes occur
"""


@pytest.mark.parametrize("trap", ["symlink_answer", "symlink_parent", "fifo_answer"])
def test_a_racer_swapping_the_answer_for_a_trap_never_leaks_and_never_hangs(tmp_path, world, trap):
    root, _, secret = world
    honest = b"honest answer\n"
    if trap == "symlink_parent":
        put(root, "out/answer.txt", honest)
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "answer.txt").write_bytes(SECRET)
        os.symlink(outside, root / "trap")
        declared, names = "out/answer.txt", ("out", "trap")
    else:
        put(root, "answer.txt", honest)
        if trap == "symlink_answer":
            os.symlink(secret, root / "trap")
        else:
            os.mkfifo(root / "trap")
        declared, names = "answer.txt", ("answer.txt", "trap")
    racer = subprocess.Popen([sys.executable, "-c", RACER, str(root), *names], stdout=subprocess.PIPE)
    outcomes: collections.Counter[str] = collections.Counter()
    try:
        assert racer.stdout.readline() == b"racing\n"

        def many() -> None:
            for i in range(200):
                dest = tmp_path / f"race{i}"
                item = take_custody(root, [declared], dest, student_uid=STUDENT).items[0]
                outcomes[item.misbehaviour or item.status] += 1
                copy = tree_of(dest)
                assert not any(SECRET in v for v in copy.values() if v), f"secret leaked on run {i}"
                if item.status == "copied":
                    assert copy[os.fsencode(declared)] == honest
                else:
                    assert not os.path.lexists(dest / declared)

        bounded(many, seconds=30)
    finally:
        racer.kill()
        racer.wait()
    assert racer.returncode == -9, "the racer died on its own: the race was not run"
    kinds = {"symlink_answer": "submission_symlink", "symlink_parent": "submission_symlink",
             "fifo_answer": "submission_special_file"}
    assert set(outcomes) <= {"copied", "missing", kinds[trap], "submission_changed_during_copy"}, outcomes
    assert sum(n for k, n in outcomes.items() if k != "copied") > 0, f"the trap was never seen: {outcomes}"


# --- save_artifact -------------------------------------------------------------------------------------


def test_save_artifact_copies_the_safe_part_and_records_links_and_special_files_without_following(world):
    root, dest, secret = world
    put(root, "log.txt", b"log")
    put(root, "sub/x", b"x")
    os.symlink(secret, root / "sub" / "leak")
    os.symlink("/etc", root / "etc")
    os.mkfifo(root / "pipe")
    os.link(secret, root / "hard")
    os.truncate(put(root, "huge.bin"), 100 * 2**30)
    report = bounded(save_artifact, root, dest, student_uid=STUDENT)
    assert isinstance(report, ArtifactReport) and not report.complete
    assert {s.path: s.misbehaviour for s in report.skipped} == {
        "sub/leak": "submission_symlink", "etc": "submission_symlink", "pipe": "submission_special_file",
        "hard": "submission_hardlink", "huge.bin": "submission_too_large",
    }
    assert tree_of(dest) == {b"log.txt": b"log", b"sub": None, b"sub/x": b"x"}
    assert (report.files, report.dirs, report.bytes) == (2, 1, 4)


def test_save_artifact_stops_at_max_entries_and_says_so(world):
    root, dest, _ = world
    for i in range(30):
        put(root, f"f{i:02}", b"f")
    report = bounded(save_artifact, root, dest, student_uid=STUDENT, limits=CustodyLimits(max_entries=10))
    assert report.files == 10 and len(os.listdir(dest)) == 10
    assert [s.misbehaviour for s in report.skipped] == ["submission_too_many_entries"]


# --- property: random hostile trees -------------------------------------------------------------------

NAMES = st.one_of(
    st.sampled_from([b"a", b"b", b"\xff\xfe", b"n\x80", b"d.txt", b"-rf", b" ", b"line\nbreak", b"\xe2\x80\xae", b"x" * 255]),
    st.binary(min_size=1, max_size=6).map(lambda n: n.replace(b"/", b"|").replace(b"\0", b"0")).filter(lambda n: n not in (b".", b"..")),
)
LEAF = st.one_of(
    st.tuples(st.just("file"), st.binary(max_size=80)),
    st.tuples(st.just("file"), st.binary(max_size=8)),
    st.tuples(st.sampled_from(["link_in", "link_out", "link_dangling", "link_parent", "fifo", "hard_own", "hard_foreign"]), st.just(b"")),
)
NODE = st.recursive(LEAF, lambda kids: st.tuples(st.just("dir"), st.dictionaries(NAMES, kids, max_size=4)), max_leaves=12)
TREE = st.dictionaries(NAMES, NODE, max_size=5)
LIMITS = st.one_of(
    st.just(CustodyLimits()),
    st.builds(
        CustodyLimits,
        max_file_bytes=st.sampled_from([0, 8, 64, 1000]),
        max_total_bytes=st.sampled_from([0, 40, 200, 10_000]),
        max_entries=st.sampled_from([1, 3, 8, 100]),
        max_depth=st.sampled_from([1, 2, 3, 64]),
    ),
)
HYPOTHESIS = settings(max_examples=50, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def _build(base: bytes, tree: dict, secret: bytes, own_file: bytes) -> None:
    stack = [(b"", tree)]
    while stack:
        rel, children = stack.pop()
        for name, (kind, payload) in children.items():
            full = base + b"/" + (rel + b"/" + name if rel else name)
            if kind == "dir":
                os.mkdir(full)
                stack.append((rel + b"/" + name if rel else name, payload))
            elif kind == "file":
                with open(full, "wb") as f:
                    f.write(payload)
            elif kind == "link_in":
                os.symlink(own_file, full)
            elif kind == "link_out":
                os.symlink(secret, full)
            elif kind == "link_dangling":
                os.symlink(b"/nonexistent/\xff", full)
            elif kind == "link_parent":
                os.symlink(b"..", full)
            elif kind == "fifo":
                os.mkfifo(full)
            elif kind == "hard_own":
                os.link(own_file, full)
            elif kind == "hard_foreign":
                os.link(secret, full)  # secret stays root-owned: linking must not chown it
                continue
            if kind != "hard_own":
                os.chown(full, STUDENT, STUDENT, follow_symlinks=False)


def _oracle(top: bytes, limits: CustodyLimits) -> tuple[dict[bytes, bytes | None], set[str], collections.Counter[str]]:
    """What custody of `top` (declared as 'sub', depth 1) must do, from an independent lstat walk:
    (the exact copy, the violations present, the kinds save_artifact must skip with default limits)."""
    copy: dict[bytes, bytes | None] = {b"sub": None}
    bad: set[str] = set()
    hostile: collections.Counter[str] = collections.Counter()
    entries, total = 1, 0
    stack = [(b"sub", 1)]
    while stack:
        rel, depth = stack.pop()
        for name in os.listdir(top + rel[3:]):
            crel = rel + b"/" + name
            entries += 1
            if depth + 1 > limits.max_depth:
                bad.add("submission_too_deep")
            st_ = os.lstat(top + crel[3:])
            kind = None
            if stat.S_ISLNK(st_.st_mode):
                kind = "submission_symlink"
            elif stat.S_ISFIFO(st_.st_mode):
                kind = "submission_special_file"
            elif stat.S_ISREG(st_.st_mode) and st_.st_nlink > 1 and st_.st_uid != STUDENT:
                kind = "submission_hardlink"
            elif stat.S_ISDIR(st_.st_mode):
                copy[crel] = None
                stack.append((crel, depth + 1))
            else:
                with open(top + crel[3:], "rb") as f:
                    copy[crel] = f.read()
                total += st_.st_size
                if st_.st_size > limits.max_file_bytes:
                    bad.add("submission_too_large")
            if kind:
                bad.add(kind)
                hostile[kind] += 1
    if total > limits.max_total_bytes:
        bad.add("submission_too_large")
    if entries > limits.max_entries:
        bad.add("submission_too_many_entries")
    return copy, bad, hostile


def _hostile_world(tree: dict):
    tmp = tempfile.mkdtemp(prefix="custody-prop-", dir=FAST_TMP)
    base = os.fsencode(tmp)
    secret = base + b"/secret"
    with open(secret, "wb") as f:
        f.write(SECRET)
    os.chmod(secret, 0o600)
    root = base + b"/root"
    os.mkdir(root)
    os.chown(root, STUDENT, STUDENT)
    own_file = root + b"/own"
    with open(own_file, "wb") as f:
        f.write(b"own-content")
    os.chown(own_file, STUDENT, STUDENT)
    os.mkdir(root + b"/sub")
    os.chown(root + b"/sub", STUDENT, STUDENT)
    _build(root + b"/sub", tree, secret, own_file)
    return tmp, os.fsdecode(root)


@HYPOTHESIS
@given(tree=TREE, limits=LIMITS)
def test_custody_of_a_random_hostile_tree_copies_it_exactly_or_refuses_with_a_reason(tree, limits):
    tmp, root = _hostile_world(tree)
    try:
        expected, bad, _ = _oracle(os.fsencode(root) + b"/sub", limits)
        dest = Path(tmp) / "dest"
        report = bounded(take_custody, root, ["sub"], dest, student_uid=STUDENT, limits=limits)
        item = report.items[0]
        event(f"{item.status} {item.misbehaviour or ''}")
        copy = tree_of(dest)
        assert not any(SECRET in v for v in copy.values() if v), "a link was followed"
        if bad:
            assert item.status == "refused", (item, bad)
            assert item.misbehaviour in bad, (item, bad)
            assert item.reason and item.reason.startswith("sub")
            assert copy == {}
        else:
            assert item.status == "copied", item
            assert copy == expected
            assert item.files == sum(v is not None for v in expected.values())
    finally:
        shutil.rmtree(tmp)


@HYPOTHESIS
@given(tree=TREE)
def test_save_artifact_of_a_random_hostile_tree_keeps_exactly_its_regular_part(tree):
    tmp, root = _hostile_world(tree)
    try:
        expected, _, hostile = _oracle(os.fsencode(root) + b"/sub", CustodyLimits())
        dest = Path(tmp) / "dest"
        report = bounded(save_artifact, root, dest, student_uid=STUDENT)
        event("complete" if report.complete else "skipped some")
        copy = tree_of(dest)
        assert not any(SECRET in v for v in copy.values() if v), "a link was followed"
        assert copy == {b"own": b"own-content", **expected}
        assert collections.Counter(s.misbehaviour for s in report.skipped) == hostile
        assert report.complete == (not hostile)
    finally:
        shutil.rmtree(tmp)

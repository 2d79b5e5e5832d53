"""Judges for an answer written to a file: an exact integer or text (`ExactAnswer`), or a number
within a tolerance (`NumericAnswer`).

The answer file is in the custody copy, so it is a regular file the harness owns, but its bytes
are the student's. Each check below stops something a student will eventually try:

- The path is validated when the task is built (relative, no `..`), and opened component by
  component with `O_NOFOLLOW` relative to the submission directory, so a judge never reads
  outside the custody copy even if a symlink got there (custody does not copy them; this is the
  second layer).
- The entry is `lstat`ed first and only a regular file is opened (`O_NONBLOCK` too), so a FIFO
  cannot hang the judge; its size is checked before a byte is read and the read stops one byte
  past the cap, so a huge or sparse file costs nothing.
- The bytes must be UTF-8 and, after stripping ASCII whitespace, match a strict grammar. Lenient
  parsers are how answers get guessed: `int()` takes `4_2` and `" ４２"` (full-width digits),
  `float()` takes `nan`, `inf`, `1_000` and `1e400` (which becomes inf and is "close" to
  nothing, or compares oddly). So:

  - integers: `-?[0-9]+` (ASCII digits only; a leading `-` is allowed, a leading `+` is not,
    because a plain integer is written without one; leading zeros are allowed);
  - numbers: `[+-]?(digits[.digits?] | .digits)([eE][+-]?digits)?`, finite after parsing.

- The expected value is never put in the explanation (which may be shown to the student or its
  trainers' logs); it goes to `metadata["expected"]` for people reading results.
- A malformed answer key (in the hidden data) is the task author's bug, not the student's: the
  verdict is an `infra_error` naming the hidden file, so it is masked rather than learned from.

What these judges do not do: they do not look at the transcript (a student that printed the
right number but wrote another one scores 0), and they do not canonicalise Unicode text
(`ExactAnswer(kind="text")` compares exact code points, optionally case-folded)."""

from __future__ import annotations

import errno
import math
import os
import re
import stat
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .base import Judge, JudgeContext, Verdict

__all__ = ["ExactAnswer", "NumericAnswer", "Unreadable", "read_submission_file", "validate_relative_path"]

_WHITESPACE = " \t\r\n\f\v"
_INTEGER = re.compile(r"-?[0-9]+", re.ASCII)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_SHOWN_CHARS = 100
_KEY_BYTES = 1024 * 1024


class Unreadable(Exception):
    """A file a judge wanted could not be read within the rules; the message says why."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


def validate_relative_path(path: str) -> str:
    """`path` as a normalised relative POSIX path, or ValueError saying what is wrong with it."""
    if not path or "\x00" in path:
        raise ValueError("must be a non-empty relative path without NUL bytes, e.g. 'answer.txt'")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise ValueError(f"{path!r} is absolute; give it relative to the submission (e.g. 'answer.txt', not '/workdir/answer.txt')")
    parts = [p for p in pure.parts if p != "."]
    if ".." in parts:
        raise ValueError(f"{path!r} contains '..'; a judge reads only inside the submission")
    if not parts:
        raise ValueError(f"{path!r} names the submission directory itself, not a file")
    return "/".join(parts)


def read_submission_file(root: Path, relpath: str, max_bytes: int) -> bytes:
    """The bytes of the regular file `root/relpath`, at most `max_bytes` of them.

    No symlink is followed at any component and nothing but a regular file is opened; raises
    `Unreadable` (with `missing=True` when there is simply no such file) for anything else."""
    parts = validate_relative_path(relpath).split("/")
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise Unreadable(f"the directory {root} cannot be opened ({exc.strerror})", missing=exc.errno == errno.ENOENT) from None
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                child = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            except OSError as exc:
                where = "/".join(parts[: i + 1])
                if exc.errno == errno.ENOENT:
                    raise Unreadable(f"{relpath} does not exist", missing=True) from None
                raise Unreadable(f"{where} is not a directory (symlinks are not followed): {exc.strerror}") from None
            os.close(fd)
            fd = child
        leaf = parts[-1]
        try:
            st = os.stat(leaf, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            raise Unreadable(f"{relpath} does not exist", missing=True) from None
        except OSError as exc:
            raise Unreadable(f"{relpath} cannot be examined ({exc.strerror})") from None
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable(f"{relpath} is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise Unreadable(f"{relpath} is {st.st_size} bytes, above the cap of {max_bytes} bytes")
        try:
            # O_NONBLOCK: a FIFO swapped in after the lstat must not block the open.
            file_fd = os.open(leaf, flags | os.O_NONBLOCK, dir_fd=fd)
        except OSError as exc:
            raise Unreadable(f"{relpath} cannot be opened ({exc.strerror})") from None
        try:
            now = os.fstat(file_fd)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
                raise Unreadable(f"{relpath} changed while being opened")
            chunks: list[bytes] = []
            got = 0
            while got <= max_bytes:
                chunk = os.read(file_fd, min(1024 * 1024, max_bytes + 1 - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        except OSError as exc:
            raise Unreadable(f"{relpath} cannot be read ({exc.strerror})") from None
        finally:
            os.close(file_fd)
        if got > max_bytes:
            raise Unreadable(f"{relpath} grew past the cap of {max_bytes} bytes while being read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "a special file"


def _shown(text: str) -> str:
    """A short, printable rendering of student text for explanations and metadata."""
    shown = repr(text)
    return shown if len(shown) <= _SHOWN_CHARS else shown[: _SHOWN_CHARS - 5] + "...'"


def parse_integer(text: str) -> int | None:
    text = text.strip(_WHITESPACE)
    if not _INTEGER.fullmatch(text):
        return None
    try:
        return int(text)
    except ValueError:  # above sys.get_int_max_str_digits()
        return None


def parse_number(text: str) -> float | None:
    """A finite float from the strict decimal grammar, or None."""
    text = text.strip(_WHITESPACE)
    if not _NUMBER.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


class _FileAnswer(Judge):
    """Shared part: where the answer is, where the key is, and reading both within the rules."""

    path: str = Field(description="The answer file, relative to the submission (i.e. to /workdir).")
    expected_file: str | None = Field(None, description="The answer key, relative to the task's hidden data directory.")
    max_bytes: int = Field(4096, gt=0, le=64 * 1024 * 1024, description="Largest answer file accepted, in bytes.")

    @field_validator("path", "expected_file")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        return None if value is None else validate_relative_path(value)

    def _exactly_one_expected(self, expected: object) -> None:
        if (expected is None) == (self.expected_file is None):
            raise ValueError(f"{type(self).__name__}: set exactly one of `expected` (the value) or `expected_file` (a path in the hidden data), not {'both' if expected is not None else 'neither'}")

    def _read_answer(self, ctx: JudgeContext) -> str | Verdict:
        try:
            raw = read_submission_file(ctx.submission, self.path, self.max_bytes)
        except Unreadable as exc:
            if exc.missing:
                return Verdict.zero(f"no answer at {self.path}", metadata={"path": self.path})
            return Verdict.zero(f"answer rejected: {exc}", metadata={"path": self.path})
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return Verdict.zero(f"{self.path} is not UTF-8 text (invalid byte at offset {exc.start})", metadata={"path": self.path})

    def missing_files(self, hidden: Path | None, env_dir: Path | None) -> list[str]:
        if self.expected_file is None:
            return []
        if hidden is None:
            return [f"expected_file {self.expected_file!r} (the task has no hidden data directory)"]
        if not (Path(hidden) / self.expected_file).is_file():
            return [f"expected_file {self.expected_file!r} (not a file in {hidden})"]
        return []

    def _read_key(self, ctx: JudgeContext) -> str | Verdict:
        assert self.expected_file is not None
        if ctx.hidden is None:
            return Verdict.zero(f"task error: expected_file {self.expected_file!r} is set but the task has no hidden data directory", infra_error=True)
        try:
            return read_submission_file(ctx.hidden, self.expected_file, _KEY_BYTES).decode("utf-8")
        except (Unreadable, UnicodeDecodeError) as exc:
            return Verdict.zero(f"task error: the answer key {self.expected_file} in the hidden data is unusable: {exc}", infra_error=True)


class ExactAnswer(_FileAnswer):
    """The answer file holds exactly the expected integer or text, give or take surrounding
    ASCII whitespace. For integers, `-?[0-9]+` only: no `+`, `_`, `42.0`, `0x2a` or spaces inside."""

    expected: str | None = Field(None, description="The expected answer, literally (for kind='integer', its digits).")
    kind: Literal["integer", "text"] = Field("text", description="'integer': compared as integers after a strict parse; 'text': compared as stripped text.")
    case_sensitive: bool = Field(True, description="For kind='text': False compares case-folded text.")

    @model_validator(mode="after")
    def _check(self) -> ExactAnswer:
        self._exactly_one_expected(self.expected)
        if self.kind == "integer" and self.expected is not None and parse_integer(self.expected) is None:
            raise ValueError(f"ExactAnswer: expected={self.expected!r} is not a plain integer (digits with an optional leading '-')")
        return self

    def grade(self, ctx: JudgeContext) -> Verdict:
        key = self.expected if self.expected is not None else self._read_key(ctx)
        if isinstance(key, Verdict):
            return key
        got = self._read_answer(ctx)
        if isinstance(got, Verdict):
            return got
        meta = {"path": self.path, "got": _shown(got.strip(_WHITESPACE))}
        if self.kind == "integer":
            want = parse_integer(key)
            if want is None:
                return Verdict.zero(f"task error: the answer key {self.expected_file} in the hidden data is not a plain integer", infra_error=True)
            meta["expected"] = _shown(str(want))
            value = parse_integer(got)
            if value is None:
                return Verdict.zero(f"{self.path} is not a plain integer (got {meta['got']}); write only digits with an optional leading '-', e.g. 42", metadata=meta)
            if value != want:
                return Verdict.zero(f"{self.path}: {meta['got']} is not the expected integer", metadata=meta)
            return Verdict(score=1.0, explanation=f"{self.path}: correct integer", metadata=meta)
        want_text, got_text = key.strip(_WHITESPACE), got.strip(_WHITESPACE)
        meta["expected"] = _shown(want_text)
        if not self.case_sensitive:
            want_text, got_text = want_text.casefold(), got_text.casefold()
        if got_text != want_text:
            return Verdict.zero(f"{self.path}: {meta['got']} is not the expected answer", metadata=meta)
        return Verdict(score=1.0, explanation=f"{self.path}: correct answer", metadata=meta)


class NumericAnswer(_FileAnswer):
    """The answer file holds one decimal number close to the expected one:
    `math.isclose(got, expected, rel_tol=rel_tol, abs_tol=abs_tol)`."""

    expected: float | None = Field(None, allow_inf_nan=False, description="The expected value (finite).")
    rel_tol: float = Field(1e-9, ge=0.0, allow_inf_nan=False, description="Relative tolerance, as in math.isclose.")
    abs_tol: float = Field(0.0, ge=0.0, allow_inf_nan=False, description="Absolute tolerance, as in math.isclose.")

    @model_validator(mode="after")
    def _check(self) -> NumericAnswer:
        self._exactly_one_expected(self.expected)
        return self

    def grade(self, ctx: JudgeContext) -> Verdict:
        if self.expected is not None:
            want: float | None = self.expected
        else:
            key = self._read_key(ctx)
            if isinstance(key, Verdict):
                return key
            want = parse_number(key)
            if want is None:
                return Verdict.zero(f"task error: the answer key {self.expected_file} in the hidden data is not a finite decimal number", infra_error=True)
        got = self._read_answer(ctx)
        if isinstance(got, Verdict):
            return got
        meta = {"path": self.path, "got": _shown(got.strip(_WHITESPACE)), "expected": want, "rel_tol": self.rel_tol, "abs_tol": self.abs_tol}
        value = parse_number(got)
        if value is None:
            return Verdict.zero(f"{self.path} is not a finite decimal number (got {meta['got']}); write e.g. 3.25 or -1.5e-3 (no nan, inf, hex or '_')", metadata=meta)
        if not math.isclose(value, want, rel_tol=self.rel_tol, abs_tol=self.abs_tol):
            return Verdict.zero(f"{self.path}: {meta['got']} is not within tolerance of the expected value", metadata=meta)
        return Verdict(score=1.0, explanation=f"{self.path}: within tolerance", metadata=meta)

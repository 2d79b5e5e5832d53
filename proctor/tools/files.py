"""File tools: read_file, write_file, str_replace, list_dir. Each runs as a helper inside the
sandbox (proctor.tools.inside), so the student's uid, namespaces and permissions apply, and a
FIFO, device, socket or a symlink to one is refused without ever blocking.

Relative paths are taken from the workdir ($HOME) (not from the bash session's cwd, which the tools cannot
see). Content is bytes: what is not valid UTF-8 is shown with U+FFFD and a note saying so, and
str_replace edits bytes, so the rest of a non-UTF-8 file survives an edit untouched."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from .base import Arguments, Tool, ToolContext, ToolResult, no_nul, utf8_len
from .inside import run_inside

_PATH = Field(min_length=1, max_length=4096, description="File path; relative paths are from the workdir ($HOME).")


class _PathArgs(Arguments):
    path: str = _PATH

    @field_validator("path")
    @classmethod
    def _path_ok(cls, v: str) -> str:
        return no_nul("path", v)


def _decode(data: bytes, *, cut: bool) -> tuple[str, bool]:
    """Decode leniently; say whether anything was not UTF-8. A multi-byte character split by the
    size cap is not counted as invalid."""
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError as exc:
        if cut and exc.reason == "unexpected end of data" and exc.start >= len(data) - 3:
            try:
                return data[: exc.start].decode("utf-8") + "\ufffd", False
            except UnicodeDecodeError:
                pass
        return data.decode("utf-8", errors="replace"), True


_NOT_UTF8 = "[note: the file is not valid UTF-8; undecodable bytes are shown as U+FFFD]"

# -- read_file ---------------------------------------------------------------------------------------
_READ = r'''
path = resolve(args["path"])
cap, first, last = args["max_bytes"], args["start_line"], args["end_line"]
fd, st = open_regular(path, os.O_RDONLY)
if first is None and last is None:
    data = read_upto(fd, cap + 1)
    body = data[:cap]
    more = len(data) > cap
    reply({"size": st.st_size, "shown": len(body), "cut": max(st.st_size - len(body), 1) if more else 0}, body)
first = first or 1
out, in_range, line, done, last_byte = bytearray(), 0, 1, False, b""

def nth_newline_end(chunk, pos, n):
    """Offset just past the n-th newline from pos (n >= 1 and that many exist)."""
    for _ in range(n):
        pos = chunk.find(b"\n", pos) + 1
    return pos

# Whole chunks are skipped or taken by counting newlines, so a huge file costs C speed, not a
# Python loop per line.
while not done:
    chunk = os.read(fd, 1 << 16)
    if not chunk:
        break
    last_byte = chunk[-1:]
    pos = 0
    if line < first:
        n = chunk.count(b"\n")
        if line + n < first:
            line += n
            continue
        pos = nth_newline_end(chunk, 0, first - line)
        line = first
    if last is None:
        stop = len(chunk)
    else:
        n = chunk.count(b"\n", pos)
        if line + n <= last:
            stop = len(chunk)
        else:
            stop = nth_newline_end(chunk, pos, last - line + 1)
            done = True
    piece = chunk[pos:stop]
    in_range += len(piece)
    room = cap - len(out)
    if room > 0:
        out += piece[:room]
    line += piece.count(b"\n")
# Lines in the file, when it was read to the end (a last line without a newline still counts).
lines = None if done else (line - 1 if last_byte in (b"", b"\n") else line)
reply({"size": st.st_size, "shown": len(out), "cut": in_range - len(out), "first": first, "lines": lines}, bytes(out))
'''


class ReadArgs(_PathArgs):
    start_line: int | None = Field(None, ge=1, description="First line to show (1-based).")
    end_line: int | None = Field(None, ge=1, description="Last line to show (inclusive).")
    max_bytes: int | None = Field(None, ge=1, description="Most bytes to show; capped by the configured read limit.")

    @model_validator(mode="after")
    def _range(self) -> ReadArgs:
        if self.start_line is not None and self.end_line is not None and self.end_line < self.start_line:
            raise ValueError("end_line is before start_line")
        return self


class ReadFileTool(Tool):
    name = "read_file"
    description = ("Read a text file (relative paths are from the workdir ($HOME)). Optional start_line/end_line "
                   "(1-based, inclusive) select lines; large output is cut at max_bytes.")
    Arguments = ReadArgs

    def execute(self, args: ReadArgs, ctx: ToolContext) -> ToolResult:
        cap = min(args.max_bytes or ctx.config.read_limit_bytes, ctx.config.read_limit_bytes)
        payload = {"path": args.path, "max_bytes": cap, "start_line": args.start_line, "end_line": args.end_line}
        got = run_inside(ctx, _READ, payload, body_cap=cap, what="read_file")
        if got.error:
            return ToolResult.failure(got.error, timed_out=got.timed_out)
        cut = _int(got.meta.get("cut"))
        text, invalid = _decode(got.body, cut=bool(cut))
        notes = []
        if cut:
            notes.append(f"[... {cut} more bytes not shown (file is {_int(got.meta.get('size'))} bytes); "
                         "read further with start_line/end_line ...]")
        lines = got.meta.get("lines")
        if args.start_line and not got.body and isinstance(lines, int) and args.start_line > lines:
            notes.append(f"[note: the file has {lines} lines]")
        if invalid:
            notes.append(_NOT_UTF8)
        if notes:
            text += ("" if not text or text.endswith("\n") else "\n") + "\n".join(notes)
        return ToolResult(output=text, truncated_bytes=cut)


# -- write_file --------------------------------------------------------------------------------------
_WRITE = r'''
path = resolve(args["path"])
data = args["content"].encode("utf-8")
parent = os.path.dirname(path)
try:
    os.makedirs(parent, exist_ok=True)
except OSError as exc:
    fail(oserror(parent, exc))
existed = os.path.lexists(path)
fd, st = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, create=True)
view = memoryview(data)
try:
    while view:
        view = view[os.write(fd, view):]
except OSError as exc:
    fail(oserror(path, exc))
os.close(fd)
reply({"bytes": len(data), "created": not existed})
'''


class WriteArgs(_PathArgs):
    content: str = Field(description="The whole new content of the file.")

    @field_validator("content")
    @classmethod
    def _encodable(cls, v: str) -> str:
        utf8_len("content", v)
        return v


class WriteFileTool(Tool):
    name = "write_file"
    description = "Create or overwrite a file with the given content (parent directories are created)."
    Arguments = WriteArgs

    def execute(self, args: WriteArgs, ctx: ToolContext) -> ToolResult:
        size = utf8_len("content", args.content)
        if size > ctx.config.write_limit_bytes:
            return ToolResult.over_limit("write_file", "content", size, ctx.config.write_limit_bytes,
                                         hint="write it in parts with bash")
        got = run_inside(ctx, _WRITE, {"path": args.path, "content": args.content}, what="write_file")
        if got.error:
            return ToolResult.failure(got.error, timed_out=got.timed_out)
        verb = "created" if got.meta.get("created") else "overwrote"
        return ToolResult(output=f"{verb} {args.path} ({size} bytes)")


# -- str_replace -------------------------------------------------------------------------------------
_REPLACE = r'''
path = resolve(args["path"])
cap = args["cap"]
old, new = args["old"].encode("utf-8"), args["new"].encode("utf-8")
fd, st = open_regular(path, os.O_RDWR)
if st.st_size > cap:
    fail(f"{path} is {st.st_size} bytes, above the edit limit of {cap}; edit it with bash")
data = read_upto(fd, cap + 1)
if len(data) > cap:
    fail(f"{path} grew past the edit limit of {cap} bytes while being read; edit it with bash")
first = data.find(old)
if first < 0:
    fail(f"old text not found in {path}; nothing was changed")
if data.find(old, first + 1) >= 0:
    fail(f"old text occurs {max(data.count(old), 2)} times in {path}; include more context to make it unique; nothing was changed")
result = data[:first] + new + data[first + len(old):]
if len(result) > cap:
    fail(f"the edit would make {path} {len(result)} bytes, above the limit of {cap}; nothing was changed")
try:
    os.lseek(fd, 0, os.SEEK_SET)
    view = memoryview(result)
    while view:
        view = view[os.write(fd, view):]
    os.ftruncate(fd, len(result))
except OSError as exc:
    fail(oserror(path, exc))
reply({"line": data.count(b"\n", 0, first) + 1, "size": len(result)})
'''


class ReplaceArgs(_PathArgs):
    old: str = Field(min_length=1, description="Exact text to replace; must occur exactly once.")
    new: str = Field(description="Replacement text.")

    @field_validator("old", "new")
    @classmethod
    def _encodable(cls, v: str, info: Any) -> str:
        utf8_len(info.field_name, v)
        return v


class StrReplaceTool(Tool):
    name = "str_replace"
    description = "Replace one exact, unique occurrence of `old` with `new` in a file."
    Arguments = ReplaceArgs

    def execute(self, args: ReplaceArgs, ctx: ToolContext) -> ToolResult:
        cap = ctx.config.write_limit_bytes
        for fname in ("old", "new"):
            size = utf8_len(fname, getattr(args, fname))
            if size > cap:
                return ToolResult.over_limit("str_replace", fname, size, cap)
        got = run_inside(ctx, _REPLACE, {"path": args.path, "old": args.old, "new": args.new, "cap": cap}, what="str_replace")
        if got.error:
            return ToolResult.failure(got.error, timed_out=got.timed_out)
        return ToolResult(output=f"replaced 1 occurrence in {args.path} at line {_int(got.meta.get('line'))}")


# -- list_dir ----------------------------------------------------------------------------------------
_LIST = r'''
path = resolve(args["path"])
limit = args["limit"]
try:
    st = os.stat(path)
except OSError as exc:
    fail(oserror(path, exc))
if not stat.S_ISDIR(st.st_mode):
    fail(f"{path} is {kind(st.st_mode)}, not a directory")
names = []
try:
    with os.scandir(os.fsencode(path)) as it:
        for entry in it:
            names.append(entry.name)
except OSError as exc:
    fail(oserror(path, exc))
names.sort()

def show(raw):
    text = raw.decode("utf-8", "backslashreplace")
    return text.encode("unicode_escape").decode("ascii") if any(c < " " or c == "\x7f" for c in text) else text

lines = []
for raw in names[:limit]:
    full = os.path.join(os.fsencode(path), raw)
    try:
        lst = os.lstat(full)
    except OSError:
        lines.append(show(raw) + "  (vanished)")
        continue
    mode = lst.st_mode
    if stat.S_ISDIR(mode):
        lines.append(show(raw) + "/")
    elif stat.S_ISREG(mode):
        lines.append(f"{show(raw)}  {lst.st_size} bytes")
    elif stat.S_ISLNK(mode):
        try:
            target = show(os.readlink(full)[:4096])
        except OSError:
            target = "?"
        lines.append(f"{show(raw)} -> {target}")
    else:
        lines.append(f"{show(raw)}  ({kind(mode)})")
body = "\n".join(lines).encode("utf-8")[: args["body_cap"]]
reply({"total": len(names), "shown": min(len(names), limit)}, body)
'''


class ListArgs(_PathArgs):
    path: str = Field(".", min_length=1, max_length=4096, description="Directory; relative paths are from the workdir ($HOME).")


class ListDirTool(Tool):
    name = "list_dir"
    description = "List a directory: one entry per line, directories end in '/', symlinks show their target."
    Arguments = ListArgs

    def execute(self, args: ListArgs, ctx: ToolContext) -> ToolResult:
        limit = ctx.config.list_limit_entries
        body_cap = min(limit * 300, ctx.config.read_limit_bytes)
        got = run_inside(ctx, _LIST, {"path": args.path, "limit": limit, "body_cap": body_cap},
                         body_cap=body_cap, what="list_dir")
        if got.error:
            return ToolResult.failure(got.error, timed_out=got.timed_out)
        text = got.body.decode("utf-8", errors="replace")
        total, shown = _int(got.meta.get("total")), _int(got.meta.get("shown"))
        if total > shown:
            text += f"\n[... {total - shown} more entries not shown ({total} in all) ...]"
        if not total:
            text = "[empty directory]"
        return ToolResult(output=text)


def _int(value: Any) -> int:
    """A number from a helper's reply; anything else (a tampered reply) counts as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

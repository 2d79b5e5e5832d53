"""File tools, submit and the registry. The file tools run as the student inside the sandbox;
special files (FIFOs, devices, sockets, symlinks to them) are refused without hanging, content
that is not UTF-8 survives, and every result is bounded."""

from __future__ import annotations

import base64
import time

import pytest

from proctor.tools import (
    DEFAULT_TOOL_NAMES, ListDirTool, ReadFileTool, StrReplaceTool, SubmitTool, ToolCall, ToolConfig, ToolContext,
    ToolResult, WriteFileTool, call_tool, default_tools, make_tools,
)

READ, WRITE, REPLACE, LIST, SUBMIT = ReadFileTool(), WriteFileTool(), StrReplaceTool(), ListDirTool(), SubmitTool()


@pytest.fixture(scope="module")
def box(module_sandbox):
    box = module_sandbox
    # The special files every refusal test uses, made by the student itself.
    res = box.run(
        "set -e; mkfifo /tmp/fifo; ln -s /tmp/fifo /workdir/link-to-fifo; ln -s /dev/zero /workdir/link-to-zero;"
        " /usr/bin/python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('/tmp/sock')\"; ln -s /tmp/sock /workdir/link-to-sock",
        timeout=10,
    )
    assert res.ok, res
    yield box


@pytest.fixture
def ctx(box):
    with ToolContext(box) as ctx:
        yield ctx


def sh(box, command: str) -> str:
    res = box.run(["/bin/bash", "-c", command], timeout=10)
    assert res.ok, res
    return res.text


def file_bytes(box, path: str) -> bytes:
    return base64.b64decode(sh(box, f"base64 -w0 {path}"))


# -- special files are refused, fast -----------------------------------------------------------------
SPECIAL = {
    "/tmp/fifo": "FIFO", "/workdir/link-to-fifo": "FIFO", "/dev/zero": "character device",
    "/workdir/link-to-zero": "character device", "/tmp/sock": "socket", "/workdir/link-to-sock": "socket",
    "/tmp": "directory",
}


@pytest.mark.parametrize("path", sorted(SPECIAL))
@pytest.mark.parametrize("tool, extra", [
    (READ, {}), (READ, {"start_line": 2}), (WRITE, {"content": "x"}), (REPLACE, {"old": "a", "new": "b"}),
], ids=["read", "read_range", "write", "str_replace"])
def test_special_files_are_refused_without_hanging(ctx, tool, extra, path):
    started = time.monotonic()
    res = tool.run({"path": path, **extra}, ctx)
    assert time.monotonic() - started < 2, res
    assert res.error and SPECIAL[path] in res.error and "refused" in res.error, res


def test_a_fifo_with_a_reader_waiting_is_still_not_written(ctx, box):
    # With a reader, opening the FIFO for writing would succeed at once: the stat and fstat checks
    # are what refuse it, and the reader gets nothing.
    box.run("rm -f /tmp/fifo2; mkfifo /tmp/fifo2", timeout=5)
    reader = box.spawn(["/bin/bash", "-c", "cat /tmp/fifo2 > /tmp/fifo2.out"])
    try:
        res = WRITE.run({"path": "/tmp/fifo2", "content": "leak"}, ctx)
        assert res.error and "FIFO" in res.error, res
    finally:
        reader.kill_tree()
    assert sh(box, "cat /tmp/fifo2.out") == ""


def test_list_dir_of_a_fifo_is_an_error_not_a_hang(ctx):
    started = time.monotonic()
    res = LIST.run({"path": "/tmp/fifo"}, ctx)
    assert res.error and "not a directory" in res.error and time.monotonic() - started < 2


# -- reading -------------------------------------------------------------------------------------------
def test_read_file_returns_the_content_and_relative_paths_start_at_workdir(ctx, box):
    sh(box, "printf 'hello\\nworld\\n' > /workdir/hello.txt")
    for path in ("hello.txt", "/workdir/hello.txt"):
        res = READ.run({"path": path}, ctx)
        assert res.output == "hello\nworld\n" and res.error is None and res.truncated_bytes == 0, res


def test_a_missing_file_is_an_error_naming_the_path(ctx):
    res = READ.run({"path": "nope/none.txt"}, ctx)
    assert res.error == "/workdir/nope/none.txt: no such file"


def test_non_utf8_content_is_shown_with_replacement_and_a_note(ctx, box):
    sh(box, "printf 'caf\\xc3\\xa9 \\xff\\xfe end\\n' > /workdir/latin.txt")
    res = READ.run({"path": "latin.txt"}, ctx)
    assert res.output.startswith("café \ufffd\ufffd end\n") and "not valid UTF-8" in res.output, res


def test_a_multibyte_character_split_by_the_cap_is_not_called_invalid(ctx, box):
    sh(box, "printf 'ééééé' > /workdir/accents.txt")  # 10 bytes
    res = READ.run({"path": "accents.txt", "max_bytes": 5}, ctx)
    assert res.output.startswith("éé\ufffd") and "not valid UTF-8" not in res.output and res.truncated_bytes == 5, res


def test_read_range_returns_exactly_the_requested_lines(ctx, box):
    sh(box, "seq 1 100000 > /workdir/numbers.txt")
    assert READ.run({"path": "numbers.txt", "start_line": 10, "end_line": 12}, ctx).output == "10\n11\n12\n"
    assert READ.run({"path": "numbers.txt", "start_line": 99999}, ctx).output == "99999\n100000\n"
    assert READ.run({"path": "numbers.txt", "end_line": 2}, ctx).output == "1\n2\n"
    assert READ.run({"path": "numbers.txt", "start_line": 70000, "end_line": 70000}, ctx).output == "70000\n"


def test_a_range_past_the_end_says_how_many_lines_there_are(ctx, box):
    sh(box, "printf 'a\\nb\\nc' > /workdir/three.txt")
    res = READ.run({"path": "three.txt", "start_line": 5}, ctx)
    assert res.error is None and "the file has 3 lines" in res.output, res


def test_read_cap_keeps_the_head_and_reports_the_rest(box):
    sh(box, "head -c 10000 /dev/zero | tr '\\0' q > /workdir/big.txt")
    with ToolContext(box, ToolConfig(read_limit_bytes=1000)) as ctx:
        res = READ.run({"path": "big.txt"}, ctx)
        assert res.output.startswith("q" * 1000) and res.truncated_bytes == 9000, res
        assert "9000 more bytes not shown" in res.output
        asked = READ.run({"path": "big.txt", "max_bytes": 10, "start_line": 1}, ctx)
        assert asked.output.startswith("q" * 10 + "\n[") and asked.truncated_bytes == 9990, asked
        huge = READ.run({"path": "big.txt", "max_bytes": 10**9}, ctx)  # capped by the config
        assert huge.truncated_bytes == 9000


def test_a_huge_file_costs_the_harness_only_the_cap(ctx, box):
    sh(box, "head -c 200M /dev/zero > /tmp/huge.bin")
    res = READ.run({"path": "/tmp/huge.bin", "start_line": 1}, ctx)
    assert res.truncated_bytes == 200 * 2**20 - ctx.config.read_limit_bytes and res.duration_s < 5, res.model_dump(exclude={"output"})
    sh(box, "rm /tmp/huge.bin")


def test_the_tools_act_as_the_student_not_as_root(ctx):
    res = LIST.run({"path": "/proc/1/root"}, ctx)  # the root-owned anchor's view: root only
    assert res.error and "Permission denied" in res.error, res
    res = WRITE.run({"path": "/etc/passwd", "content": "root::0:0::/:/bin/sh\n"}, ctx)
    assert res.error and ("Read-only" in res.error or "Permission denied" in res.error), res


def test_files_planted_for_the_helper_interpreter_are_not_loaded(ctx, box):
    # HOME is /workdir: without -I/-S the helper would import the student's user site.
    site = "/workdir/.local/lib/python3.11/site-packages"
    sh(box, f"mkdir -p {site}; echo 'import os; os._exit(3)' > {site}/usercustomize.py;"
            f" echo 'import os; os._exit(4)' > {site}/evil.pth; echo 'raise SystemExit(5)' > /workdir/json.py;"
            " cp /workdir/json.py /tmp/json.py; echo data > /workdir/plain.txt")
    assert READ.run({"path": "plain.txt"}, ctx).output == "data\n"
    sh(box, "rm -rf /workdir/.local /workdir/json.py /tmp/json.py")


# -- writing -------------------------------------------------------------------------------------------
def test_write_file_creates_parents_and_overwrites(ctx, box):
    res = WRITE.run({"path": "deep/er/new.txt", "content": "first\n"}, ctx)
    assert res.error is None and res.output.startswith("created"), res
    res = WRITE.run({"path": "/workdir/deep/er/new.txt", "content": "é\n"}, ctx)
    assert res.output.startswith("overwrote") and file_bytes(box, "/workdir/deep/er/new.txt") == "é\n".encode()
    assert sh(box, "stat -c %U /workdir/deep/er/new.txt") == "student\n"


def test_write_file_content_over_the_limit_is_refused_naming_the_field(box):
    with ToolContext(box, ToolConfig(write_limit_bytes=100)) as ctx:
        res = WRITE.run({"path": "toolong.txt", "content": "x" * 101}, ctx)
    assert res.error and "'content'" in res.error and "limit" in res.error
    assert "toolong" not in sh(box, "ls /workdir")


@pytest.mark.parametrize("tool, arguments, field", [
    (READ, {}, "path"), (READ, {"path": ""}, "path"), (READ, {"path": "a\0b"}, "path"), (READ, {"path": 3}, "path"),
    (READ, {"path": "x", "start_line": 0}, "start_line"), (READ, {"path": "x", "start_line": 5, "end_line": 2}, "end_line"),
    (READ, {"path": "x", "max_bytes": "1"}, "max_bytes"), (WRITE, {"path": "x"}, "content"),
    (WRITE, {"path": "x", "content": "\ud800"}, "content"), (REPLACE, {"path": "x", "old": "", "new": "y"}, "old"),
    (REPLACE, {"path": "x", "old": "a"}, "new"), (LIST, {"path": "x", "recursive": True}, "recursive"),
    (SUBMIT, {"answer": 42}, "answer"),
])
def test_bad_arguments_come_back_as_an_error_naming_the_field(ctx, tool, arguments, field):
    res = tool.run(arguments, ctx)
    assert res.error and field in res.error, res
    assert not res.ends_step


# -- str_replace ---------------------------------------------------------------------------------------
def test_str_replace_replaces_a_unique_string(ctx, box):
    sh(box, "printf 'alpha\\nbeta\\ngamma\\n' > /workdir/edit.txt")
    res = REPLACE.run({"path": "edit.txt", "old": "beta", "new": "BETA"}, ctx)
    assert res.error is None and "line 2" in res.output, res
    assert file_bytes(box, "/workdir/edit.txt") == b"alpha\nBETA\ngamma\n"


@pytest.mark.parametrize("content, old, why", [
    ("one two one", "one", "occurs 2 times"), ("aaa", "aa", "occurs 2 times"), ("abc", "zzz", "not found"),
])
def test_str_replace_refuses_an_ambiguous_or_absent_string_and_changes_nothing(ctx, box, content, old, why):
    sh(box, f"printf '{content}' > /workdir/ambiguous.txt")
    res = REPLACE.run({"path": "ambiguous.txt", "old": old, "new": "X"}, ctx)
    assert res.error and why in res.error, res
    assert file_bytes(box, "/workdir/ambiguous.txt") == content.encode()


def test_str_replace_refuses_an_edit_that_would_exceed_the_size_cap(box):
    sh(box, "head -c 900 /dev/zero | tr '\\0' z > /workdir/near-cap.txt; printf 'X' >> /workdir/near-cap.txt")
    with ToolContext(box, ToolConfig(write_limit_bytes=1000)) as ctx:
        res = REPLACE.run({"path": "near-cap.txt", "old": "X", "new": "Y" * 200}, ctx)
        assert res.error and "above the limit of 1000" in res.error, res
        assert REPLACE.run({"path": "near-cap.txt", "old": "X", "new": "Y" * 100}, ctx).error is None
    assert len(file_bytes(box, "/workdir/near-cap.txt")) == 1000


def test_str_replace_keeps_undecodable_bytes_intact(ctx, box):
    sh(box, "printf '\\xff\\xfe old \\x80\\n' > /workdir/binaryish.txt")
    res = REPLACE.run({"path": "binaryish.txt", "old": "old", "new": "new"}, ctx)
    assert res.error is None, res
    assert file_bytes(box, "/workdir/binaryish.txt") == b"\xff\xfe new \x80\n"


def test_str_replace_can_shrink_a_file(ctx, box):
    sh(box, "printf 'keep REMOVE-THIS-LONG-PART end' > /workdir/shrink.txt")
    REPLACE.run({"path": "shrink.txt", "old": " REMOVE-THIS-LONG-PART", "new": ""}, ctx)
    assert file_bytes(box, "/workdir/shrink.txt") == b"keep end"


# -- list_dir --------------------------------------------------------------------------------------------
def test_list_dir_shows_kinds_sizes_links_and_undecodable_names(ctx, box):
    sh(box, "mkdir -p /workdir/ls/sub; printf abc > /workdir/ls/file; ln -s file /workdir/ls/link; mkfifo /workdir/ls/pipe;"
            " touch /workdir/ls/$'bad\\xffname' /workdir/ls/$'new\\nline'")
    res = LIST.run({"path": "ls"}, ctx)
    lines = res.output.splitlines()
    assert "sub/" in lines and "file  3 bytes" in lines and "link -> file" in lines, res
    assert "pipe  (a FIFO (named pipe))" in lines
    assert "bad\\xffname  0 bytes" in lines and "new\\nline  0 bytes" in lines


def test_list_dir_is_capped(box):
    sh(box, "mkdir -p /workdir/many && cd /workdir/many && touch f{001..120}")
    with ToolContext(box, ToolConfig(list_limit_entries=100)) as ctx:
        res = LIST.run({"path": "many"}, ctx)
    assert res.output.count("\n") == 100 and "20 more entries not shown (120 in all)" in res.output


# -- submit and the registry ---------------------------------------------------------------------------
def test_submit_ends_the_step_with_or_without_an_answer(ctx):
    assert SUBMIT.run({}, ctx).ends_step
    res = SUBMIT.run({"answer": "42"}, ctx)
    assert res.ends_step and res.answer == "42" and res.error is None


def test_an_overlong_answer_is_refused_and_does_not_end_the_step(box):
    with ToolContext(box, ToolConfig(answer_limit_chars=10)) as ctx:
        res = SUBMIT.run({"answer": "x" * 11}, ctx)
    assert res.error and "'answer'" in res.error and not res.ends_step and res.answer is None


def test_default_tools_are_the_four_contract_tools_with_their_argument_names():
    tools = {t.name: t for t in default_tools()}
    assert tuple(tools) == DEFAULT_TOOL_NAMES == ("bash", "read_file", "write_file", "submit")
    assert tools["bash"].parameters["required"] == ["command"] and "timeout" in tools["bash"].parameters["properties"]
    assert tools["read_file"].parameters["required"] == ["path"]
    assert sorted(tools["write_file"].parameters["required"]) == ["content", "path"]
    assert tools["submit"].parameters.get("required", []) == []
    assert all(t.parameters["additionalProperties"] is False for t in tools.values())


def test_tasks_pick_tools_by_name_and_unknown_names_fail_loudly():
    assert [t.name for t in make_tools(["list_dir", "str_replace"])] == ["list_dir", "str_replace"]
    with pytest.raises(ValueError, match="unknown tool 'rm_rf'"):
        make_tools(["rm_rf"])


def test_a_call_to_a_tool_not_offered_is_an_error_result(ctx):
    res = call_tool(make_tools(["submit"]), ToolCall(name="bash", arguments={"command": "id"}), ctx)
    assert res.error and "no tool named 'bash'" in res.error and "submit" in res.error


def test_calls_and_results_round_trip_through_json(ctx):
    call = ToolCall(name="write_file", arguments={"path": "rt.txt", "content": "x"}, id="call_1")
    res = call_tool(default_tools(), call, ctx)
    assert ToolCall.model_validate_json(call.model_dump_json()) == call
    assert ToolResult.model_validate_json(res.model_dump_json()) == res
    assert set(res.model_dump()) >= {"output", "exit_code", "truncated_bytes", "timed_out", "duration_s", "error",
                                     "session_restarted", "ends_step", "answer"}

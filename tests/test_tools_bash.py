"""The bash tool: a persistent shell whose end-of-command signal the student can neither fake nor
break, with bounded time and memory whatever the command does. Every attack runs for real, as
the student, in a real sandbox."""

from __future__ import annotations

import time

import pytest

from proctor.tools import BashTool, ToolConfig, ToolContext
from proctor.tools.bash import session_of

BASH = BashTool()


@pytest.fixture(scope="module")
def box(module_sandbox):
    return module_sandbox


@pytest.fixture
def ctx(box):
    with ToolContext(box, ToolConfig(bash_timeout_s=10)) as ctx:
        yield ctx


def bash(ctx, command, **kw):
    return BASH.run({"command": command, **kw}, ctx)


def assert_survived(ctx, name="x", value="kept"):
    res = bash(ctx, f'echo "{name}=${{{name}}}"')
    assert res.output == f"{name}={value}\n", res
    assert not res.session_restarted


# -- state carries over ----------------------------------------------------------------------------------
def test_cd_variables_functions_and_background_jobs_carry_over_between_calls(ctx):
    first = bash(ctx, "mkdir -p /tmp/here && cd /tmp/here; x=kept; declare -A map=([k]=v); greet() { echo hi $1; }; sleep 300 & echo $!")
    assert first.exit_code == 0 and first.error is None
    job_pid = first.output.strip()
    res = bash(ctx, 'pwd; echo $x ${map[k]}; greet you; jobs; kill -0 ' + job_pid + ' && echo alive')
    assert res.output.splitlines()[:3] == ["/tmp/here", "kept v", "hi you"]
    assert "Running" in res.output and "sleep 300" in res.output and res.output.endswith("alive\n")
    assert not res.session_restarted


def test_the_exit_status_of_the_command_is_reported(ctx):
    assert bash(ctx, "(exit 42)").exit_code == 42
    assert bash(ctx, "true").exit_code == 0


def test_stdout_and_stderr_are_merged_in_order(ctx):
    assert bash(ctx, "echo out; echo err >&2; echo out2").output == "out\nerr\nout2\n"


# -- the control channel cannot be spoofed ------------------------------------------------------------
def test_forged_markers_written_to_every_fd_of_the_shell_do_not_end_the_call(ctx):
    bash(ctx, "true")
    stale = session_of(ctx).last_nonce
    fakes = [f"{'0' * 32} 0 ok", f"{stale} 0 ok", f"{stale} 0 lost", "__proctor_done 0"]
    forge = "; ".join(f"echo '{fake}'" for fake in fakes)
    started = time.monotonic()
    # Print them; then, from a builtin, write them to every fd the shell holds, including the copy
    # of the control pipe bash saves while it runs the command (reachable with >&N) and, through
    # /proc, every pipe (refused: they belong to root). Only this call's nonce is missing.
    res = bash(ctx, f"{{ {forge}; }}; for n in $(ls /proc/$$/fd); do {{ {forge}; }} >&$n; {{ {forge}; }} > /proc/$$/fd/$n; done 2>/dev/null;"
                    " sleep 0.5; echo after; (exit 7)")
    assert time.monotonic() - started >= 0.5
    assert res.exit_code == 7 and res.output.endswith("after\n"), res
    assert not res.session_restarted


def test_the_nonce_is_nowhere_the_command_can_look(ctx):
    res = bash(ctx, 'set; declare -p; declare -f; env; echo "$BASH_COMMAND" "$@" "$_"; history;'
                    ' cat /proc/$$/cmdline /proc/$$/environ /proc/self/cmdline | tr "\\0" " "; ls -l /proc/$$/fd')
    nonce = session_of(ctx).last_nonce
    assert nonce and res.exit_code == 0 and "__proctor_done" in res.output  # the dump really ran
    assert nonce not in res.output


def test_the_command_does_not_hold_the_control_or_output_channel(ctx):
    res = bash(ctx, "[ -e /dev/fd/61 ] && echo ctl-open; [ -e /dev/fd/62 ] && echo out-open;"
                    " /usr/bin/python3 -I -c 'import os; print(sorted(int(f) for f in os.listdir(\"/proc/self/fd\")))'")
    assert res.output == "[0, 1, 2, 3]\n", res


def test_the_shells_pipes_cannot_be_reopened_through_proc(ctx):
    # They belong to the root harness: the command can use only what bash itself holds.
    res = bash(ctx, "for n in $(ls /proc/$$/fd); do case $(readlink /proc/$$/fd/$n) in"
                    " pipe:*) echo x > /proc/$$/fd/$n || echo refused;; esac; done")
    assert res.output.count("refused") >= 3 and "Permission denied" in res.output, res


# -- the wrapper cannot be broken ----------------------------------------------------------------------
@pytest.mark.parametrize("attack", [
    "exec >/dev/null", "exec 1>&-", "exec 2>&-", "exec 1>&- 2>&-", "exec 0<&-", "exec 3>&- 4>&- 5>&-",
    "exec 61>&- 62>&-", "exec 61>/dev/null 62>/dev/null", "exec 62>&1 61>&1",
])
def test_redirecting_or_closing_fds_lasts_only_for_that_command(ctx, attack):
    bash(ctx, "x=kept")
    res = bash(ctx, f"{attack}; echo maybe-hidden", timeout=5)
    assert not res.timed_out and res.duration_s < 2, res
    assert_survived(ctx)


def test_closing_every_fd_of_the_shell_gives_an_answer_and_a_fresh_session(ctx):
    res = bash(ctx, 'for i in $(seq 0 1023); do eval "exec $i>&-"; done; echo gone', timeout=5)
    assert res.duration_s < 3 and res.session_restarted, res
    assert bash(ctx, "echo back").output == "back\n"


def test_an_unterminated_quote_is_a_syntax_error_and_the_session_survives(ctx):
    bash(ctx, "x=kept")
    res = bash(ctx, 'echo "never closed', timeout=5)
    assert res.exit_code == 2 and "unexpected EOF" in res.output and res.duration_s < 1, res
    # bash 5.2 misparses the next line after such an error and exits; the wrapper's prefix stops it.
    assert_survived(ctx)
    res = bash(ctx, "echo 'single")
    assert res.exit_code == 2
    assert_survived(ctx)


def test_an_unterminated_heredoc_ends_at_the_end_of_the_command(ctx):
    bash(ctx, "x=kept")
    res = bash(ctx, "cat <<EOF\nline one\n", timeout=5)
    assert "line one" in res.output and res.exit_code == 0 and res.duration_s < 1, res
    assert_survived(ctx)


def test_a_command_cannot_end_the_wrapper_early_with_quotes_or_braces(ctx):
    assert bash(ctx, "echo 'a'\\''b' \"'\" '\\'").output == "a'b ' \\\n"
    # A stray `}` would close the wrapper's group if the text were pasted in; as one eval'd word
    # it is only a syntax error, so nothing of it runs and the wrapper still reports.
    res = bash(ctx, "echo first; }; echo after", timeout=5)
    assert res.exit_code == 2 and "syntax error" in res.output and "first\n" not in res.output, res
    assert bash(ctx, "echo fine").output == "fine\n"


def test_the_wrapper_functions_cannot_be_redefined_or_unset(ctx):
    bash(ctx, "x=kept")
    res = bash(ctx, "__proctor_done() { :; }; unset -f __proctor_done __proctor_begin; __proctor_begin() { sleep 100; }", timeout=5)
    assert "readonly function" in res.output and res.duration_s < 1, res
    assert_survived(ctx)


def test_aliases_cannot_replace_the_wrapper(ctx):
    bash(ctx, "x=kept; shopt -s expand_aliases; alias eval='sleep 100;' __proctor_done='sleep 100;' __proctor_begin='sleep 100;'")
    res = bash(ctx, "echo still", timeout=5)
    assert res.output == "still\n" and res.duration_s < 1, res
    assert_survived(ctx)


def test_a_command_reading_stdin_gets_end_of_file_not_the_harness_input(ctx):
    res = bash(ctx, "cat; read line; echo read=$? done", timeout=5)
    assert res.output == "read=1 done\n" and res.duration_s < 1, res


def test_xtrace_shows_the_command_but_not_the_wrapper(ctx):
    res = bash(ctx, "set -x; echo traced", timeout=5)
    res = bash(ctx, "echo again; set +x", timeout=5)
    assert "+ echo again" in res.output and "__proctor" not in res.output, res


def test_a_background_job_stealing_the_shells_input_cannot_hang_later_calls(ctx):
    # A forked subshell inherits the shell's saved stdin (fd 10, kept by bash to undo the group's
    # redirection) and races the shell for the harness's next lines.
    bash(ctx, "(while read -r -u 10 line; do :; done) & echo started")
    res = bash(ctx, "echo next", timeout=2)
    assert res.duration_s < 5, res
    for _ in range(3):
        res = bash(ctx, "echo clean", timeout=2)
        if res.output == "clean\n" and not res.session_restarted:
            break
    assert res.output == "clean\n", res


@pytest.mark.parametrize("attack, code", [
    ("exit 3", 3), ("kill -9 $$", 137), ("kill -9 0", 137), ("set -e; false", 1), ("exec /bin/true", 0),
])
def test_a_command_that_ends_the_shell_gets_an_answer_and_a_fresh_session(ctx, attack, code):
    bash(ctx, "x=kept; sleep 300 &")
    res = bash(ctx, f"echo before; {attack}", timeout=5)
    assert res.duration_s < 2 and res.session_restarted and res.exit_code == code, res
    assert res.output.startswith("before\n") and "fresh shell" in res.output
    after = bash(ctx, 'echo "x=$x"; jobs')
    assert after.output == "x=\n" and not after.session_restarted


@pytest.mark.parametrize("attack", ["exec sleep 100", "while :; do :; done", "read v < /tmp/stuck_fifo"])
def test_a_shell_stuck_in_itself_times_out_and_is_restarted(ctx, attack):
    bash(ctx, "rm -f /tmp/stuck_fifo; mkfifo /tmp/stuck_fifo")
    res = bash(ctx, f"echo before; {attack}", timeout=1)
    assert res.timed_out and res.session_restarted and res.exit_code is None, res
    assert 1 <= res.duration_s < 4 and res.output.startswith("before\n")
    assert bash(ctx, "echo back").output == "back\n"


# -- timeouts ------------------------------------------------------------------------------------------
def test_a_timeout_returns_partial_output_and_keeps_the_session(ctx):
    bash(ctx, "x=kept")
    res = bash(ctx, "echo partial; sleep 100", timeout=1)
    assert res.timed_out and not res.session_restarted and res.exit_code is None, res
    assert res.output.startswith("partial\n") and "timed out after 1 s" in res.output
    assert 1 <= res.duration_s < 3
    assert_survived(ctx)


def test_cat_of_a_fifo_times_out_and_the_session_survives(ctx):
    bash(ctx, "x=kept; rm -f /tmp/f; mkfifo /tmp/f")
    res = bash(ctx, "cat /tmp/f", timeout=1)
    assert res.timed_out and not res.session_restarted and res.duration_s < 3, res
    assert_survived(ctx)


def test_sleep_infinity_times_out_and_the_session_survives(ctx):
    bash(ctx, "x=kept")
    res = bash(ctx, "sleep infinity", timeout=1)
    assert res.timed_out and not res.session_restarted and res.duration_s < 3, res
    assert_survived(ctx)


def test_a_timeout_kills_everything_the_command_started_but_spares_earlier_jobs(ctx):
    old = bash(ctx, "sleep 300 & echo $!").output.strip()
    session = session_of(ctx)
    before = {p.pid for p in session._proc.processes()}
    res = bash(ctx, "setsid sleep 1000 & (sleep 1000 &); nohup sleep 1000 >/dev/null 2>&1 & sleep infinity", timeout=1)
    assert res.timed_out and not res.session_restarted, res
    assert {p.pid for p in session._proc.processes()} <= before  # nothing the call started survives, daemons included
    # bash may first report the jobs the timeout killed ("... Killed  nohup sleep 1000"): that is
    # the shell's own job notice, not output of this command.
    lines = bash(ctx, f"kill -0 {old} && echo old-job-alive").output.splitlines()
    assert lines[-1] == "old-job-alive"
    assert all("Killed" in line for line in lines[:-1]), lines


def test_the_timeout_is_capped_by_the_configured_maximum(box):
    with ToolContext(box, ToolConfig(bash_timeout_s=0.5, bash_max_timeout_s=1)) as ctx:
        res = bash(ctx, "sleep 30", timeout=10_000)
        assert res.timed_out and res.duration_s < 3, res
        assert bash(ctx, "sleep 30").timed_out  # and the default applies when none is asked


# -- output bounds -------------------------------------------------------------------------------------
def _peak_rss_mb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) // 1024


def test_a_gigabyte_of_output_keeps_the_harness_memory_bounded(box):
    with ToolContext(box, ToolConfig(output_limit_bytes=64 * 1024)) as ctx:
        bash(ctx, "true")  # the shell is up before we measure
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak-RSS mark, so the measure is this call's alone
        before = _peak_rss_mb()
        res = bash(ctx, "head -c 1G /dev/zero | tr '\\0' a; echo; echo END", timeout=60)
        growth = _peak_rss_mb() - before
    assert res.exit_code == 0 and not res.timed_out, res.model_dump(exclude={"output"})
    assert growth < 100, f"harness peak RSS grew {growth} MB"
    assert res.truncated_bytes == (1 << 30) + 5 - 64 * 1024
    assert res.output.startswith("a" * 1000) and res.output.endswith("a\nEND\n")
    assert len(res.output.encode()) < 65 * 1024


def test_long_output_keeps_head_and_tail_with_a_note(box):
    with ToolContext(box, ToolConfig(output_limit_bytes=1000)) as ctx:
        res = bash(ctx, "echo START; head -c 100000 /dev/zero | tr '\\0' m; echo; echo END")
    assert res.truncated_bytes == 6 + 100001 + 4 - 1000
    assert res.output.startswith("START\nmmm") and res.output.endswith("mmm\nEND\n")
    assert f"[... {res.truncated_bytes} bytes truncated ...]" in res.output


def test_undecodable_output_is_replaced_not_fatal(ctx):
    res = bash(ctx, "printf 'ok\\xff\\xfe\\n'")
    assert res.output == "ok\ufffd\ufffd\n" and res.exit_code == 0


# -- arguments -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("arguments, field", [
    ({}, "command"), ({"command": 5}, "command"), ({"command": "a\0b"}, "command"),
    ({"command": "x", "timeout": -1}, "timeout"), ({"command": "x", "timeout": "soon"}, "timeout"),
    ({"command": "x", "shell": "zsh"}, "shell"), ({"command": "\ud800"}, "command"),
])
def test_bad_arguments_come_back_as_an_error_naming_the_field(ctx, arguments, field):
    res = BASH.run(arguments, ctx)
    assert res.error and f"'{field}'" in res.error and res.exit_code is None, res


def test_arguments_that_are_not_an_object_are_an_error(ctx):
    assert "JSON object" in BASH.run(["ls"], ctx).error


def test_a_command_over_the_size_limit_is_refused(box):
    with ToolContext(box, ToolConfig(max_command_bytes=100)) as ctx:
        res = bash(ctx, "echo " + "x" * 200)
    assert res.error and "'command'" in res.error and "limit" in res.error


def test_a_megabyte_command_runs(ctx):
    res = bash(ctx, "v='" + "y" * 1_000_000 + "'; echo ${#v}")
    assert res.output == "1000000\n"


# -- custody ---------------------------------------------------------------------------------------------
def test_after_kill_all_the_next_call_runs_in_a_fresh_session_and_says_so(sandbox):
    with ToolContext(sandbox) as ctx:
        bash(ctx, "x=kept; sleep 300 &")
        assert sandbox.kill_all().empty
        res = bash(ctx, 'echo "x=$x"')
    assert res.session_restarted and res.output.startswith("x=\n"), res

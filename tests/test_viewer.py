"""`proctor view` in a real headless Chromium (the OS's, driven by Playwright) over rollouts the real
harness wrote: the index lists and filters them, a run page shows what the student did and why the
judge scored it, and a student's markup, scripts and terminal escapes execute nothing: the payloads
would call a listener on loopback, and no call arrives. Damaged rollouts (a torn transcript, a
malformed result.json) are shown as such, URLs cannot leave the run directories, and nothing is
ever written into them.

Screenshots of the index and a run page go to $PROCTOR_VIEWER_SCREENSHOTS when set (the README's
come from `PROCTOR_VIEWER_SCREENSHOTS=docs/img`), else to a temporary directory."""

from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
CHROMIUM = "/usr/bin/chromium"
if not IN_CI:  # in CI a skip would hide a broken viewer: `make test` installs all of these
    pytest.importorskip("jinja2", reason="the view extra is not installed")
    pytest.importorskip("playwright.sync_api", reason="playwright (the test extra) is not installed")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip("no /usr/bin/chromium (`PROCTOR_EXTRAS=test,view make setup` installs it)", allow_module_level=True)

from proctor.agents.scripted import ScriptedAgent
from proctor.cli import app as cli_app
from proctor.demo import run_demo
from proctor.harness import run_rollout
from proctor.redteam import run_redteam
from proctor.tasks import load_environment
from proctor.tasks.models import Script, ScriptTurn
from proctor.viewer import BackgroundViewer
from proctor.viewer.inert import visible
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "quarterly_revenue"


class Listener:
    """A loopback HTTP server that records every request: what a payload that ran would call."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                hits.append(self.path)
                self.send_response(200)
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()

            do_POST = do_GET

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _payload(url: str) -> str:
    """What a hostile student prints: a script tag, an image whose onerror calls home, a terminal
    hyperlink and colour escapes, a bidi override, each aimed at the listener."""
    return (f'<script>fetch("{url}/script")</script>\n'
            f'<img src=x onerror="fetch(\'{url}/img\')">\n'
            f'<img src="{url}/imgsrc">\n'
            f'\x1b]8;;{url}/osc\x1b\\click me\x1b]8;;\x1b\\ \x1b[31mred\x1b[0m \u202eevil\n')


def _tree(root: Path) -> dict[str, tuple]:
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns, p.lstat().st_mode)
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def listener():
    server = Listener()
    yield server
    server.close()


@pytest.fixture(scope="module")
def runs(confinement, tmp_path_factory, listener) -> dict[str, Path]:
    """Real rollouts: the demo's five (oracle, wrong answer, three hacks), a hostile one, a red-team
    run; and damaged copies written in the documented format (a torn transcript without a result,
    a malformed result.json)."""
    batch = tmp_path_factory.mktemp("batch")
    run_demo(batch)
    env = load_environment(str(EXAMPLE))
    task = env.tasks["q3-revenue"]
    payload = _payload(listener.url)
    encoded = base64.b64encode(payload.encode() + b"\xff\xfe not utf-8\n").decode()
    hostile = Script(name="hostile", turns=[
        ScriptTurn(tool="bash", arguments={"command": f"echo {encoded} | base64 -d"}),
        ScriptTurn(tool="bash", arguments={"command": f"echo '<img src=x onerror=\"fetch(`{listener.url}/command`)\">'"}),
        ScriptTurn(text=payload),
    ])
    run_rollout(task, ScriptedAgent(hostile), batch, env_dir=env.directory, run_id="hostile")

    torn = batch / "torn"
    shutil.copytree(batch / "demo-oracle", torn)
    (torn / "result.json").unlink()
    data = (torn / "transcript.jsonl").read_bytes()
    (torn / "transcript.jsonl").write_bytes(data[: data.index(b'"type": "tool_result"') + 30])
    malformed = batch / "malformed"
    shutil.copytree(batch / "demo-wrong-answer", malformed)
    (malformed / "result.json").write_text('{"run_id": "malformed", "status": "completed", "score": ')
    with open(malformed / "transcript.jsonl", "ab") as f:  # raw bytes that are not UTF-8, and the writer's \udcXX form
        f.write(b'{"type": "notice", "seq": 90, "t": 1.0, "text": "raw \xff\xfe and escaped \\udcfd"}\n')

    redteam = tmp_path_factory.mktemp("redteam")
    run_redteam(env, attacks=["fifo-answer"], out_dir=redteam)
    return {"batch": batch, "redteam": redteam}


class Viewer(BackgroundViewer):
    def get(self, path: str, **headers: str) -> tuple[int, str]:
        request = urllib.request.Request(self.url + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return reply.status, reply.read().decode("utf-8", errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode("utf-8", errors="replace")


@pytest.fixture(scope="module")
def viewer(runs):
    server = Viewer([runs["batch"], runs["redteam"]])
    yield server
    server.close()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    target = os.environ.get("PROCTOR_VIEWER_SCREENSHOTS")
    path = Path(target) if target else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _row(page, key: str):
    return page.locator(f'tr[data-key="{key}"]')


def test_the_index_lists_a_completed_and_a_misbehaved_rollout_with_their_statuses_and_kinds(viewer, page, shots):
    page.goto(viewer.url + "/")
    oracle, symlink = _row(page, "demo-oracle"), _row(page, "demo-symlink-to-key")
    assert oracle.locator(".badge").inner_text() == "completed"
    assert symlink.locator(".badge").inner_text() == "misbehaved"
    assert "submission_symlink" in symlink.locator(".kind").all_inner_texts()
    assert oracle.locator(".kind").count() == 0
    assert "9 of 9 rollouts" in page.locator("#summary").inner_text()  # the demo's 5, the hostile, torn and malformed ones, the red team's
    page.screenshot(path=str(shots / "viewer-index.png"))
    assert (shots / "viewer-index.png").stat().st_size > 10_000


def test_filters_search_and_sorting_narrow_and_order_the_list(viewer, page):
    page.goto(viewer.url + "/")
    with page.expect_navigation():
        page.select_option('select[name="status"]', "misbehaved")  # the page's script submits on change
    keys = page.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.key)")
    assert set(keys) == {"demo-symlink-to-key", "demo-fifo-answer", "demo-background-rewriter", *_redteam_keys(page)}
    with page.expect_navigation():
        page.select_option('select[name="kind"]', "processes_left_at_custody")
    assert page.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.key)") == ["demo-background-rewriter"]

    page.goto(viewer.url + "/?q=FIFO")
    keys = page.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.key)")
    assert "demo-fifo-answer" in keys and "demo-oracle" not in keys
    page.goto(viewer.url + "/?agent=oracle&sort=score&order=asc")  # the torn copy has no score: it sorts last
    assert page.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.key)") == ["demo-oracle", "torn"]
    page.goto(viewer.url + "/?sort=score&order=desc&per_page=2")
    assert "page 1 of" in page.locator("#summary").inner_text()
    assert page.locator("tbody tr").count() == 2
    assert page.locator("tbody tr .badge").first.inner_text() == "completed"  # the oracle's 1.0 leads


def _redteam_keys(page) -> set[str]:
    return {k for k in page.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.key)")
            if k.startswith("q3-revenue-")}


def test_the_run_page_shows_the_students_commands_and_the_judges_explanation(viewer, page, shots):
    page.goto(viewer.url + "/runs/demo-wrong-answer")
    commands = page.locator("pre.command").all_inner_texts()
    assert any("csv.DictReader(open('/data/orders.csv'))" in c for c in commands)
    assert "answer.txt: '60744' is not the expected integer" in page.locator("#verdicts").inner_text()
    assert "copied" in page.locator("table.custody").inner_text()
    page.click("#confinement summary")
    assert "uid_isolation: enforced" in page.locator("#confinement").inner_text()
    assert "tool calls" in page.locator("#usage").inner_text()

    page.goto(viewer.url + "/runs/demo-symlink-to-key")
    evidence = page.locator("#misbehaviour").inner_text()
    assert "submission_symlink" in evidence and "answer.txt" in evidence
    assert "refused" in page.locator("table.custody").inner_text()
    assert any("ln -s" in c for c in page.locator("pre.command").all_inner_texts())
    page.screenshot(path=str(shots / "viewer-run.png"))
    assert (shots / "viewer-run.png").stat().st_size > 10_000

    with page.expect_navigation():
        page.click('a[href$="/raw/result.json"]')
    assert json.loads(page.locator("body").inner_text())["run_id"] == "demo-symlink-to-key"


def test_a_students_script_tags_onerror_images_and_terminal_escapes_execute_nothing(viewer, page, listener):
    # The listener sees what this browser sends it: a page and a script's fetch both arrive.
    page.goto(listener.url + "/canary")
    page.evaluate("fetch('/canary-fetch').then(r => r.status)")
    assert {"/canary", "/canary-fetch"} <= set(listener.hits)
    listener.hits.clear()

    for path in ["/runs/hostile", "/runs/hostile/raw/transcript.jsonl", "/?q=hostile", "/runs/hostile?page=1"]:
        page.goto(viewer.url + path)
        page.wait_for_load_state("networkidle")
    page.goto(viewer.url + "/runs/hostile")
    page.wait_for_timeout(1000)
    assert listener.hits == [], f"a payload ran: {listener.hits}"

    # The page shows the payloads as text: escaped, not parsed (this holds without the CSP too).
    text = page.locator("#transcript").inner_text()
    assert '<script>fetch("' in text and "onerror=" in text
    assert page.locator("main script, main img, main iframe, main [onerror]").count() == 0
    assert page.locator("script").count() == 1  # the viewer's own static file
    escapes = page.locator("#transcript .esc").all_inner_texts()
    assert {"\\x1b", "\\u202e", "\\ufffd"} <= set(escapes)  # the bash tool stores invalid bytes as U+FFFD
    assert "\x1b" not in text and "\u202e" not in text
    status, body = viewer.get("/runs/hostile")
    assert "script-src 'self'" in _headers(viewer, "/runs/hostile")["content-security-policy"]
    assert "<script>fetch(" not in body and "&lt;script&gt;fetch(" in body
    assert _headers(viewer, "/runs/hostile/raw/transcript.jsonl")["content-type"].startswith("text/plain")


def _headers(viewer: Viewer, path: str) -> dict[str, str]:
    with urllib.request.urlopen(viewer.url + path, timeout=10) as reply:
        return {k.lower(): v for k, v in reply.headers.items()}


def test_a_torn_transcript_and_a_malformed_result_are_shown_as_such(viewer, page):
    page.goto(viewer.url + "/")
    torn, malformed = _row(page, "torn"), _row(page, "malformed")
    assert torn.locator(".badge").inner_text() == "no_result"
    assert "no result.json yet" in torn.locator(".row-note").inner_text()
    assert torn.locator("td").nth(1).inner_text().startswith("q3-revenue")  # named from the transcript's first line
    assert malformed.locator(".badge").inner_text() == "malformed"
    assert "not valid JSON" in malformed.locator(".row-note").inner_text()

    page.goto(viewer.url + "/runs/torn")
    assert "result.json is missing" in page.locator(".result-note").inner_text()
    assert "the last line is incomplete" in page.locator(".line-note").inner_text()
    assert page.locator(".event.model_turn").count() >= 1  # what was written before the tear is shown
    page.goto(viewer.url + "/runs/malformed")
    assert "not valid JSON" in page.locator(".result-note").inner_text()
    assert page.locator(".event.score").count() == 1  # its transcript is whole, and shown
    assert {"\\xff", "\\xfe", "\\xfd"} <= set(page.locator(".event.notice .esc").all_inner_texts())


def test_the_red_team_table_links_each_attack_to_its_rollout(viewer, page):
    page.goto(viewer.url + "/redteam")
    row = page.locator("table.redteam tr", has_text="fifo-answer")
    assert "submission_special_file" in row.inner_text() and "yes" in row.inner_text()
    with page.expect_navigation():
        row.locator("a").click()
    assert "fifo-answer" in page.locator("#transcript").inner_text() or page.locator(".kind").count() >= 1
    assert page.locator("#status").inner_text() == "misbehaved"


def test_a_batch_still_running_shows_new_results_as_they_land(runs, page, tmp_path):
    live = tmp_path / "live"
    live.mkdir()
    shutil.copytree(runs["batch"] / "demo-oracle", live / "first")
    server = Viewer([live])
    try:
        page.goto(server.url + "/")
        assert page.locator("tbody tr[data-key]").count() == 1
        shutil.copytree(runs["batch"] / "demo-fifo-answer", live / "second")
        page.locator('tr[data-key="second"]').wait_for(timeout=10_000)  # no reload: the page's script polls
        assert "2 of 2 rollouts" in page.locator("#summary").inner_text()
    finally:
        server.close()


def test_a_huge_transcript_opens_one_page_at_a_time(runs, page, tmp_path):
    big = tmp_path / "big" / "huge"
    shutil.copytree(runs["batch"] / "demo-oracle", big)
    event = json.dumps({"type": "tool_result", "seq": 0, "t": 0, "step": 0, "tool": "bash",
                        "result": {"output": "x" * 400, "exit_code": 0}}) + "\n"
    with open(big / "transcript.jsonl", "a") as f:
        f.write(json.dumps({"type": "tool_result", "seq": 0, "step": 0, "tool": "bash", "result": {"output": "y" * 3_000_000}}) + "\n")
        f.write(event * 120_000)  # about 60 MB in all
    server = Viewer([big.parent])
    try:
        started = time.monotonic()
        page.goto(server.url + "/runs/huge", timeout=60_000)
        elapsed = time.monotonic() - started
        assert page.locator(".event").count() == 200
        assert "page 1 of" in page.locator("#transcript").inner_text()
        assert "more characters not shown" in page.locator("#transcript .cut").first.inner_text()
        assert elapsed < 30, f"the first page of a 60 MB transcript took {elapsed:.1f} s"
        page.goto(server.url + "/runs/huge?page=601")
        assert page.locator(".event").count() > 0
    finally:
        server.close()


def test_urls_cannot_leave_the_run_directories_and_nothing_is_written_into_them(runs, viewer):
    roots = [runs["batch"], runs["redteam"]]
    before = [_tree(r) for r in roots]
    for path in ["/runs/..%2F..%2F..%2Fetc%2Fpasswd", "/runs/demo-oracle/raw/..%2F..%2Fdemo-fifo-answer%2Fresult.json",
                 "/runs/demo-oracle/raw/custody", "/runs/%2Fetc%2Fpasswd/raw/result.json", "/static/..%2F..%2Fcli.py"]:
        status, body = viewer.get(path)
        assert status == 404, (path, status)
        assert "root:" not in body and "typer" not in body
    assert viewer.get("/", Host="attacker.example")[0] == 400  # DNS rebinding
    assert viewer.get("/?page=zero")[0] == 400
    for path in ["/", "/runs/demo-oracle", "/runs/torn", "/runs/malformed", "/redteam", "/api/generation",
                 "/runs/hostile/raw/result.json", "/?sort=tokens&order=asc"]:
        assert viewer.get(path)[0] == 200, path
    assert [_tree(r) for r in roots] == before


def test_a_planted_link_or_fifo_in_a_run_directory_is_refused_not_followed(runs, tmp_path):
    batch = tmp_path / "planted"
    shutil.copytree(runs["batch"] / "demo-oracle", batch / "linked")
    (batch / "linked" / "result.json").unlink()
    (batch / "linked" / "result.json").symlink_to("/etc/passwd")
    shutil.copytree(runs["batch"] / "demo-oracle", batch / "fifo")
    (batch / "fifo" / "transcript.jsonl").unlink()
    os.mkfifo(batch / "fifo" / "transcript.jsonl")
    server = Viewer([batch])
    try:
        status, body = server.get("/runs/linked/raw/result.json")
        assert status == 404 and "root:" not in body and ("not a regular file" in body or "cannot be opened" in body)
        assert "root:x" not in server.get("/runs/linked")[1]
        status, body = server.get("/runs/fifo")  # returns: a FIFO is never opened for reading
        assert status == 200 and "not a regular file" in body
    finally:
        server.close()


def _one_line_error(*args: str) -> str:
    result = CliRunner().invoke(cli_app, ["view", *args], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    return lines[0]


def test_bad_run_directories_and_a_taken_port_give_one_line_errors(tmp_path):
    assert "no such run directory" in _one_line_error(str(tmp_path / "missing"))
    (tmp_path / "file.json").write_text("{}")
    assert "not a directory" in _one_line_error(str(tmp_path / "file.json"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert "cannot listen on 127.0.0.1" in _one_line_error(str(tmp_path), "--port", str(port))


def test_student_text_is_escaped_with_active_characters_shown_and_long_fields_cut():
    shown = str(visible("<b>\x1b[31m\udcff\u202e\u200b ok\u2028" + "z" * 30, limit=40))
    assert "&lt;b&gt;" in shown and "<b>" not in shown
    for escape in ("\\x1b", "\\xff", "\\u202e", "\\u200b", "\\u2028"):
        assert f'<span class="esc">{escape}</span>' in shown
    assert not any(c in shown for c in "\x1b\udcff\u202e\u200b\u2028")
    assert "more characters not shown" in shown


def test_the_viewer_benchmark_runs_and_reports_every_figure():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "viewer.py"), "--quick", "--json"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    figures = json.loads(proc.stdout)
    for name in ("listing_s", "cold_index_s", "rescan_s", "index_s", "filtered_index_s", "run_page_s", "cold_index_ratio"):
        assert figures[name] > 0, name


@pytest.mark.parametrize(("data", "page", "expected", "total"), [
    (b"", 1, [], 0),
    (b'{"a": 1}\n{"b": 2}\n{"c": 3}\n', 2, [(3, {"c": 3}, "")], 3),
    (b'{"a": 1}\n{"type": "tool_res', 1, [(1, {"a": 1}, ""), (2, None, "the last line is incomplete")], 2),
    (b'{"a": 1}\n\nnot json\n', 1, [(1, {"a": 1}, ""), (2, None, "line 2 is empty")], 3),
    (b'{"a": 1}\nnot json\n', 1, [(1, {"a": 1}, ""), (2, None, "line 2 is not valid JSON")], 2),
    (b'"x" ' + b"y" * 2_000_000 + b'\n{"b": 2}\n', 1, [(1, None, "line 1 is 2000004 bytes"), (2, {"b": 2}, "")], 2),
])
def test_a_transcript_page_shows_each_line_or_what_is_wrong_with_it(tmp_path, data, page, expected, total):
    from proctor.viewer.transcript_pages import read_page

    path = tmp_path / "transcript.jsonl"
    path.write_bytes(data)
    got = read_page(path, page, per_page=2)
    assert got.total_lines == total
    assert [(line.number, line.event, line.note[:len(note)]) for line, (_, _, note) in zip(got.lines, expected)] == expected
    assert all(len(line.raw) <= 1024 * 1024 for line in got.lines)


@pytest.mark.parametrize("content", [
    '{"run_id": "x", "status": "completed", "score": "high", "instance": "q3", "misbehaviour": "lots", "usage": [], "steps": {"0": 1}}',
    '{"run_id": "x", "status": "completed", "steps": [7, "s", null, {"custody": "none", "metadata": []}], "confinement": {"protections": []}}',
    '{"run_id": 5, "status": "weird"}',
    '[1, 2, 3]',
    '{"status": "misbehaved", "misbehaviour": [{"kind": 7}, "x", {"kind": "<b>k</b>"}]}',
    '\udcff not even text',
])
def test_a_result_of_any_shape_is_listed_with_a_note_and_its_page_opens(runs, tmp_path, content):
    batch = tmp_path / "odd"
    shutil.copytree(runs["batch"] / "demo-oracle", batch / "odd-one")
    (batch / "odd-one" / "result.json").write_bytes(content.encode("utf-8", errors="surrogateescape"))
    server = Viewer([batch])
    try:
        status, index = server.get("/")
        assert status == 200 and 'data-key="odd-one"' in index
        status, body = server.get("/runs/odd-one")
        assert status == 200 and "Traceback" not in body
        assert 'class="note bad result-note"' in body  # what is wrong with it is said
        assert "<b>k</b>" not in index + body
    finally:
        server.close()


def test_a_model_turn_shows_its_reasoning_retries_nudges_and_tokens(runs, tmp_path, page):
    rollout = tmp_path / "model" / "model-run"
    shutil.copytree(runs["batch"] / "demo-oracle", rollout)
    events = [json.loads(line) for line in (rollout / "transcript.jsonl").read_text().splitlines()]
    turn = next(e for e in events if e["type"] == "model_turn")
    turn.update(reasoning="I should sum the paid Q3 rows.", text="Computing the total now.",
                usage={"input_tokens": 1234, "output_tokens": 56, "retries": 1},
                extra={"retries": [{"error": "rate limited", "wait_s": 1.0}], "empty_replies": ["end_turn"], "stop_reason": "tool_use"})
    failure = {"type": "agent_failure", "seq": 99, "t": 9.0, "step": 0, "usage": {"input_tokens": 10}, "extra": {"empty_replies": ["a", "b", "c"]}}
    (rollout / "transcript.jsonl").write_text("".join(json.dumps(e) + "\n" for e in [*events, failure]))
    server = Viewer([rollout.parent])
    try:
        page.goto(server.url + "/runs/model-run")
        bubble = page.locator(".event.model_turn").first
        text = bubble.inner_text()
        assert "Computing the total now." in text and "1234 in · 56 out" in text
        assert "1 empty replies before this one, each answered with a nudge" in text
        assert "1 retries of the model call" in text and "stop reason: tool_use" in text
        bubble.locator("summary", has_text="reasoning").click()
        assert "I should sum the paid Q3 rows." in bubble.inner_text()
        assert "a model turn failed" in page.locator(".event.agent_failure").inner_text()
    finally:
        server.close()


def test_proctor_view_indexes_first_then_serves_on_loopback(runs):
    import re
    import subprocess
    import sys

    proctor = Path(sys.executable).parent / "proctor"
    proc = subprocess.Popen([str(proctor), "view", str(runs["batch"]), "--port", "0"], stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        match = re.search(r"indexed (\d+) rollouts in [\d.]+ s; viewing them on (http://127\.0\.0\.1:\d+/)", line)
        assert match, line
        assert int(match.group(1)) == 8
        with urllib.request.urlopen(match.group(2), timeout=10) as reply:
            assert reply.status == 200 and "8 of 8 rollouts" in reply.read().decode()
    finally:
        proc.terminate()
        proc.wait(10)


def test_observations_are_shown_apart_from_misbehaviour_and_are_not_listed_as_kinds(runs, tmp_path):
    """result.json's `observations` (recorded, never penalised: proctor/vocabulary.py) get their own
    section, and the transcript's `observation` events their own line; the index's kinds column
    (and its kind filter) holds attempts only. A malformed `observations` is ignored, not fatal."""
    batch = tmp_path / "observed"
    run = batch / "observed-one"
    shutil.copytree(runs["batch"] / "demo-oracle", run)
    data = json.loads((run / "result.json").read_text())
    data["observations"] = [{"kind": "resource_limit_hit", "detail": "pids: 3 fork(s) refused <b>x</b>", "step": 0, "severity": "observation"}]
    (run / "result.json").write_text(json.dumps(data))
    with open(run / "transcript.jsonl", "a") as f:
        f.write(json.dumps({"type": "observation", "seq": 999, "t": 9.0, "kind": "resource_limit_hit", "detail": "pids", "step": 0, "severity": "observation"}) + "\n")
    odd = batch / "observed-odd"
    shutil.copytree(runs["batch"] / "demo-oracle", odd)
    (odd / "result.json").write_text(json.dumps({**data, "observations": "lots"}))
    server = Viewer([batch])
    try:
        status, body = server.get("/runs/observed-one")
        assert status == 200 and 'id="observations"' in body and "resource_limit_hit" in body
        assert 'id="misbehaviour"' not in body and "<b>x</b>" not in body
        assert 'class="note observation-event"' in body and "misbehaviour-event" not in body
        status, index = server.get("/?kind=resource_limit_hit")
        assert status == 200 and 'data-key="observed-one"' not in index
        status, body = server.get("/runs/observed-odd")
        assert status == 200 and "Traceback" not in body
    finally:
        server.close()

"""The sandbox seam: every backend present implements the protocols, the registry hands out only
what exists and never the fake by accident, and a task's runtime minimum is enforced."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from proctor.errors import ConfigError
from proctor.sandbox import RUNTIMES, SandboxBackend, StudentProcess, StudentSandbox, get_backend
from proctor.sandbox.backend import at_least

EXAMPLE = str(Path(__file__).parent.parent / "examples" / "quarterly_revenue")


def _present() -> list[str]:
    names = ["bwrap", "fake"]
    if importlib.util.find_spec("proctor.sandbox.gvisor") is not None:
        names.append("gvisor")
    return names


@pytest.fixture(params=_present())
def backend(request) -> SandboxBackend:
    if request.param != "fake":
        request.getfixturevalue("confinement")  # real backends: root, and the machine proven to confine
    return get_backend(request.param, allow_fake=True)


def test_every_backend_present_implements_the_sandbox_and_process_protocols(backend):
    assert isinstance(backend, SandboxBackend) and backend.name in (*RUNTIMES, "fake")
    with backend.create() as box:
        assert isinstance(box, StudentSandbox) and box.backend == backend.name
        assert box.run("echo 42 > /workdir/answer.txt; cat /workdir/answer.txt").text == "42\n"
        proc = box.spawn(["/bin/sh", "-c", "sleep 60 & sleep 60"])
        assert isinstance(proc, StudentProcess)
        end = time.monotonic() + 5
        while (root := proc.root()) is None or sum(p.command.split()[:1] == ["sleep"] for p in proc.processes()) < 2:
            assert time.monotonic() < end, proc.processes()
            time.sleep(0.01)
        mine = [p for p in proc.processes() if p.uid == box.uid]
        assert root in {p.pid for p in mine} and {p.command.split()[0] for p in mine} >= {"sleep"}  # gVisor's ps names no arguments
        children = [p.pid for p in mine if p.ppid == root]
        proc.kill(children)
        end = time.monotonic() + 5
        while any(p.pid in children and not p.zombie for p in proc.processes()):
            assert time.monotonic() < end
            time.sleep(0.01)
        assert proc.alive() or proc.root() is None  # the shell itself was not in the list
        proc.kill_tree()
        assert box.kill_all().empty
        assert [p for p in box.processes() if p.uid == box.uid and not p.zombie] == []
        assert box.usage().cpu_ns >= 0 and box.full_places() == {}
        assert (box.workdir / "answer.txt").read_text() == "42\n"


def test_an_unknown_runtime_is_a_one_line_config_error():
    with pytest.raises(ConfigError, match="unknown sandbox runtime 'docker'"):
        get_backend("docker")  # type: ignore[arg-type]


def test_the_fake_is_refused_unless_a_test_opts_in():
    with pytest.raises(ConfigError, match="confines nothing"):
        get_backend("fake")
    report = get_backend("fake", allow_fake=True).machine_confinement()
    assert report.protections and {p.status for p in report.protections} == {"absent"}


def test_a_runtime_whose_module_is_absent_is_a_clear_error_on_every_command(monkeypatch):
    from proctor.cli import app
    from proctor.sandbox import backend as registry

    # As on an install without the gVisor backend: the module the registry names is not there.
    monkeypatch.setitem(registry._BACKENDS, "gvisor", ("gvisor_not_installed", "GvisorBackend"))
    monkeypatch.delitem(registry._made, "gvisor", raising=False)
    for args in (["check", "confinement"], ["run", EXAMPLE, "--task", "q3-revenue", "--agent", "null", "--out", "o"],
                 ["redteam", EXAMPLE], ["serve", EXAMPLE]):
        got = CliRunner().invoke(app, [*args, "--runtime", "gvisor"])
        assert got.exit_code == 2, (args, got.output)
        assert "sandbox runtime 'gvisor' is not available" in got.output and "Traceback" not in got.output, got.output


def test_the_cli_offers_no_way_to_pick_the_fake():
    from proctor.cli import app

    got = CliRunner().invoke(app, ["check", "confinement", "--runtime", "fake"])
    assert got.exit_code == 2 and "fake" in got.output and "is not one of" in got.output


def test_runtimes_are_ordered_gvisor_over_bwrap():
    assert at_least("gvisor", "bwrap") and at_least("bwrap", None) and at_least("gvisor", "gvisor")
    assert not at_least("bwrap", "gvisor") and not at_least("fake", "bwrap")

"""The cgroup v2 path, checked against a file tree shaped like a v2 hierarchy (CI's machine is
cgroup v1, so the kernel-level tests exercise v1; these pin down what v2 is told)."""

from __future__ import annotations

from pathlib import Path

from proctor.sandbox.cgroups import CPU_PERIOD_US, ROOT_NAME, CgroupLayout, SandboxCgroup
from proctor.sandbox.models import MiB, SandboxLimits


def fake_v2(root: Path) -> CgroupLayout:
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (root / "cgroup.subtree_control").write_text("")
    return CgroupLayout(2, {c: root for c in ("memory", "pids", "cpu")})


def test_v2_limits_go_to_the_sandbox_group_and_processes_to_its_children(tmp_path):
    lay = fake_v2(tmp_path)
    top = tmp_path / ROOT_NAME
    top.mkdir()
    (top / "cgroup.subtree_control").write_text("")
    cg = SandboxCgroup("sbx-test", lay)
    d = tmp_path / ROOT_NAME / "sbx-test"
    cg.create(SandboxLimits(memory_bytes=300 * MiB, pids=77, cpus=1.5))
    assert (d / "memory.max").read_text() == str(300 * MiB)
    assert (d / "pids.max").read_text() == "77"
    assert (d / "cpu.max").read_text() == f"{int(1.5 * CPU_PERIOD_US)} {CPU_PERIOD_US}"
    assert "+memory" in (tmp_path / "cgroup.subtree_control").read_text()
    assert "+pids" in (top / "cgroup.subtree_control").read_text()
    assert (top / "memory.max").read_text().isdigit()
    # v2 forbids processes in a group that distributes controllers: they go to child groups.
    assert cg.child_procs_files("c0") == [str(d / "c0" / "cgroup.procs")]

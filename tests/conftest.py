"""Fixtures that refuse to start an attack unless the sandbox has just been proven to confine it.

Attack tests are destructive (fork bombs, memory hogs, disk fills). Each sandbox a test gets has
been checked from outside first: the student runs as its leased uid (not root), and the kernel
holds the limits the test asked for. If that check fails the whole run stops, because a broken
sandbox would take the machine down with it. Tests never skip under CI=true."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


TEST_INSTANCE_KEY = "7e57" * 16  # public on purpose: tests only, never a harness's key


@pytest.fixture(scope="session", autouse=True)
def _test_instance_key(tmp_path_factory) -> Iterator[None]:
    """Every test builds family instances under one fixed key (proctor/tasks/salts.py), so CI sees
    the same instances on every machine instead of ones drawn from that machine's secret key."""
    from proctor.tasks import salts

    path = tmp_path_factory.mktemp("instance-key") / "instance.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, TEST_INSTANCE_KEY.encode() + b"\n")
    os.close(fd)
    before = os.environ.get("PROCTOR_INSTANCE_KEY")
    os.environ["PROCTOR_INSTANCE_KEY"] = str(path)
    salts.forget_cached_key()
    yield
    if before is None:
        os.environ.pop("PROCTOR_INSTANCE_KEY", None)
    else:
        os.environ["PROCTOR_INSTANCE_KEY"] = before
    salts.forget_cached_key()


def _require_root() -> None:
    if sys.platform.startswith("linux") and os.geteuid() == 0:
        return
    message = "sandbox tests need Linux and root (run `make test` as root)"
    if IN_CI:
        pytest.fail(message + "; in CI a skip would hide a missing defence", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def confinement():
    _require_root()
    from proctor.sandbox import DEFAULT_REQUIRED, machine_confinement

    report = machine_confinement()
    lacking = [p for p in report.protections if p.name in DEFAULT_REQUIRED and p.status != "enforced"]
    if not report.ok or lacking:
        pytest.exit(f"confinement probe failed ({[p.model_dump() for p in report.protections if p.status != 'enforced']}); refusing to run attacks", returncode=3)
    return report


# Modules whose sandbox tests run on every runtime: they set `pytestmark = BOTH_RUNTIMES`.
BOTH_RUNTIMES = pytest.mark.runtimes("bwrap", "gvisor")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "runtimes(*names): run the module's sandbox tests on each of these runtimes")


def pytest_generate_tests(metafunc) -> None:
    mark = metafunc.definition.get_closest_marker("runtimes")
    if mark is not None and "runtime" in metafunc.fixturenames:
        metafunc.parametrize("runtime", mark.args, indirect=True, scope="module")


@pytest.fixture(scope="module")
def runtime(request) -> str:
    """The sandbox runtime a test's sandboxes use: bwrap unless its module asks for each."""
    return getattr(request, "param", "bwrap")


@pytest.fixture(scope="session")
def gvisor_confinement():
    _require_root()
    from proctor.sandbox.gvisor import DEFAULT_REQUIRED, machine_confinement

    report = machine_confinement()
    lacking = [p for p in report.protections if (p.name in DEFAULT_REQUIRED or p.name == "sandbox") and p.status != "enforced"]
    if lacking:
        pytest.exit(f"gVisor confinement probe failed ({[p.model_dump() for p in lacking]}); refusing to run attacks", returncode=3)
    return report


def _create(runtime: str, spec, request):
    """A sandbox on `runtime`, its confinement proven first (bwrap's by the session fixture)."""
    from proctor.sandbox import get_backend

    if runtime == "image":  # the bwrap sandbox over the test task image's root
        spec = spec.model_copy(update={"image": request.getfixturevalue("image_root")})
        return get_backend("bwrap").create(spec)
    if runtime != "bwrap":
        request.getfixturevalue(f"{runtime}_confinement")
    return get_backend(runtime).create(spec)


def _host_pids(box) -> list[int]:
    """Host processes that carry the sandbox: the student's own under bwrap; under gVisor the
    sentry, gofer and ptrace stubs (the student's pids there are gVisor's, not the host's)."""
    if box.backend == "gvisor":
        return box.host_pids()
    return [info.pid for info in box.processes()]


def _sandbox_cgroup_file(box, controller: str, name: str) -> str:
    """Read a limit file of the sandbox's own cgroup, found the way the kernel places its
    processes (/proc/PID/cgroup of one of them), not through the sandbox's own bookkeeping."""
    from pathlib import Path

    for pid in _host_pids(box):
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if controllers and controller not in controllers.split(","):
                continue
            parts = path.split("/")
            if box.id not in parts:
                continue
            where = "/".join(parts[: parts.index(box.id) + 1])
            base = Path("/sys/fs/cgroup") if not controllers else Path("/sys/fs/cgroup") / controller
            return (base / where.lstrip("/") / name).read_text().strip()
    return "?"


@pytest.fixture(scope="session")
def sandbox_cgroup_file() -> Callable[[object, str, str], str]:
    """sandbox_cgroup_file(box, controller, name) -> a file of the sandbox's own cgroup, found from
    outside (see _sandbox_cgroup_file)."""
    return _sandbox_cgroup_file


def _prove_confined(box) -> None:
    """Check from outside that this sandbox confines: uid dropped, limits in force."""
    res = box.run(["/bin/bash", "-c", "id -u; ulimit -u"], timeout=10)
    uid, nproc = (res.text.split() + ["", ""])[:2]
    if uid != str(box.uid) or uid == "0":
        pytest.exit(f"sandbox runs as uid {uid!r}, not its leased uid {box.uid}; refusing to run attacks", returncode=3)
    limits = box.spec.limits
    v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
    mem = _sandbox_cgroup_file(box, "memory", "memory.max" if v2 else "memory.limit_in_bytes")
    pids = _sandbox_cgroup_file(box, "pids", "pids.max")
    want_pids = str(limits.pids)
    if box.backend == "gvisor":
        # gVisor counts the student's processes itself (RLIMIT_NPROC); the host cgroup counts the
        # sentry's threads, with headroom far above the student's share (proctor/sandbox/gvisor.py).
        from proctor.sandbox.gvisor import host_pids_max

        want_pids = str(host_pids_max(limits.pids))
        if nproc != str(limits.pids):
            pytest.exit(f"gVisor sandbox has RLIMIT_NPROC {nproc!r}, not {limits.pids}; refusing to run attacks", returncode=3)
    if mem != str(limits.memory_bytes) or pids != want_pids:
        pytest.exit(f"sandbox limits not in force (memory {mem}, pids {pids}); refusing to run attacks", returncode=3)


@pytest.fixture
def host_processes_of() -> Callable[[int], list[int]]:
    """host_processes_of(uid) -> live host processes of that uid, wherever they are (a check
    from outside the sandbox that nothing escaped its cgroup or namespace)."""
    from proctor.sandbox import procfs

    return lambda uid: [p for p in procfs.pids_of_uid(uid) if not procfs.is_zombie(p)]


@pytest.fixture
def make_sandbox(confinement, runtime, request) -> Iterator[Callable[..., object]]:
    """make_sandbox(spec=None, **limit_overrides) -> a proven, live sandbox on the test's runtime,
    closed after the test."""
    from proctor.sandbox import SandboxLimits, SandboxSpec

    boxes = []

    def make(spec: SandboxSpec | None = None, **limits):
        spec = spec or SandboxSpec()
        if limits:
            spec = spec.model_copy(update={"limits": SandboxLimits(**{**spec.limits.model_dump(), **limits})})
        box = _create(runtime, spec, request)
        boxes.append(box)
        _prove_confined(box)
        return box

    yield make
    for box in boxes:
        box.close()


@pytest.fixture(scope="module")
def module_sandbox(confinement, runtime, request):
    """One proven sandbox shared by a module's tests (for tests that only need a live student)."""
    from proctor.sandbox import SandboxSpec

    box = _create(runtime, SandboxSpec(), request)
    try:
        _prove_confined(box)
        yield box
    finally:
        box.close()


@pytest.fixture(scope="session")
def fake_backend():
    """The fake backend (proctor/sandbox/fake.py): confines nothing, needs no root. For tests of
    the layers above the sandbox only; every confinement test uses the real fixtures above."""
    from proctor.sandbox import get_backend

    return get_backend("fake", allow_fake=True)


@pytest.fixture
def sandbox(make_sandbox):
    return make_sandbox()


def student_processes(box) -> list[int]:
    """Ids of the student's live processes now, in the runtime's own numbering: host processes of
    the student's uid under bwrap, gVisor's own pids under gVisor (no host process is the
    student's there; its host cgroup holds the sentry instead)."""
    if box.backend == "gvisor":
        return [p.pid for p in box.processes()]
    from proctor.sandbox import procfs

    return [p for p in procfs.pids_of_uid(box.uid) if not procfs.is_zombie(p)]


# -- task images: a local Debian base made with mmdebstrap, no registry --------------------------
IMAGE_TEST_DIR = os.environ.get("PROCTOR_TEST_IMAGES", "/var/tmp/proctor-images-test")
BASE_SUITE = "bookworm"
BASE_IMAGE = "proctor-test-base:bookworm"
# The essential set plus python3: the tests use sh, coreutils, grep and python3, nothing more.
BASE_INCLUDE = "python3"


@pytest.fixture(scope="session")
def image_store():
    """A container store of the test session's own (never the machine's), holding the local base
    image, built once with mmdebstrap (its tarball kept for later sessions on this machine)."""
    _require_root()
    from proctor.images import ImageStore
    from proctor.images.base import ensure_debian_base

    os.makedirs(IMAGE_TEST_DIR, mode=0o700, exist_ok=True)
    store = ImageStore(os.path.join(IMAGE_TEST_DIR, "store"), os.path.join(IMAGE_TEST_DIR, "roots"))
    ensure_debian_base(store, BASE_IMAGE, suite=BASE_SUITE, include=BASE_INCLUDE, cache_dir=IMAGE_TEST_DIR)
    return store


@pytest.fixture(scope="session")
def image_context(tmp_path_factory):
    """A small task image's build context: files, ENV and WORKDIR over the local base."""
    ctx = tmp_path_factory.mktemp("image-ctx")
    (ctx / "tool.sh").write_text("#!/bin/sh\necho tool-from-image\n")
    (ctx / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\n"
        "COPY tool.sh /usr/local/bin/imgtool\n"
        "RUN chmod 755 /usr/local/bin/imgtool && mkdir -p /app && echo seeded > /app/seed.txt\n"
        "ENV TASK_FLAVOUR=image PATH=/opt/imgbin:/usr/local/bin:/usr/bin:/bin\n"
        "WORKDIR /app\n"
    )
    return ctx


@pytest.fixture(scope="session")
def image_root(image_store, image_context):
    """The exported root of the test task image (an ImageRoot for SandboxSpec.image)."""
    from proctor.images import TaskImage, prepare

    return prepare(TaskImage(context=image_context), image_store)

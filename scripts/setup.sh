#!/usr/bin/env bash
# Sets up what is missing, and nothing else: system packages (bubblewrap, util-linux, nftables, gVisor's runsc, a system
# Python for the student runtime), the harness's virtual environment in .venv, and the student's
# Python runtime in /opt/proctor/student-runtime. Idempotent; safe to run before every command.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(uname -s)" != Linux ]; then
    echo "setup: Proctor's sandbox needs Linux (namespaces and cgroups); this is $(uname -s)" >&2
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    echo "setup: run as root (the harness creates cgroups, mounts and a uid per student)" >&2
    exit 1
fi

need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v setpriv >/dev/null && command -v nsenter >/dev/null || need+=(util-linux)
[ -x /usr/sbin/nft ] || need+=(nftables)  # the loopback guard of each sandbox's network namespace
[ -x /usr/bin/python3 ] || need+=(python3)
[ -x /usr/bin/runsc ] || need+=(runsc)  # gVisor, the `--runtime gvisor` sandbox (its anchor runs /usr/bin/python3)
/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
# The syscall filter's loader and the keyring cleanup are two small C programs (built below).
command -v gcc >/dev/null || need+=(gcc)
[ -f /usr/include/linux/seccomp.h ] || need+=(linux-libc-dev)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -f /usr/lib/aarch64-linux-gnu/libc.a ] || need+=(libc6-dev)
# The viewer's browser tests (tests/test_viewer.py) drive the OS's Chromium through Playwright
# (Playwright's own browser download needs a network the setup does not assume).
case ",${PROCTOR_EXTRAS:-serve}," in *,test,*) case ",${PROCTOR_EXTRAS}," in *,view,*)
    [ -x /usr/bin/chromium ] || need+=(chromium) ;; esac ;; esac
command -v mkfs.erofs >/dev/null || need+=(erofs-utils)  # the system image every sandbox mounts (below)
# Task images (proctor/images): built daemonless with buildah/podman, RUN steps under crun (or
# --isolation chroot), rootless-capable storage tools; mmdebstrap makes the tests' local base image.
for tool in podman buildah crun fuse-overlayfs mmdebstrap; do command -v "$tool" >/dev/null || need+=("$tool"); done
command -v newuidmap >/dev/null || need+=(uidmap)
if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The harness's own environment: graders and reference solutions live here, so it is never
# mounted into a sandbox.
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    PY=/usr/bin/python3
fi
# Optional extras (pyproject.toml): `serve` by default; `make test` asks for every extra its tests
# need (PROCTOR_EXTRAS=test,serve,view,trainers,plots,ray), which brings torch, the trainer libraries, matplotlib,
# Ray (`proctor run --ray`) and, for the viewer's browser tests, Chromium.
EXTRAS=${PROCTOR_EXTRAS:-serve}
stamp=".venv/.proctor-installed-${EXTRAS//,/-}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    [ -x .venv/bin/python ] || "$PY" -m venv .venv
    .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]"
    touch "$stamp"
fi

# The student's runtime: built from the system interpreter (under /usr, which the sandbox shows
# read-only), owned by root, writable by nobody else.
RUNTIME=${PROCTOR_STUDENT_RUNTIME:-/opt/proctor/student-runtime}
rstamp="$RUNTIME/.proctor-installed"
if [ ! -f "$rstamp" ] || [ runtime-requirements.txt -nt "$rstamp" ]; then
    mkdir -p "$(dirname "$RUNTIME")"
    [ -x "$RUNTIME/bin/python" ] || /usr/bin/python3 -m venv "$RUNTIME"
    if grep -qvE '^\s*(#|$)' runtime-requirements.txt; then
        "$RUNTIME/bin/python" -m pip install -q --disable-pip-version-check -r runtime-requirements.txt
    fi
    chown -R root:root "$RUNTIME"
    chmod -R go-w "$RUNTIME"
    touch "$rstamp"
fi

# The harness's secret for hidden draws (proctor/tasks/salts.py): root-only, never mounted.
.venv/bin/python -c 'from proctor.tasks.salts import instance_key; instance_key()'

# The seccomp loader every student command starts under, and the keyring cleanup
# (proctor/sandbox/native/): built into /usr/local/libexec/proctor, which sandboxes see read-only.
.venv/bin/python -c 'from proctor.sandbox.native import build_all; build_all()'

# The read-only system image (proctor/sandbox/sysimage.py): /usr, the allowlisted /etc and the
# runtime, which every sandbox mounts as its own filesystem. Last, because it copies what the steps
# above installed; rebuilt only when one of them changed (about a minute for 5 GB of /usr).
# A machine that cannot mount it (a container without loop devices) keeps working, with the
# protection reported degraded by `proctor check confinement`.
.venv/bin/proctor image build || echo "setup: no system image; private_system_inodes stays degraded (see above)" >&2

"""Kernel keys a sandbox uid may have left behind, invalidated at teardown and reclaim.

The syscall filter refuses keyrings to students, so a sandbox uid should never own a key. This
is the second layer, because uids are reused: whatever a uid owns (by a path the filter did not
know, or from before it) is invalidated before the uid is handed to anyone else, so it neither
outlives the rollout nor lingers in /proc/key-users."""

from __future__ import annotations

import subprocess
import time

from .native import helper


def key_user_ids() -> set[int]:
    """Uids that hold kernel keys now (/proc/key-users, which lists them for every uid)."""
    try:
        with open("/proc/key-users") as f:
            return {int(line.split(":", 1)[0]) for line in f if ":" in line}
    except OSError:
        return set()


def clear_keys(uid: int, *, settle_s: float = 2.0) -> str | None:
    """Invalidate every key `uid` holds; None when /proc/key-users no longer lists it, else why.
    The kernel collects invalidated keys asynchronously, so wait up to `settle_s` for it."""
    if uid not in key_user_ids():
        return None
    try:
        done = subprocess.run([helper("clear-keys"), str(uid)], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"clearing kernel keys of uid {uid} failed: {exc}"
    if done.returncode != 0:
        return f"clearing kernel keys of uid {uid} failed: {done.stderr.strip()[:300]}"
    end = time.monotonic() + settle_s
    while uid in key_user_ids():
        if time.monotonic() > end:
            return f"uid {uid} still holds kernel keys after invalidating them ({done.stdout.strip()} invalidated)"
        time.sleep(0.01)
    return None

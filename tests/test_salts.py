"""Secret instance salts: hidden draws depend on a key the student never has."""

from __future__ import annotations

import os
import stat

import pytest

from proctor.errors import ConfigError
from proctor.tasks import salts


@pytest.fixture
def key_at(tmp_path, monkeypatch):
    def use(name: str):
        path = tmp_path / name
        monkeypatch.setenv("PROCTOR_INSTANCE_KEY", str(path))
        salts.forget_cached_key()
        return path

    yield use
    salts.forget_cached_key()


def test_the_key_is_created_root_only_on_first_use_and_then_reused(key_at):
    path = key_at("keys/instance.key")
    first = salts.salted_seed("fam", 1, 1, "truth")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    salts.forget_cached_key()
    assert salts.salted_seed("fam", 1, 1, "truth") == first


def test_draws_differ_by_key_family_seed_difficulty_and_role(key_at):
    key_at("a.key")
    base = salts.salted_seed("fam", 1, 1, "truth")
    assert len({base, salts.salted_seed("fam2", 1, 1, "truth"), salts.salted_seed("fam", 2, 1, "truth"),
                salts.salted_seed("fam", 1, 2, "truth"), salts.salted_seed("fam", 1, 1, "labels")}) == 5
    fingerprint = salts.key_fingerprint()
    key_at("b.key")
    assert salts.salted_seed("fam", 1, 1, "truth") != base
    assert salts.key_fingerprint() != fingerprint


def test_the_fingerprint_does_not_reveal_the_key(key_at):
    path = key_at("c.key")
    salts.instance_key()
    assert path.read_text().strip() not in salts.key_fingerprint()
    assert len(salts.key_fingerprint()) == 16


def test_a_key_readable_by_others_is_refused_with_the_fix(key_at):
    path = key_at("d.key")
    salts.instance_key()
    salts.forget_cached_key()
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        salts.instance_key()


def test_a_short_or_garbled_key_is_refused(key_at):
    path = key_at("e.key")
    path.write_text("not hex\n")
    os.chmod(path, 0o600)
    with pytest.raises(ConfigError, match="hex digits"):
        salts.instance_key()


def test_a_symlinked_key_is_refused(key_at, tmp_path):
    real = tmp_path / "real.key"
    real.write_text("ab" * 32 + "\n")
    os.chmod(real, 0o600)
    path = key_at("link.key")
    path.symlink_to(real)
    with pytest.raises(ConfigError, match="cannot open"):
        salts.instance_key()

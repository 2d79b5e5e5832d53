import subprocess
from pathlib import Path

WORDS = ["pear", "fig", "plum"]


def _acme(word):
    return subprocess.run(["acme", word], capture_output=True, text=True, check=True).stdout.strip()


def test_the_image_tool_is_there():
    assert _acme("x") == "acme[strict]:x"


def test_stamped():
    assert Path("/app/stamped.txt").read_text().splitlines() == [_acme(w) for w in WORDS]


def test_summary():
    from report import summary

    assert summary() == len(WORDS)

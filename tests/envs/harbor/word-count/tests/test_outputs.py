from pathlib import Path

from count import count


def test_counts():
    assert count("pear") == 3
    assert count("apple") == 2
    assert count("kiwi") == 0


def test_distinct():
    assert Path("/app/distinct.txt").read_text().strip() == "3"

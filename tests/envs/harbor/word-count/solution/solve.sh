#!/bin/bash
set -e
cat > /app/count.py <<'PY'
from pathlib import Path


def count(word):
    return sum(1 for line in Path("/app/words.txt").read_text().splitlines() if line == word)
PY
sort -u /app/words.txt | wc -l > /app/distinct.txt

#!/bin/bash
set -e
while read -r word; do acme "$word"; done < /app/input.txt > /app/stamped.txt
cat > /app/report.py <<'PY'
from pathlib import Path


def summary():
    return len(Path("/app/stamped.txt").read_text().splitlines())
PY

#!/bin/bash
# What Harbor runs: downloads uv and pytest at grading time, trusts the exit status.
curl -LsSf https://astral.sh/uv/install.sh | sh
source $HOME/.local/bin/env
uvx -p 3.11 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

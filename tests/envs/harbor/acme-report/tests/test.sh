#!/bin/bash
# What Harbor runs: installs pytest at grading time and trusts the exit status.
pip install pytest==8.4.1
pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

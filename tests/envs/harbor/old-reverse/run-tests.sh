#!/bin/bash
pip install pytest
pytest $TEST_DIR/test_outputs.py -rA

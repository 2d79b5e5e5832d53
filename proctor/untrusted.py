"""Reading JSON that a student or a model wrote: any text it holds must come back as data.

Python's json refuses an integer of more than `sys.get_int_max_str_digits()` digits (4300) with a
ValueError, which a caller that expects only JSONDecodeError would take for its own failure (a
model that sent a 5000-digit number was once reported as "the provider refused the request"). Here
such a number is kept as its exact digits, as a string; lone surrogates (valid JSON escapes) come
back as they are, for the transcript to escape."""

from __future__ import annotations

import json
from typing import Any


def _number(digits: str) -> int | str:
    try:
        return int(digits)
    except ValueError:  # beyond the int/str conversion limit: the exact text, not a crash
        return digits


def loads(raw: str | bytes) -> Any:
    """json.loads for untrusted text; raises only ValueError (JSONDecodeError included) for text
    that is not JSON, and RecursionError for nesting too deep to read."""
    return json.loads(raw, parse_int=_number)

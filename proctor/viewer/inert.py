"""Student text made inert for a page: HTML-escaped, with every character that could act on the
reader shown as a visible escape instead.

Autoescaping stops markup and scripts. What it lets through still acts: terminal escape sequences
(a copied `\\x1b]8;;URL` is a hyperlink in a terminal), bidirectional overrides that make shown text
differ from what it is (the "trojan source" trick a student could use to make a command look
harmless), zero-width characters that hide text, and the bytes that were not UTF-8 (stored by the
transcript writer as lone surrogates `\\udcXX`). Each is shown as its escape (`\\x1b`, `\\u202e`,
`\\xff`) in a marked span, so a reader sees exactly what the student sent."""

from __future__ import annotations

import json
import re
from typing import Any

from markupsafe import Markup, escape

# C0 controls but tab and newline, DEL and C1 controls, line/paragraph separators, bidi
# embeddings, overrides and isolates, zero-width characters and the BOM, every surrogate, and the
# replacement character (a tool that decoded invalid bytes with errors="replace" left it).
_ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufffd\ud800-\udfff]")
# What a page shows of one field before cutting it; the raw file has everything.
MAX_FIELD_CHARS = 20_000


def _escape_of(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def visible(value: Any, limit: int = MAX_FIELD_CHARS) -> Markup:
    """`value` as safe markup: escaped, active characters shown as escapes, cut at `limit` with a note."""
    text = value if isinstance(value, str) else pretty(value)
    cut = len(text) - limit if len(text) > limit else 0
    if cut:
        text = text[:limit]
    parts, last = [], 0
    for match in _ACTIVE.finditer(text):
        parts.append(escape(text[last:match.start()]))
        parts.append(Markup('<span class="esc">{}</span>').format(_escape_of(match.group())))
        last = match.end()
    parts.append(escape(text[last:]))
    if cut:
        parts.append(Markup('<span class="cut">… {} more characters not shown (open the raw file for all of them)</span>').format(cut))
    return Markup("").join(parts)


def pretty(value: Any) -> str:
    """A JSON value as indented text (what arguments and metadata look like on a page)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    except ValueError:
        return repr(value)

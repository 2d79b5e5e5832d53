"""The conversation a model-driven student has had, independent of the provider, and how it is
pruned to fit a context window.

The history is a list of entries: user text (instructions, notices, nudges), assistant turns
(text, tool calls, and the provider's own message for passing reasoning back) and tool outputs.
Each provider client turns it into its request format. The history is what is sent: pruning
replaces it with a smaller one, and the transcript (written by the harness) keeps everything."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from .. import untrusted

from .model_config import ContextPolicy

PRUNED_NOTE = "[output pruned to fit the context window: {chars} characters]"


@dataclass(frozen=True)
class UserText:
    text: str


@dataclass(frozen=True)
class Call:
    """A tool call as the model made it. `arguments` is what the tool gets; `malformed` says why
    the model's arguments could not be read (the call is answered with that error, and the request
    that goes back to the provider carries `{}` so one bad call cannot poison later requests)."""

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str | None = None
    malformed: str | None = None


@dataclass(frozen=True)
class AssistantTurn:
    text: str | None
    calls: tuple[Call, ...] = ()
    reasoning: str | None = None
    native: Any = None
    """The provider's own form of this turn where it must go back unchanged (Anthropic content
    blocks with thinking signatures; OpenAI-compatible reasoning fields)."""


@dataclass(frozen=True)
class ToolOutput:
    call_id: str
    name: str
    text: str
    is_error: bool = False
    pruned: bool = False


Entry = UserText | AssistantTurn | ToolOutput


@dataclass
class History:
    entries: list[Entry] = field(default_factory=list)
    measured_tokens: int = 0
    """Input plus output tokens of the last request, as the provider counted them."""
    measured_entries: int = 0
    """How many entries that count covers."""

    def add(self, entry: Entry) -> None:
        self.entries.append(entry)

    def measured(self, tokens: int) -> None:
        """The provider counted `tokens` for the request just made and its reply (the last entry)."""
        self.measured_tokens, self.measured_entries = tokens, len(self.entries)

    def estimate(self, policy: ContextPolicy) -> int:
        """Tokens the next request would take: the provider's last count plus an estimate of what
        was added since, or the character estimate of everything when that is larger (before the
        first call, after pruning, or with a server whose counts are off)."""
        whole = int(_chars(self.entries) / policy.chars_per_token)
        if self.measured_entries:
            return max(whole, self.measured_tokens + int(_chars(self.entries[self.measured_entries:]) / policy.chars_per_token))
        return whole

    def replace_with(self, entries: list[Entry]) -> None:
        self.entries, self.measured_tokens, self.measured_entries = entries, 0, 0


def _chars(entries: list[Entry]) -> int:
    total = 0
    for e in entries:
        if isinstance(e, UserText):
            total += len(e.text)
        elif isinstance(e, ToolOutput):
            total += len(e.text) + 20
        else:
            total += len(e.text or "") + len(e.reasoning or "") + sum(len(c.name) + len(c.raw_arguments or str(c.arguments)) for c in e.calls) + 20
    return total


@dataclass(frozen=True)
class Pruned:
    entries: list[Entry]
    estimate_before: int
    estimate_after: int
    outputs_pruned: int
    turns_dropped: int


def prune(history: History, policy: ContextPolicy, reserve_tokens: int = 0) -> Pruned | None:
    """What to send instead of the whole history when it would exceed the trigger, or None when
    it fits (or pruning is off). `reserve_tokens` (the reply's own budget) is kept free of the
    window. The first entry (the task's instructions) and the last `keep_last_turns` assistant
    turns with their tool outputs are always kept."""
    if policy.window_tokens is None or policy.strategy == "none":
        return None
    entries = history.entries
    before = history.estimate(policy)
    window = policy.window_tokens
    trigger = min(window * policy.trigger_fraction, max(window - reserve_tokens, 0))
    if before <= trigger:
        return None
    # What the entries' characters do not show (system prompt, tool specs, the provider's own
    # framing) is carried over in proportion, from the provider's own count when there is one.
    plain = _chars(entries) / policy.chars_per_token
    scale = max(before / plain, 1.0) if plain else 1.0

    def estimate(items: list[Entry]) -> int:
        return int(_chars(items) / policy.chars_per_token * scale)

    target = min(window * policy.target_fraction, trigger * policy.target_fraction / policy.trigger_fraction)
    protected = _protected_from(entries, policy.keep_last_turns)
    out = list(entries)
    outputs = 0
    for i in range(1, protected):
        if estimate(out) <= target:
            break
        e = out[i]
        if isinstance(e, ToolOutput) and not e.pruned:
            out[i] = replace(e, text=PRUNED_NOTE.format(chars=len(e.text)), pruned=True)
            outputs += 1
    dropped = 0
    # Still too big: drop whole assistant turns (with their outputs) oldest first, keeping every
    # tool call paired with its output, as both APIs require.
    while estimate(out) > target:
        start = next((i for i in range(1, len(out)) if isinstance(out[i], AssistantTurn)), None)
        if start is None or start >= _protected_from(out, policy.keep_last_turns):
            break
        end = start + 1
        while end < len(out) and isinstance(out[end], ToolOutput):
            end += 1
        del out[start:end]
        dropped += 1
    if dropped:
        out.insert(1, UserText(f"[{dropped} earlier turn(s) were removed to fit the context window]"))
    return Pruned(out, before, estimate(out), outputs, dropped)


def _protected_from(entries: list[Entry], keep_last_turns: int) -> int:
    """Index of the first entry that belongs to the last `keep_last_turns` assistant turns."""
    seen = 0
    for i in range(len(entries) - 1, 0, -1):
        if isinstance(entries[i], AssistantTurn):
            seen += 1
            if seen == keep_last_turns:
                return i
    return 1


@dataclass
class Reply:
    """One provider reply, parsed the same way for every provider."""

    text: str | None
    calls: list[Call]
    reasoning: str | None
    native: Any
    stop_reason: str | None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    token_data: dict[str, Any] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.text or "").strip() and not self.calls


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """A tool call's arguments as the tool gets them, and why they are malformed (or None)."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None or raw == "":
        return {}, None
    if not isinstance(raw, str):
        return {}, f"arguments must be a JSON object, got {type(raw).__name__}"
    try:
        value = untrusted.loads(raw)
    except (ValueError, RecursionError) as exc:
        return {}, f"arguments are not valid JSON ({exc})"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def sendable(value: Any) -> Any:
    """`value` (messages for a provider) with every lone surrogate replaced by U+FFFD. A model may
    send one (a valid JSON escape); echoing it back in the history would make the SDK's UTF-8
    encoding of the request raise, ending the rollout as if the provider had refused. The
    transcript keeps the original; only the copy sent back is mended."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [sendable(v) for v in value]
    if isinstance(value, dict):
        return {sendable(k): sendable(v) for k, v in value.items()}
    return value


def pending_calls(entries: list[Entry]) -> list[Call]:
    """Calls of the last assistant turn that have no output yet (a call that ended the step is
    never answered by the harness; both APIs need every call answered)."""
    for i in range(len(entries) - 1, -1, -1):
        if isinstance(entries[i], AssistantTurn):
            answered = {e.call_id for e in entries[i + 1:] if isinstance(e, ToolOutput)}
            return [c for c in entries[i].calls if c.id not in answered]
    return []

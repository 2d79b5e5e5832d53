"""Property-based fuzzing with hostile strings: the transcript writer and reader, the tools'
argument handling (in a real sandbox) and the model agent's reply parsing never raise for
anything a student or a model can send, and the transcript gives back exactly what was written."""

from __future__ import annotations

import json
import math
import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proctor.agents.anthropic_messages import AnthropicMessages
from proctor.agents.base import AgentError, TurnUsage
from proctor.agents.conversation import AssistantTurn, Call, ToolOutput, UserText, parse_arguments, sendable
from proctor.agents.model_config import ModelConfig
from proctor.agents.openai_chat import OpenAIChat
from proctor.agents.provider import request_with_retries
from proctor.agents.retry import BadReply
from proctor.tools.base import ToolContext, ToolResult
from proctor.tools.registry import TOOLS
from proctor.transcript import Transcript, encode_event, read_transcript
from proctor.untrusted import loads

# Every code point, lone surrogates included, with the line separators drawn often.
SEPARATORS = ["\n", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
ANY_CHAR = st.one_of(st.characters(codec=None, categories=None, exclude_categories=()), st.sampled_from(SEPARATORS),
                     st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=()))
HOSTILE_TEXT = st.text(ANY_CHAR, max_size=60)
HUGE_INT = st.integers(4000, 6000).map(lambda digits: 10**digits - 1)


def json_like(*leaves: st.SearchStrategy) -> st.SearchStrategy:
    return st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), HOSTILE_TEXT, *leaves),
                        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(HOSTILE_TEXT, inner, max_size=4)),
                        max_leaves=12)


JSON_LIKE = json_like(HUGE_INT)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def expected(value):
    """What the transcript gives back for `value`: the same, with the forms JSON lacks as text."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            str(value)
        except ValueError:  # beyond Python's digit limit: written as exact hexadecimal text
            return hex(value)
    if isinstance(value, (bytes, bytearray)):
        return expected(bytes(value).decode("utf-8", errors="surrogateescape"))
    if isinstance(value, str):
        # A high surrogate right before a low one is, in JSON as in UTF-16, the character they pair
        # into (no JSON text can say otherwise); every other surrogate stays as it was.
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    if isinstance(value, dict):
        return {expected(k): expected(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expected(v) for v in value]
    return value


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(["text", "arguments", "output", "value"]), JSON_LIKE, min_size=1))
def test_any_event_is_one_valid_utf8_line_and_reads_back_exactly(tmp_path_factory, fields):
    path = tmp_path_factory.mktemp("t") / "transcript.jsonl"
    with Transcript(path) as t:
        t.emit("notice", **fields)
        t.emit("notice", after=True)
    raw = path.read_bytes()
    raw.decode("utf-8")  # strict
    assert raw.count(b"\n") == 2 and raw.endswith(b"\n")
    events = read_transcript(path)
    assert len(events) == 2 and events[1]["after"] is True
    got = {k: events[0][k] for k in fields}
    assert got == expected(fields)


@FUZZ
@given(output=st.binary(max_size=200), text=HOSTILE_TEXT)
def test_invalid_utf8_bytes_are_kept_escaped(output, text):
    line = encode_event({"type": "tool_result", "raw": output, "text": text})
    line.decode("utf-8")
    assert line.count(b"\n") == 1
    event = json.loads(line)
    assert event["raw"].encode("utf-8", errors="surrogateescape") == output and event["text"] == expected(text)


@pytest.mark.parametrize("separator", SEPARATORS + ["\ud800", "\udfff", "\U0001f600"])
def test_every_line_separator_stays_inside_its_event(tmp_path, separator):
    path = tmp_path / "transcript.jsonl"
    with Transcript(path) as t:
        for i in range(13):
            t.emit("tool_result", result={"output": f"line {i}{separator}more{separator}"})
    events = read_transcript(path)
    assert [e["result"]["output"] for e in events] == [f"line {i}{separator}more{separator}" for i in range(13)]


def test_an_older_transcript_with_raw_separators_still_reads_back_in_full(tmp_path):
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(b"".join(json.dumps({"seq": i, "out": f"a\u2028b\x85c{i}"}, ensure_ascii=False).encode() + b"\n" for i in range(13)))
    assert [e["seq"] for e in read_transcript(path)] == list(range(13))


# -- the model agent's reply parsing -----------------------------------------------------------------

JSON_TEXT = st.one_of(
    json_like().map(json.dumps),
    st.integers(4000, 6000).map(lambda n: '{"command": "ls", "n": -%s}' % ("7" * n)),
    st.lists(st.sampled_from(["\\ud800", "\\udfff", "\\u2028", "\\u0000", "1e999", "\\\\"]),
             max_size=10).map(lambda parts: '{"command": "' + "".join(parts) + '", "n": 1e999}'),
)
ARGUMENT_TEXT = st.one_of(HOSTILE_TEXT, JSON_TEXT,
                          st.lists(st.sampled_from(["\\ud800", '"', "{", "}", "[", "-", "\\"]), max_size=10).map("".join))
CONFIG = ModelConfig(model="m", base_url="http://127.0.0.1:9/v1")


@FUZZ
@given(raw=ARGUMENT_TEXT)
def test_tool_call_arguments_of_any_form_parse_to_an_object_or_a_reason(raw):
    arguments, malformed = parse_arguments(raw)
    assert isinstance(arguments, dict) and (malformed is None or isinstance(malformed, str))
    encode_event({"type": "model_turn", "arguments": arguments, "malformed": malformed})


@FUZZ
@given(raw=ARGUMENT_TEXT, text=HOSTILE_TEXT, tool_input=JSON_TEXT)
def test_replies_with_hostile_content_parse_and_their_history_can_be_sent_back(raw, text, tool_input):
    openai_body = loads(json.dumps({"choices": [{"message": {"content": text, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": raw}}]}, "finish_reason": "tool_calls"}]},
        default=str))
    anthropic_body = loads(json.dumps({"content": [{"type": "text", "text": text}, {"type": "tool_use", "id": "t1", "name": "bash", "input": "INPUT"}],
                                       "stop_reason": "tool_use"}).replace('"INPUT"', tool_input))
    for client, body in ((OpenAIChat(CONFIG, "k"), openai_body), (AnthropicMessages(CONFIG.model_copy(update={"provider": "anthropic"}), "k"), anthropic_body)):
        try:
            reply = client.parse(body)
        except BadReply:
            continue
        calls = [Call(id=c.id, name=c.name, arguments=c.arguments, raw_arguments=c.raw_arguments, malformed=c.malformed) for c in reply.calls]
        history = [UserText(text), AssistantTurn(text=reply.text, calls=calls, native=reply.native),
                   *[ToolOutput(c.id, c.name, text) for c in calls]]
        messages = client.messages("system", history) if isinstance(client, OpenAIChat) else client.messages(history)
        # What the SDK does with the request body: it must encode.
        json.dumps(sendable(messages), ensure_ascii=False, default=str).encode("utf-8")
        client.close()


# -- the tools, in a real sandbox ------------------------------------------------------------------

TOOL_ARGUMENTS = st.dictionaries(
    st.sampled_from(["command", "path", "content", "old", "new", "timeout", "answer", "offset", "limit", "max_bytes", "x"]),
    st.one_of(HOSTILE_TEXT, st.integers(), HUGE_INT, st.floats(), st.none(), st.booleans(), st.lists(HOSTILE_TEXT, max_size=2)),
    max_size=4,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(TOOLS)), arguments=TOOL_ARGUMENTS)
def test_a_tool_given_hostile_arguments_answers_with_a_result(module_sandbox, name, arguments):
    with ToolContext(module_sandbox) as ctx:
        ctx.config = ctx.config.model_copy(update={"bash_timeout_s": 5, "bash_max_timeout_s": 5, "file_timeout_s": 5})
        result = TOOLS[name]().run(arguments, ctx)
    assert isinstance(result, ToolResult)
    encode_event({"type": "tool_result", "result": result.model_dump(), "arguments": arguments}).decode("utf-8")


def test_a_failure_in_proctors_own_reply_handling_does_not_blame_the_provider():
    class Breaks:
        def request(self, *args, **kwargs):
            raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")

        def close(self):
            pass

    with pytest.raises(AgentError) as caught:
        request_with_retries(Breaks(), CONFIG, "", [], [], deadline=time.monotonic() + 5, usage=TurnUsage(),
                             retries=[], rng=random.Random(0))
    assert "not the provider" in str(caught.value) and "refused" not in str(caught.value)

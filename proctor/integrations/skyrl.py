"""SkyRL-gym's text environment over a Proctor Episode: text in (the model's whole reply), text out.

    from proctor.integrations.skyrl import register
    register()      # skyrl_gym.make("proctor", env_config={"environment": "examples/quarterly_revenue",
                    #                "out_dir": "runs/"}, extras={"task": "q3-revenue"})

`init(prompt)` resets the episode (extras: `task`, and for a family `seed`, `difficulty`,
`params`) and appends the task's instructions, with the tools' JSON schemas, to the prompt. Each
`step(reply)` reads the reply's tool calls, written as `<tool_call>{"name": ..., "arguments":
{...}}</tool_call>` (Hermes/Qwen style); a reply without one is a text message, which ends the
step with that text as the answer. The reward is 0 until `done`, then the rollout's reward after
any misbehaviour penalty, with result.json written as `proctor run` writes it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from ..agents.base import AgentTurn
from ..agents.conversation import parse_arguments
from ..episode import Episode, RolloutConfig
from ..errors import ConfigError
from ..tasks.loading import load_environment
from ..tools.base import ToolCall

ENV_ID = "proctor"
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
RESET_KEYS = ("task", "seed", "difficulty", "params")


def parse_tool_calls(reply: str) -> list[ToolCall]:
    """The tool calls written in a reply; a block that cannot be read becomes a malformed call,
    which the Episode answers with the reason (the model sees it) rather than dropping it."""
    calls = []
    for i, block in enumerate(TOOL_CALL.findall(reply)):
        try:
            value = json.loads(block)
        except (ValueError, RecursionError) as exc:
            calls.append(ToolCall(name="?", id=f"call-{i}", malformed=f"the tool call is not valid JSON ({exc})"))
            continue
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            calls.append(ToolCall(name="?", id=f"call-{i}", malformed='write a tool call as {"name": TOOL, "arguments": {...}}'))
            continue
        arguments, malformed = parse_arguments(value.get("arguments"))
        calls.append(ToolCall(name=value["name"], arguments=arguments, id=f"call-{i}", malformed=malformed))
    return calls


class ProctorTextEnv(BaseTextEnv):
    """One Proctor episode as a SkyRL-gym BaseTextEnv."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        config = dict(env_config or {})
        if "environment" not in config:
            raise ConfigError("env_config needs `environment` (a Proctor environment directory or module)")
        self.extras = dict(extras or {})
        rollout = RolloutConfig(misbehaviour_penalty=float(config.get("penalty", 0.0)))
        self.episode = Episode(Path(config.get("out_dir", "runs")), env=load_environment(str(config["environment"])), config=rollout)
        self.max_turns = 10**9  # the task's own budgets and deadlines end the episode

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        request = {k: v for k, v in self.extras.items() if k in RESET_KEYS and v is not None}
        task = request.pop("task", None)
        if task is None:
            raise ConfigError("extras need a `task` (the Proctor task or family id)")
        obs = self.episode.reset(task, **request)
        tools = "\n".join(json.dumps(spec) for spec in obs.tools)
        text = "\n\n".join(part for part in (
            obs.system_prompt, obs.instructions,
            f"Tools (call one as <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call>):\n{tools}") if part)
        return [*prompt, {"role": "user", "content": text}], {"run_id": self.episode.run_id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        if self.episode.done:
            return BaseTextEnvStepOutput(observations=[], reward=self.episode.result.reward, done=True, metadata={})
        calls = parse_tool_calls(action)
        # Text around the calls is kept as the turn's text; a reply with no call is a text message.
        text = (TOOL_CALL.sub("", action).strip() or None) if calls else action
        out = self.episode.step(AgentTurn(text=text, tool_calls=calls))
        observations = [{"role": "user", "content": out.observation.text}] if out.observation.text and not out.done else []
        return BaseTextEnvStepOutput(observations=observations, reward=out.reward, done=out.done, metadata=out.info)

    def close(self) -> None:
        self.episode.close("SkyRL closed the environment")


def register() -> None:
    """Make `skyrl_gym.make("proctor", env_config=..., extras=...)` build a ProctorTextEnv."""
    import skyrl_gym

    if ENV_ID not in skyrl_gym.envs.registration.registry:
        skyrl_gym.register(id=ENV_ID, entry_point=f"{__name__}:ProctorTextEnv")

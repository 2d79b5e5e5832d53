"""TRL's GRPOTrainer drives Proctor episodes through `environment_factory`.

    from proctor.integrations.trl import environment_class

    ProctorEnv = environment_class("examples/quarterly_revenue", "runs/")
    trainer = GRPOTrainer(model=..., train_dataset=Dataset.from_list([{"prompt": [...], "task": "q3-revenue"}] * 64),
                          environment_factory=ProctorEnv)       # the reward comes from ProctorEnv.get_reward

TRL makes one instance per rollout and calls `reset(**row)` with the dataset row (`task`, and for a
family `seed`, `difficulty`, `params`; other columns are ignored); the string it returns (the
task's system prompt and the step's instructions) is appended to the prompt. The public methods
are the task's tools, with signatures and docstrings TRL turns into schemas; each call is one
`Episode.step`. `get_reward` ends the episode if the model stopped without submitting (its work
is graded as it stands, like an agent that finished) and returns the rollout's reward, after any
misbehaviour penalty; result.json is written as `proctor run` writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..episode import Action, Episode, RolloutConfig
from ..errors import ConfigError
from ..tasks.loading import Environment, load_environment
from ..tools.registry import make_tools
from .tools import tool_method

RESET_KEYS = ("task", "seed", "difficulty", "params")


class ProctorTRLEnvironment:
    """Base of the classes `environment_class` builds (one per environment). TRL takes every public
    method but `reset` and `get_reward` for a tool, so everything else here is private; the
    Episode (its `state()`, its result) is `self.episode`."""

    env: Environment
    out_dir: Path
    default_task: str | None = None
    config: RolloutConfig | None = None
    ray: str | None = None

    def __init__(self) -> None:
        if self.ray is None:
            self.episode = Episode(self.out_dir, env=self.env, config=self.config)
        else:  # each rollout in a Ray actor on the cluster's nodes (proctor/ray_episode.py)
            from ..ray_episode import RayEpisode

            self.episode = RayEpisode(self.out_dir, env=self.env, config=self.config, address=self.ray)

    def reset(self, **kwargs: Any) -> str:
        request = {k: v for k, v in kwargs.items() if k in RESET_KEYS and v is not None}
        task = request.pop("task", self.default_task)
        if task is None:
            raise ConfigError("reset needs a `task` column in the dataset (or environment_class(..., task=ID))")
        obs = self.episode.reset(task, **request)
        if self.episode.done:
            return f"[the episode could not start: {'; '.join(self.episode.result.errors) or self.episode.result.status}]"
        return "\n\n".join(part for part in (obs.system_prompt, obs.instructions) if part)

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if not self.episode.started:
            return "[error] the episode has not started"
        if self.episode.done:
            return "[error] the task is over; no more tool calls"
        problem = self.episode.check_call(name, arguments)
        if problem:
            return f"[error] {problem}"
        out = self.episode.step(Action(tool=name, arguments=arguments))
        text = out.observation.text
        return text + "\n\n[the task is over]" if out.done else text

    def get_reward(self) -> float:
        if not self.episode.started:
            return 0.0
        if not self.episode.done:
            self.episode.step(Action(finished=True))
        return self.episode.result.reward



def environment_class(env: str | Path | Environment, out_dir: str | Path, *, task: str | None = None,
                      config: RolloutConfig | None = None, tools: tuple[str, ...] | None = None,
                      ray: str | None = None) -> type[ProctorTRLEnvironment]:
    """A class for `GRPOTrainer(environment_factory=...)` serving `env`. Its tool methods are the
    tools of `task` if given, else those any of the environment's tasks offers (or `tools`).
    `ray` (auto, local, HOST:PORT) runs each rollout on a Ray cluster's node (RayEpisode)."""
    loaded = env if isinstance(env, Environment) else load_environment(str(env))
    if task is not None and task not in loaded.tasks and task not in loaded.families:
        raise ConfigError(f"unknown task {task!r}; this environment has {', '.join([*loaded.tasks, *loaded.families])}")
    if tools is None:
        names: list[str] = []
        sources = [loaded.tasks[task]] if task in loaded.tasks else list(loaded.tasks.values())
        for t in sources:
            names += [n for n in t.tools if n not in names]
        tools = tuple(names) or ("bash", "read_file", "write_file", "submit")
    namespace: dict[str, Any] = {"env": loaded, "out_dir": Path(out_dir), "default_task": task, "config": config, "ray": ray,
                                 "__doc__": f"Proctor environment {loaded.name} for TRL."}
    for tool in make_tools(tools):
        if tool.name in ("reset", "get_reward"):
            raise ConfigError(f"tool {tool.name!r} clashes with a method TRL reserves; rename it")
        namespace[tool.name] = tool_method(tool)
    return type(f"ProctorEnv_{loaded.name}".replace("-", "_").replace(".", "_"), (ProctorTRLEnvironment,), namespace)

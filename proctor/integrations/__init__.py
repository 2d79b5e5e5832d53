"""Adapters from trainers' environment interfaces to the Episode (proctor/episode.py): each one is
a thin driver, so the trainer gets Proctor's rollout (custody, judges, misbehaviour, result.json)
unchanged. Each needs its library, installed with the `trainers` extra:

- `proctor.integrations.trl.environment_class`: TRL's GRPOTrainer `environment_factory`;
- `proctor.integrations.skyrl.ProctorTextEnv` (and `register()`): a SkyRL-gym text environment;
- `proctor.integrations.tools`: the tools as typed Python functions, for any trainer that builds
  tool schemas from signatures and docstrings."""

"""The workflow config: one source of defaults, typed sections, and checks that name the key.

* **Defaults** live in config/schema.yaml and nowhere else. Snakemake fills them in when the
  Snakefile validates its config; :func:`load` does the same for code outside the workflow
  (tests, benchmarks). config/config.yaml repeats them as documentation, and a test checks that
  the two agree.
* **Typed sections.** Every section is a frozen dataclass below. A rule passes its job the
  slice of the config the job reads, as plain params (what Snakemake compares to decide a
  rerun); the job's spec turns each slice into its dataclass (:meth:`Section.of`, a field's
  ``of`` in :mod:`demo2rl.specs`) and the library only ever sees those. A key the dataclass
  does not know, or a missing one, is a :class:`ConfigError` naming it.
* ``collect`` and ``evaluate`` mostly shape the set of jobs or set their speed: the Plan reads
  them as :class:`CollectConfig` and :class:`EvaluateConfig`
  (:class:`demo2rl.workflow.plan.Variant`) and the spec fields hand each job the one or two
  numbers it uses, as plain params (or as a resource), so that a key a job does not read never
  reruns it. ``rl.seeds``, ``rl.arms`` and ``rl.checkpoint_every`` are the
  rules' alone (:data:`RULE_ONLY_KEYS`).
* :func:`check` holds the cross-key checks a JSON schema cannot say.

Adding a hyperparameter: its schema entry (type, default), its field here, the code that uses
it, and its line in config/config.yaml; a job that reads a section whole (``policy``, ``bc``, an
arm's ``rl``) reads it then, and any other job declares it on its spec's field
(:mod:`demo2rl.spec_fields`).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

import yaml

from demo2rl import seeds, spec_fields, tasks

SCHEMA = Path(__file__).resolve().parents[2] / "config" / "schema.yaml"
"""The config's JSON schema, with every default (the repository's config/schema.yaml)."""


class ConfigError(ValueError):
    """A config value that cannot work; the message starts with the key."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config key {key!r}: {problem}")
        self.key = key


def load(source: str | os.PathLike[str] | Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A config (a YAML file, a mapping, or None for the defaults alone) validated against the
    schema with every default filled in: what the Snakefile's ``validate`` makes of it."""
    from snakemake.utils import validate  # (slow to import; only callers outside a workflow)

    if source is None:
        config: dict[str, Any] = {}
    elif isinstance(source, Mapping):
        config = copy.deepcopy(dict(source))
    else:
        config = yaml.safe_load(Path(source).read_text()) or {}
    check_version(config)
    validate(config, str(SCHEMA), set_default=True)
    return config


VERSION = 2
"""The config format's version (the schema's ``version``). Version 2 names the RL arms to run
``rl.arms`` (version 1: ``rl.inits``)."""
RENAMED = {("rl", "inits"): "rl.arms"}
"""Keys of older versions that were renamed: their path in a config, and their name now."""


def check_version(config: Mapping[str, Any]) -> None:
    """Raise ConfigError, before schema validation, for a config of another format version, or
    one using a key an older version had (in a variant's overrides too), naming it and what to
    write instead."""
    version = config.get("version", VERSION)
    if version != VERSION:
        raise ConfigError(
            "version",
            f"{version!r}: this demo2rl reads config version {VERSION}; from version 1, rename "
            f"rl.inits to rl.arms, then set version: {VERSION}",
        )
    declared = config.get("variants") or {}
    scopes = {"": config} | {
        f"variants.{name}.": overrides
        for name, overrides in (declared.items() if isinstance(declared, Mapping) else ())
    }
    for prefix, scope in scopes.items():
        for (section, key), now in RENAMED.items():
            node = scope.get(section) if isinstance(scope, Mapping) else None
            if isinstance(node, Mapping) and key in node:
                raise ConfigError(
                    f"{prefix}{section}.{key}",
                    f"renamed {now} in config version {VERSION} (the arms' wildcards, paths and "
                    f"tables say arm too): rename the key",
                )


def canonical(value: Any) -> Any:
    """``value`` with the keys of every mapping in sorted order.

    Snakemake compares params by their text, so without this, reordering keys in a config file
    (or writing it with another tool) would rerun every job.
    """
    if isinstance(value, Mapping):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# typed sections


class Section:
    """A frozen config section; :meth:`of` builds it from its (schema-validated) mapping."""

    PATH: typing.ClassVar[str] = ""
    """The section's place in the config, for error messages (``rl.ppo``)."""

    @classmethod
    def of(cls, mapping: Mapping[str, Any] | Self) -> Self:
        """The section from a mapping with exactly its keys; a nested section may be missing
        where its field allows None (the arm sections a run of another arm is not given)."""
        if isinstance(mapping, cls):
            return mapping
        if not isinstance(mapping, Mapping):
            raise ConfigError(cls.PATH, f"expected a mapping, got {mapping!r}")
        hints = typing.get_type_hints(cls)
        fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(mapping) - set(fields))
        if unknown:
            raise ConfigError(
                f"{cls.PATH}.{unknown[0]}", f"unknown key (known: {', '.join(fields)})"
            )
        values = {}
        for name in fields:
            kind, optional = _unwrap(hints[name])
            if name not in mapping:
                if not optional:
                    raise ConfigError(
                        f"{cls.PATH}.{name}",
                        "missing (run the config through demo2rl.config.load, which fills in "
                        "the schema's defaults)",
                    )
                values[name] = None
                continue
            value = mapping[name]
            if value is not None and isinstance(kind, type) and issubclass(kind, Section):
                value = kind.of(value)
            elif kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            values[name] = copy.deepcopy(value)
        return cls(**values)

    def pick(self, *names: str) -> dict[str, Any]:
        """The fields ``names`` as a plain mapping: the slice of the section a rule passes as a
        param, by the config's own key names (as MLflow records a run's params)."""
        return {name: getattr(self, name) for name in names}

    def to_dict(self) -> dict[str, Any]:
        """The section as plain JSON-able values (for run keys and checkpoints)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]


def _unwrap(hint: Any) -> tuple[Any, bool]:
    """(the type, whether None is allowed) of a field's annotation."""
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else hint), True
    return hint, False


@dataclasses.dataclass(frozen=True)
class ExpertConfig(Section):
    """``task.expert``: a batched callable, observations (B, ...) in, actions (B, ...) out."""

    PATH = "task.expert"
    entry_point: str
    kwargs: dict[str, Any]
    input: str


@dataclasses.dataclass(frozen=True)
class TaskConfig(Section):
    """``task``: the gymnasium env and its expert (None for the stages that only step the env,
    whose rules pass the task without it).

    ``max_episode_steps`` caps episodes of an env whose spec sets no limit (None: no cap but the
    env's own; the workflow always gives one). ``timeout_s`` limits each call of the task's code
    (:mod:`demo2rl.tasks.deadline`; None: no limit): robustness only, so the rules pass it as a
    resource, not in the task param, and a job's resume key leaves it out (a
    :func:`demo2rl.spec_fields.speed` field).
    """

    PATH = "task"
    env_id: str
    env_kwargs: dict[str, Any]
    frame_stack: int
    expert: ExpertConfig | None
    max_episode_steps: int | None
    timeout_s: float | None = spec_fields.speed()


@dataclasses.dataclass(frozen=True)
class CollectConfig(Section):
    """``collect``: how many demonstration episodes, in how many shard jobs, and their split."""

    PATH = "collect"
    source: str
    n_episodes: int
    n_shards: int
    n_envs: int
    codec: str
    valid_fraction: float


@dataclasses.dataclass(frozen=True)
class PolicyConfig(Section):
    """``policy``: the actor-critic network shared by BC and PPO.

    ``net_arch`` is always in ``{"pi": [...], "vf": [...]}`` form here (a single list in the
    config means the same layers for both).
    """

    PATH = "policy"
    net_arch: dict[str, list[int]]
    activation: str
    log_std_init: float
    ortho_init: bool
    cnn: str

    @classmethod
    def of(cls, mapping: Mapping[str, Any] | Self) -> Self:
        if isinstance(mapping, Mapping) and isinstance(mapping.get("net_arch"), (list, tuple)):
            layers = [int(n) for n in mapping["net_arch"]]
            mapping = {**mapping, "net_arch": {"pi": layers, "vf": list(layers)}}
        return super().of(mapping)


EXPERT_SOURCE = "expert"
"""``collect.source`` of demonstrations collected from the task's expert (any other value names
a dataset to import: :mod:`demo2rl.demos.minari_io`)."""


@dataclasses.dataclass(frozen=True)
class DaggerConfig(Section):
    """``bc.dagger``: DAgger rounds after the clone (see :mod:`demo2rl.learning.dagger`). A round's
    jobs read ``episodes``, ``n_shards`` and ``beta_decay``, never ``rounds``: raising it only adds
    rounds."""

    PATH = "bc.dagger"
    rounds: int
    episodes: int
    n_shards: int
    beta_decay: float


@dataclasses.dataclass(frozen=True)
class BCConfig(Section):
    """``bc``: behaviour cloning (see :mod:`demo2rl.learning.bc`). A clone's job is given the
    section without ``dagger`` (None here), which only the DAgger rounds' own jobs read."""

    PATH = "bc"
    device: str
    batch_size: int
    learning_rate: float
    max_epochs: int
    patience: int
    ent_coef: float
    l2_coef: float
    memory_fraction: float
    clip_obs: float
    augment: int
    dagger: DaggerConfig | None = None

    def to_dict(self) -> dict[str, Any]:
        """As :meth:`Section.to_dict`, without ``dagger`` where the job is not given it (a
        clone's checkpoint records the training settings alone)."""
        out = super().to_dict()
        return out if self.dagger is not None else {k: v for k, v in out.items() if k != "dagger"}


@dataclasses.dataclass(frozen=True)
class PPOConfig(Section):
    """``rl.ppo``: stable-baselines3 PPO's keyword arguments, by their SB3 names."""

    PATH = "rl.ppo"
    n_steps: int
    batch_size: int
    n_epochs: int
    learning_rate: float
    gamma: float
    gae_lambda: float
    clip_range: float
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    target_kl: float | None
    normalize_advantage: bool


@dataclasses.dataclass(frozen=True)
class WarmStartConfig(Section):
    """``rl.warm_start``: how the bc arm starts from the clone."""

    PATH = "rl.warm_start"
    critic_warmup_steps: int
    log_std: float | None
    bc_coef: float
    bc_decay: float


@dataclasses.dataclass(frozen=True)
class ResidualConfig(Section):
    """``rl.residual``: the residual arm's correction."""

    PATH = "rl.residual"
    log_std: float | None


@dataclasses.dataclass(frozen=True)
class KickstartConfig(Section):
    """``rl.kickstart``: the kickstart arm's fading distillation toward the clone."""

    PATH = "rl.kickstart"
    coef: float
    decay: float


@dataclasses.dataclass(frozen=True)
class SACConfig(Section):
    """``rl.sac``: the off-policy arms' budget and SAC hyperparameters (see config/schema.yaml)."""

    PATH = "rl.sac"
    total_timesteps: int
    n_envs: int
    eval_every: int
    buffer_size: int
    learning_starts: int
    batch_size: int
    learning_rate: float | str
    gamma: float
    tau: float
    ent_coef: str | float
    target_entropy: str | float
    updates_per_step: float
    policy_delay: int
    n_steps: int
    n_critics: int
    critic_net_arch: list[int]
    critic_layer_norm: bool
    augment: int
    compile: bool


@dataclasses.dataclass(frozen=True)
class RLPDConfig(Section):
    """``rl.rlpd``: the demonstrations in the rlpd arm's batches, and how its actor starts."""

    PATH = "rl.rlpd"
    demo_fraction: float
    actor_from_clone: bool
    log_std: float
    clone_warmup: bool


@dataclasses.dataclass(frozen=True)
class RLConfig(Section):
    """``rl`` as one run reads it (:meth:`demo2rl.arms.Arm.rl_slice`): its algorithm's section
    and its arm's own section only (None for the others; an off-policy run reads the keys of
    :data:`OFF_POLICY_OWN` from ``sac``, and is not given them here), and neither the seed and
    arm lists nor ``checkpoint_every`` (a speed setting, passed as a resource)."""

    PATH = "rl"
    total_timesteps: int | None
    n_envs: int | None
    vec_env: str
    device: str
    eval_every: int | None
    ppo: PPOConfig | None
    sac: SACConfig | None
    warm_start: WarmStartConfig | None
    residual: ResidualConfig | None
    kickstart: KickstartConfig | None
    rlpd: RLPDConfig | None

    @property
    def budget(self) -> int:
        """Env steps of the run (``total_timesteps``, an off-policy run's in ``sac``)."""
        return self._of_run("total_timesteps")

    @property
    def envs(self) -> int:
        """Envs of the run's vector env (``n_envs``, an off-policy run's in ``sac``)."""
        return self._of_run("n_envs")

    @property
    def evaluate_every(self) -> int:
        """Env steps between the run's evaluations (``eval_every``, an off-policy run's in
        ``sac``)."""
        return self._of_run("eval_every")

    def _of_run(self, key: str) -> int:
        value = getattr(self.sac if self.sac is not None else self, key)
        if value is None:
            raise ConfigError(f"{self.PATH}.{key}", "missing")
        return value


@dataclasses.dataclass(frozen=True)
class EvaluateConfig(Section):
    """``evaluate``: the held-out episodes of the final comparison and of the quick evaluations
    during training, and the summary's bootstrap."""

    PATH = "evaluate"
    episodes: int
    during_training: int
    n_envs: int
    bootstrap_reps: int
    confidence: float


@dataclasses.dataclass(frozen=True)
class TrackingConfig(Section):
    """``tracking``: whether jobs log to MLflow, and how tracking failures are treated.

    A rule passes it as this dataclass, not as a mapping, on purpose: Snakemake leaves param
    values of other types out of its params rerun trigger, and tracking cannot change a result,
    so switching either key must rerun nothing (tests/test_rerun_matrix.py checks that).
    """

    PATH = "tracking"
    enabled: bool
    fail_on_error: bool


SECTIONS: dict[str, type[Section]] = {
    "task": TaskConfig,
    "collect": CollectConfig,
    "policy": PolicyConfig,
    "bc": BCConfig,
    "rl": RLConfig,
    "evaluate": EvaluateConfig,
    "tracking": TrackingConfig,
}
"""Every config section (but the top-level ``experiment`` and ``seed``) and its dataclass."""
RULE_ONLY_KEYS = ("rl.seeds", "rl.arms", "rl.checkpoint_every")
"""Keys of those sections that the rules read and no dataclass holds."""
OFF_POLICY_OWN = ("total_timesteps", "n_envs", "eval_every")
"""Keys of ``rl`` that the off-policy (SAC) arms read from ``rl.sac`` instead (an off-policy env
step costs more than PPO's, so their budget, env count and evaluation spacing are their own)."""


# --------------------------------------------------------------------------------------------
# checks beyond the schema


NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
"""Where the NVIDIA driver lists this machine's GPUs (read without importing torch)."""


def device(setting: str, images: bool, gpus: int | None = None) -> str:
    """``bc.device`` or ``rl.device`` as its jobs run it, decided once, when the workflow reads
    its config (the one device policy of both): ``auto`` is CUDA for a CNN policy (``images``)
    where the invocation has GPUs, else the CPU, where small MLPs train fastest; any other value
    as it is. The invocation has GPUs when it declares a ``gpu`` resource (``gpus``: ``snakemake
    --resources gpu=N``, or a cluster profile's ``resources``, for jobs that run on other
    machines than the one that plans them) or, without a declaration, when this machine has an
    NVIDIA GPU. A job on CUDA then requests the ``gpu`` resource, so a scheduler places it on a
    GPU; spelling out the same choice reruns nothing."""
    if setting != "auto":
        return setting
    has_gpus = gpus > 0 if gpus is not None else NVIDIA_GPUS.is_dir()
    return "cuda" if images and has_gpus else "cpu"


def gradient_steps(updates_per_step: float, n_envs: int) -> int:
    """SAC's gradient steps after each step of ``n_envs`` envs: ``updates_per_step`` of them per
    env step, which must come to a whole number; ConfigError naming ``rl.sac.updates_per_step``
    otherwise."""
    steps = updates_per_step * n_envs
    if steps < 1 or abs(steps - round(steps)) > 1e-9:
        raise ConfigError(
            "rl.sac.updates_per_step",
            f"{updates_per_step} gradient steps per env step with rl.sac.n_envs {n_envs} envs is "
            f"{steps:g} per vector step: it must be a whole number, at least 1",
        )
    return round(steps)


def without_expert(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with ``task.expert`` None where its ``entry_point`` is null (the task has no
    expert): how the workflow's jobs are given a task without one."""
    expert = config["task"]["expert"]
    if expert is not None and expert.get("entry_point") is None:
        config["task"]["expert"] = None
    return config


def check(config: Mapping[str, Any]) -> None:
    """Raise ConfigError for the first value the workflow cannot use (after schema validation)."""
    task = config["task"]
    try:
        tasks.env_spec(task["env_id"])
    except tasks.TaskError as err:
        raise ConfigError("task.env_id", str(err)) from None
    collect, expert = config["collect"], task["expert"]
    if expert is not None:
        try:
            tasks.load_expert(expert["entry_point"], expert.get("kwargs"))
        except tasks.TaskError as err:
            raise ConfigError("task.expert.entry_point", str(err)) from None
    elif collect["source"] == EXPERT_SOURCE:
        raise ConfigError(
            "task.expert",
            "entry_point null (no expert), but collect.source is expert: collection needs the "
            "expert; set "
            "collect.source to a dataset to import (minari:<id>, a Minari dataset directory or "
            "a demo2rl .h5 file)",
        )
    elif config["bc"]["dagger"]["rounds"] > 0:
        raise ConfigError(
            "bc.dagger.rounds",
            f"{config['bc']['dagger']['rounds']} DAgger rounds need an expert to label the "
            "clone's states, and task.expert.entry_point is null: set rounds to 0, or give the "
            "task an expert",
        )
    dagger = config["bc"]["dagger"]
    if dagger["rounds"] > 0 and collect["source"] != EXPERT_SOURCE:
        raise ConfigError(
            "bc.dagger.rounds",
            f"{dagger['rounds']} DAgger rounds with collect.source {collect['source']!r}: a "
            "round's labels join the dataset the task's expert collected (the aggregate "
            "merges them, which needs the same task, expert and seeds), and an imported "
            "dataset is not one; set rounds to 0, or collect.source to expert",
        )
    if dagger["rounds"] > 0 and dagger["n_shards"] > dagger["episodes"]:
        raise ConfigError(
            "bc.dagger.n_shards",
            f"{dagger['n_shards']} shards for {dagger['episodes']} episodes a round leave some "
            "empty",
        )
    if collect["source"] == EXPERT_SOURCE and collect["n_shards"] > collect["n_episodes"]:
        raise ConfigError(
            "collect.n_shards",
            f"{collect['n_shards']} shards for {collect['n_episodes']} episodes leave some empty",
        )
    if collect["n_episodes"] > seeds.BLOCK:
        raise ConfigError("collect.n_episodes", f"at most {seeds.BLOCK} episodes")
    rl = config["rl"]
    gradient_steps(rl["sac"]["updates_per_step"], rl["sac"]["n_envs"])
    for name, section in SECTIONS.items():
        rule_only = {k.partition(".")[2] for k in RULE_ONLY_KEYS if k.startswith(f"{name}.")}
        section.of({k: v for k, v in config[name].items() if k not in rule_only})

"""The names of a workflow's evaluated policies and RL runs, built and parsed here only, and the
paths of the files the job graph reads (:data:`SHARD`, :data:`DEMOS`, :data:`CLONE`,
:data:`CLONE_METRICS`, :data:`DAGGER_SHARD`, :data:`DAGGER_AGGREGATE`, :data:`ROUND_CLONE`,
:data:`ROUND_METRICS`, :data:`RL_CHECKPOINT`, :data:`RL_PROGRESS`, :data:`RL_CURVE`,
:data:`EVALUATION`: each spelled once, for the rules that write them and for
:data:`demo2rl.workflow.graph.KINDS`, which hands them to the rules that read them).

An RL run is an arm and a seed (:class:`RLRun`). It has one spelling per use:

* its policy name ``rl-<arm>-seed<s>``: the evaluation record, the MLflow run, the summary;
* its directory ``rl/<arm>/seed-<s>`` under the experiment's results (:data:`RL_DIR`);
* its log and benchmark file stem ``<arm>-seed<s>`` (:data:`RL_LOG`).

The rules write the same patterns with the ``arm`` and ``seed`` wildcards in place of the values,
so that a path Snakemake builds and a path the library builds are one string. The other evaluated
policies are :data:`EXPERT` and :data:`BC`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

EXPERT = "expert"
BC = "bc"
RL_POLICY = "rl-{arm}-seed{seed}"
"""An RL run's policy name, as a pattern of the rules' wildcards."""
RL_DIR = "rl/{arm}/seed-{seed}"
"""An RL run's directory under the experiment's results, as a pattern of the wildcards."""
SHARD = "demos/shard-{shard}.h5"
"""A collection shard under a variant's results, as a pattern of the ``shard`` wildcard."""
RL_LOG = "{arm}-seed{seed}"
"""An RL run's log and benchmark file stem, as a pattern of the wildcards."""
DAGGER_DIR = "bc/dagger/round-{round}"
"""A DAgger round's directory under a variant's results (its shards, aggregate and clone), as
a pattern of the ``round`` wildcard."""
DAGGER_SHARD = f"{DAGGER_DIR}/shard-{{shard}}.h5"
"""One collection shard of a DAgger round, as a pattern of the ``round`` and ``shard``
wildcards."""
DAGGER_AGGREGATE = f"{DAGGER_DIR}/demos.h5"
"""A DAgger round's aggregate (the last round's, or the dataset, and the round's shards), as a
pattern of the ``round`` wildcard."""
DEMOS = "demos/demos.h5"
"""The dataset (merged from the shards, or imported) under a variant's results."""
CLONE = "bc/policy.pt"
"""The behaviour clone's checkpoint under a variant's results."""
ROUND_CLONE = f"{DAGGER_DIR}/policy.pt"
"""A DAgger round's clone under a variant's results, as a pattern of the ``round`` wildcard."""
RL_CHECKPOINT = f"{RL_DIR}/policy.pt"
"""An RL run's policy checkpoint under a variant's results, as a pattern of the wildcards."""
RL_PROGRESS = f"{RL_DIR}/progress.csv"
"""An RL run's SB3 progress table (its training seconds among them), as a pattern of the
wildcards."""
RL_CURVE = f"{RL_DIR}/evaluations.csv"
"""An RL run's learning curve (its held-out evaluations during training), as a pattern of the
wildcards."""
CLONE_METRICS = "bc/metrics.json"
"""The clone's training history and held-out comparison with the expert."""
ROUND_METRICS = f"{DAGGER_DIR}/metrics.json"
"""A DAgger round's clone's metrics (its expert calls among them), as a pattern of ``round``."""
EVALUATION = "eval/{policy}.json"
"""A policy's held-out evaluation under a variant's results, as a pattern of ``policy``."""
DAGGER_POLICY = "dagger{round}"
"""The evaluated policy (and its group) of a DAgger round's clone (round 0 is :data:`BC`)."""
MAX_DAGGER_ROUNDS = 20
"""The most DAgger rounds a config may ask for (the schema's ``bc.dagger.rounds`` maximum)."""
_DAGGER_POLICY = re.compile(r"dagger[1-9]\d*")


def minari_dataset_id(experiment: str, variant: str) -> str:
    """The Minari id a variant's dataset is exported under: ``demo2rl/<experiment>-v0`` (a
    variant's: ``demo2rl/<experiment>-<variant>-v0``)."""
    name = experiment if variant == BASE_VARIANT else f"{experiment}-{variant}"
    return f"demo2rl/{name}-v0"


MINARI_DIR = "demos/minari"
"""Where a variant's dataset is exported as a Minari dataset (a Minari store directory: the
dataset lies under it by its id)."""
_RL_POLICY = re.compile(r"rl-(?P<arm>[A-Za-z0-9_]+)-seed(?P<seed>\d+)")
_RL_GROUP = "rl_"


def rl_group(arm: str) -> str:
    """The policy group the runs of an arm are compared in: ``rl_<arm>``."""
    return f"{_RL_GROUP}{arm}"


def group_arm(group: str) -> str | None:
    """The arm of an RL policy group (``rl_<arm>`` -> ``<arm>``); None for another group."""
    return group.removeprefix(_RL_GROUP) if group.startswith(_RL_GROUP) else None


@dataclasses.dataclass(frozen=True)
class RLRun:
    """One RL run: an arm and a seed."""

    arm: str
    seed: int

    @property
    def name(self) -> str:
        """Its policy name (evaluation record, MLflow run): ``rl-<arm>-seed<s>``."""
        return RL_POLICY.format(arm=self.arm, seed=self.seed)

    @property
    def group(self) -> str:
        """The policy group it is compared in: ``rl_<arm>``."""
        return rl_group(self.arm)

    def dir(self, results: str) -> str:
        """Its directory under an experiment's results directory."""
        return f"{results}/{RL_DIR.format(arm=self.arm, seed=self.seed)}"

    @classmethod
    def parse(cls, name: str) -> RLRun | None:
        """The run of a policy name ``rl-<arm>-seed<s>``; None for another name."""
        match = _RL_POLICY.fullmatch(name)
        return cls(match["arm"], int(match["seed"])) if match else None


def rl_runs(arms: Iterable[str], seeds: Iterable[int]) -> list[RLRun]:
    """Every run of ``arms`` x ``seeds``, arm by arm."""
    seeds = list(seeds)
    return [RLRun(arm, int(seed)) for arm in arms for seed in seeds]


def policy_names(arms: Iterable[str], seeds: Iterable[int], rounds: int = 0) -> list[str]:
    """The evaluated policies of a workflow: the expert, the clone, each DAgger round's clone,
    every RL run."""
    daggers = [dagger_policy(r) for r in range(1, rounds + 1)]
    return [EXPERT, BC, *daggers, *(run.name for run in rl_runs(arms, seeds))]


def dagger_policy(round: int) -> str:
    """The policy name of DAgger round ``round``'s clone: ``dagger<round>``."""
    return DAGGER_POLICY.format(round=round)


def dagger_round(name: str) -> int | None:
    """The round of a DAgger clone's policy name (``dagger2`` -> 2); None for another name."""
    return int(name.removeprefix("dagger")) if _DAGGER_POLICY.fullmatch(name) else None


def policy_pattern(arms: Iterable[str]) -> str:
    """A regular expression matching exactly the policy names of these arms (any seed) and of
    the DAgger rounds."""
    return rf"{EXPERT}|{BC}|{_DAGGER_POLICY.pattern}|rl-({'|'.join(arms)})-seed\d+"


BASE_VARIANT = "base"
"""The base config's name as a variant (its results are the experiment's own)."""
VARIANTS_DIR = "variants"
"""Where a variant's results live under the experiment's: ``variants/<name>``."""


def variant_root(results: str, variant: str) -> str:
    """The results directory of a variant: the experiment's own for the base config,
    ``<results>/variants/<name>`` for any other."""
    return results if variant == BASE_VARIANT else f"{results}/{VARIANTS_DIR}/{variant}"


def variant_of(root: str) -> str:
    """The variant whose results directory is ``root`` (the inverse of :func:`variant_root`)."""
    parent, _, name = root.rstrip("/").rpartition("/")
    return name if parent.endswith(f"/{VARIANTS_DIR}") else BASE_VARIANT


SUMMARY_FIGURES = {
    "curves_png": "plots/learning_curves.png",
    "returns_png": "plots/final_returns.png",
}
RACING_FIGURES = {
    "track_png": "plots/track_lines.png",
    "lap_gif": "plots/best_lap.gif",
}
"""The figures of a variant's report, under its report directory (the racing ones only for the
racing task)."""

"""What a task brings beyond its gymnasium registration, declared by the package of its env: the
per-episode metrics it reports in its info, whether its report replays held-out episodes, and a
batched stable-baselines3 VecEnv of its own for the RL runs.

A task's package registers them with :func:`register` (next to its ``gymnasium.register``
call, in the module a ``"package.module:Env-v0"`` id imports), as this module does for
``Racing-v0``; a task that registers nothing is reported by its return and episode length. The
evaluations (:mod:`demo2rl.learning.evaluation`) record the metrics, the summary tabulates them
under their labels (a param of the rule summarize, from the plan), and the plan adds the replay
figures (the rule plot_racing) to a task that has them; ``rl.vec_env: auto`` picks the task's
own VecEnv (:mod:`demo2rl.learning.vec_env_choice`).

It is kept apart from :mod:`demo2rl.envs` (which every job imports, to register the env) so that
only the jobs that evaluate a policy read it; a label only says how a metric is shown, so the
code fingerprints leave it out (:data:`PRESENTATION_KEYWORDS`) and the summary reruns on it
alone; and only the RL runs' fingerprints cover a VecEnv's module, which the plan adds to them
(:data:`UNFINGERPRINTED_IMPORTS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from demo2rl.envs import env_name

PRESENTATION_KEYWORDS = {"label"}
"""A metric's label only says how it is shown: no code fingerprint hashes it; the rule summarize
takes the labels as a param (``Variant.metric_labels``)."""
UNFINGERPRINTED_IMPORTS = {
    "demo2rl.envs.sb3": "the racing task's VecEnv, which only the RL runs step: the plan adds "
    "its module to their fingerprint (Variant.vec_env_code)"
}


@dataclasses.dataclass(frozen=True)
class Metric:
    """A per-episode metric of a task.

    :param source: the value it is, at the episode's end: ``info.<key>`` (the info value), or in
        the evaluate stage's record ``info.<key>.mean`` (its mean over the episode's steps).
    :param label: how the report's tables name it.
    :param finite: the metric is whether ``source`` is finite (1.0 or 0.0; e.g. a lap time that
        is NaN when the episode finished no lap), not ``source`` itself.
    """

    source: str
    label: str
    finite: bool = False


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a task's package declares about its report (:func:`register`)."""

    metrics: Mapping[str, Metric] = dataclasses.field(default_factory=dict)
    """Its per-episode metrics by name, in the order the report shows them."""
    replayed: bool = False
    """Whether its report replays held-out episodes (the rule plot_racing's figures)."""
    sb3_vec_env: str | None = None
    """The entry point of its own batched SB3 VecEnv, a class taking ``(num_envs,
    **env_kwargs)`` whose episodes are those of SB3's ``DummyVecEnv`` over its single envs, seed
    for seed (same-step autoreset, ``terminal_observation`` in the infos), or results would
    depend on the vec env kind."""


_REGISTERED: dict[str, Capabilities] = {}


def register(
    env_id: str,
    *,
    metrics: Mapping[str, Metric] | None = None,
    replayed: bool = False,
    sb3_vec_env: str | None = None,
) -> None:
    """Declare what task ``env_id`` brings (:class:`Capabilities`)."""
    _REGISTERED[env_name(env_id)] = Capabilities(dict(metrics or {}), replayed, sb3_vec_env)


def of(env_id: str) -> Capabilities:
    """What task ``env_id`` registered (nothing, if it registered nothing); the env's module
    must have been imported (making the env, or :func:`demo2rl.tasks.env_spec`, does that)."""
    return _REGISTERED.get(env_name(env_id), Capabilities())


register(
    "Racing-v0",
    metrics={
        "lap_time": Metric("info.lap_time", label="lap time (s)"),  # of the first lap; NaN: none
        "lap_completed": Metric("info.lap_time", label="episodes with a lap", finite=True),
        "avg_speed": Metric("info.speed.mean", label="average speed (m/s)"),
        "off_track_rate": Metric("info.off_track.mean", label="off-track rate"),
        "laps": Metric("info.laps", label="laps"),
    },
    replayed=True,
    sb3_vec_env="demo2rl.envs.sb3:RacingVecEnv",
)

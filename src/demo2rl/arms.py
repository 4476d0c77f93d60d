"""The RL arms: one record per arm, and the registry every other part of demo2rl reads them from.

An arm is how an RL run uses the demonstrations. An arm trains one stable-baselines3 algorithm
(:data:`ALGORITHMS`): PPO, on-policy, or SAC, off-policy; every arm of one algorithm shares its
hyperparameters and budget (``rl.ppo`` with ``rl.total_timesteps``, ``rl.sac`` with its own
``total_timesteps``: an off-policy step costs more) and the env. Each algorithm has a control arm
that uses no demonstrations (scratch PPO, plain SAC): a demo arm is compared with its own
algorithm's control (what the demonstrations add) and with scratch PPO (what a user gets over the
default). Each :class:`Arm` says everything about itself once: its name (the value in ``rl.arms``
and the ``arm`` wildcard), its label and colour (in every table and figure), its algorithm and
control, the ``rl`` config section that only its runs read, whether it needs the behaviour clone
(the rules' inputs), which action spaces it supports (the task probe) and where its start lives
(the function that builds its model, in :mod:`demo2rl.rl.recipe`). The summary's groups and
comparisons (:mod:`demo2rl.report.groups`), the figures' colours, the probe's checks, the rules'
inputs and the trainer's start all derive from :data:`REGISTRY`; nothing else names an arm.

A built-in arm names its start function in :mod:`demo2rl.rl.recipe` (an arm registered from
elsewhere gives the function itself). So this module stays light (the rules, the probe and the
summary import it without torch), and the code fingerprint of a rule that only reads an arm's label
does not cover how the arm trains. A start takes a :class:`demo2rl.rl.recipe.Start` and returns the
model; see there.

Adding an arm: its :class:`Arm` below, its settings section (schema; a dataclass field of
``RLConfig``; config/config.yaml) if it has one, its start function, its tests and its line in
docs/arms.md (docs/architecture.md walks through it). A run reads its arm's slice of ``rl``
(:meth:`Arm.rl_slice`; which arms read a key is :meth:`Arm.reads_rl`'s answer), so no
declaration names an arm.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from demo2rl import config
from demo2rl.names import rl_group

PRESENTATION_KEYWORDS = {"label", "color"}
"""An arm's label and colour only say how results are shown: the code fingerprints leave these
keyword arguments out, so that editing one retrains nothing; the rules that show them take them as
params instead (``Variant.arm_looks``, :mod:`demo2rl.workflow.plan`), which reruns exactly those."""

CONTROL = "scratch"
"""The headline control every demo arm is also compared with: PPO without the demonstrations."""

ALGORITHMS = {"PPO": "ppo", "SAC": "sac"}
"""The stable-baselines3 algorithms arms train, and the ``rl`` section of each one's
hyperparameters (read by every arm of that algorithm, and by no other)."""


@dataclasses.dataclass(frozen=True)
class Arm:
    """One RL arm.

    :param name: its name in ``rl.arms``, in file paths (``rl/<name>/seed-<s>``) and policy
        names (``rl-<name>-seed<s>``): letters, digits and underscores.
    :param label: how tables and figures name it.
    :param color: its matplotlib colour in every figure.
    :param start: the function building its PPO model from a :class:`demo2rl.rl.recipe.Start`,
        or the name of one in :mod:`demo2rl.rl.recipe`.
    :param section: the ``rl`` config section only this arm's runs read (None: none).
    :param needs_clone: whether a run starts from, or is guided by, the behaviour clone (then
        its job waits for BC and is given the clone's checkpoint): True or False, or the names
        of switches in its ``section`` of which any one on makes a run use it
        (:meth:`uses_clone`).
    :param action_spaces: the gymnasium action space classes it supports, by name.
    :param algorithm: the stable-baselines3 algorithm its runs train (a key of
        :data:`ALGORITHMS`).
    :param control: the arm of the same algorithm without demonstrations that this one is
        compared with (what the demonstrations add); None for a control itself.

    The label and the colour only say how results are shown: the code fingerprints leave them
    out (:data:`PRESENTATION_KEYWORDS`), and the rules that draw or tabulate take them
    as params, so editing one redraws and retabulates, and retrains nothing.
    """

    name: str
    label: str
    color: str
    start: Any
    section: str | None = None
    needs_clone: bool | tuple[str, ...] = True
    action_spaces: tuple[str, ...] = ("Box", "Discrete")
    algorithm: str = "PPO"
    control: str | None = CONTROL

    def __post_init__(self) -> None:
        if not self.name.replace("_", "").isalnum() or not self.name.isascii():
            raise ValueError(f"arm name {self.name!r}: letters, digits and underscores only")
        if self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"arm {self.name!r}: algorithm {self.algorithm!r} (known: {', '.join(ALGORITHMS)})"
            )
        if not isinstance(self.needs_clone, bool) and not self.section:
            raise ValueError(f"arm {self.name!r}: clone switches {self.needs_clone} but no section")

    def uses_clone(self, rl: Mapping[str, Any]) -> bool:
        """Whether its runs with the ``rl`` config section (a mapping, as the config holds it)
        start from, or are guided by, the behaviour clone: its job then waits for BC, reruns
        when BC changes, and is given the clone's checkpoint."""
        if isinstance(self.needs_clone, bool):
            return self.needs_clone
        assert self.section is not None
        return any(rl[self.section][switch] for switch in self.needs_clone)

    @property
    def algorithm_section(self) -> str:
        """The ``rl`` section of its algorithm's hyperparameters (``ppo``, ``sac``)."""
        return ALGORITHMS[self.algorithm]

    @property
    def off_policy(self) -> bool:
        """Whether its runs learn from a replay buffer (their budget is ``rl.sac``'s)."""
        return self.algorithm != "PPO"

    def reads_rl(self, key: str) -> bool:
        """Whether its runs read ``rl.<key>`` (a key or section directly under ``rl``): not the
        seed and arm lists (adding a seed or an arm must not rerun the others), not
        ``checkpoint_every`` (a speed setting), of the algorithms' sections (:data:`ALGORITHMS`)
        only its own algorithm's (an off-policy arm reads :data:`demo2rl.config.OFF_POLICY_OWN`
        from it, not from ``rl``), and of the arms' own sections (:func:`sections`) only its
        own. The one statement of what an arm's job reads of ``rl``: its params
        (:meth:`rl_slice`) and which variants share its runs (:mod:`demo2rl.workflow.variants`)."""
        if f"rl.{key}" in config.RULE_ONLY_KEYS:
            return False
        if key in ALGORITHMS.values():
            return key == self.algorithm_section
        if key in config.OFF_POLICY_OWN:
            return not self.off_policy
        owner = sections().get(key)
        return owner is None or owner == self.name

    def rl_slice(self, rl: Mapping[str, Any]) -> dict[str, Any]:
        """The part of the ``rl`` config (a mapping, as the config holds it) its runs read
        (:meth:`reads_rl`)."""
        return {k: v for k, v in rl.items() if self.reads_rl(k)}

    def budget(self, rl: Mapping[str, Any]) -> int:
        """Env steps per run under the ``rl`` config: the budget of its slice
        (:meth:`rl_slice`, :attr:`demo2rl.config.RLConfig.budget`), the run's own."""
        return config.RLConfig.of(self.rl_slice(rl)).budget

    @property
    def group(self) -> str:
        """The policy group its runs are compared as (``rl_<name>``)."""
        return rl_group(self.name)

    @property
    def supported_actions(self) -> str:
        """The action spaces it supports, in words (``"bounded Box"`` for an off-policy arm's
        Box: its squashed actions need bounds on every side)."""
        return " or ".join(
            f"bounded {name}" if self.off_policy and name == "Box" else name
            for name in self.action_spaces
        )

    def supports(self, action_space: Any) -> bool:
        """Whether a run of this arm can act in ``action_space`` (a gymnasium space); an
        off-policy arm's squashed actions need a Box bounded on every side."""
        if self.off_policy and not getattr(action_space, "is_bounded", lambda: True)():
            return False
        return any(cls.__name__ in self.action_spaces for cls in type(action_space).__mro__)


REGISTRY: dict[str, Arm] = {}
"""Every arm, by name, in the order of every table and figure."""


def register(arm: Arm) -> Arm:
    """Add ``arm`` to the registry (after the built-in ones); a name may be registered once."""
    if arm.name in REGISTRY:
        raise ValueError(f"an arm named {arm.name!r} is registered already")
    REGISTRY[arm.name] = arm
    return arm


def get(name: str) -> Arm:
    """The arm called ``name``; a ValueError naming the known ones otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown arm {name!r} (known: {', '.join(REGISTRY)})") from None


def names() -> tuple[str, ...]:
    """Every registered arm's name, in registry order."""
    return tuple(REGISTRY)


def sections() -> dict[str, str]:
    """The arms' own ``rl`` sections: section name -> the arm that reads it."""
    return {arm.section: arm.name for arm in REGISTRY.values() if arm.section}


# PPO starts from the clone's weights (raised log-std, optional critic warm-up and a fading
# demonstration term)
register(
    Arm(
        name="bc",
        label="RL warm-started from BC",
        color="tab:blue",
        start="warm_start",
        section="warm_start",
    )
)
# PPO learns a correction added to the frozen clone's action mean (Box) or logits (Discrete);
# it starts at (or, for Box, near) zero, so the arm starts at the clone
register(
    Arm(
        name="residual",
        label="residual RL on BC",
        color="tab:red",
        start="residual",
        section="residual",
    )
)
# a fresh policy, pulled towards the clone's actions on its own states by a term that fades out
register(
    Arm(
        name="kickstart",
        label="RL kickstarted by BC",
        color="tab:purple",
        start="kickstart",
        section="kickstart",
    )
)
# a fresh policy, no demonstrations: the control
register(
    Arm(
        name=CONTROL,
        label="RL from scratch",
        color="tab:green",
        start="scratch",
        needs_clone=False,
        control=None,
    )
)
# off-policy: SAC whose every batch is half demonstrations, half its own replay (RLPD's recipe),
# optionally starting its actor from the clone and exploring with the clone during its warm-up
# (only then does it wait for BC)
register(
    Arm(
        name="rlpd",
        label="SAC on demos + replay",
        color="tab:brown",
        start="demo_sac",
        section="rlpd",
        needs_clone=("actor_from_clone", "clone_warmup"),
        action_spaces=("Box",),
        algorithm="SAC",
        control="sac",
    )
)
# off-policy, no demonstrations: the SAC control (same critics, n-step returns and budget)
register(
    Arm(
        name="sac",
        label="SAC from scratch",
        color="tab:olive",
        start="sac_control",
        needs_clone=False,
        action_spaces=("Box",),
        algorithm="SAC",
        control=None,
    )
)
BUILTIN = names()
"""The arms demo2rl ships."""

"""Where a workflow's demonstrations come from (``collect.source``): the task's expert, or an
existing dataset to import instead of collecting.

A dataset source is ``minari:<dataset id>`` (a dataset in the local Minari store), a Minari
dataset's directory, or a demo2rl HDF5 file (``*.h5``, ``*.hdf5``). The workflow resolves it
when it plans (:func:`resolve`; nothing downloads) and checks its spaces against the task's before
any job (:func:`check_spaces`); the import itself is :mod:`demo2rl.demos.minari_io`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym

from demo2rl.config import EXPERT_SOURCE, ConfigError
from demo2rl.demos import dataset

KEY = "collect.source"
FROM_DATASET = "dataset"
"""``task.env_id`` of a task whose env is the one the imported dataset records (its env spec)."""
HDF5_SUFFIXES = (".h5", ".hdf5")
MINARI_PREFIX = "minari:"
"""(:data:`demo2rl.demos.minari_io.PREFIX`, spelt here so that planning a collected dataset never
imports Minari; a test checks that the two agree.)"""


@dataclasses.dataclass(frozen=True)
class Source:
    """A dataset to import: its kind (``minari`` or ``hdf5``) and where it lies (a Minari
    dataset's directory, or the HDF5 file)."""

    kind: Literal["minari", "hdf5"]
    path: Path

    @classmethod
    def of(cls, param: Mapping[str, str]) -> Source:
        """The source from its rule param (:meth:`param`)."""
        return cls(param["kind"], Path(param["path"]))  # type: ignore[arg-type]

    def param(self) -> dict[str, str]:
        """The source as a rule param (plain JSON): the plan resolves it, the job reads it."""
        return {"kind": self.kind, "path": str(self.path)}


def resolve(source: str) -> Source:
    """The dataset ``collect.source`` names; ConfigError naming the key and the value for one
    that is not there, or not a dataset."""
    if source == EXPERT_SOURCE:
        raise ValueError("the expert is not a dataset to import")
    from demo2rl.demos import minari_io  # (only where a dataset is imported: it imports Minari)

    path = Path(source)
    try:
        if source.startswith(MINARI_PREFIX) or path.is_dir():
            return Source("minari", minari_io.resolve(source))
    except (ValueError, OSError) as err:
        raise ConfigError(KEY, str(err)) from None
    if path.suffix in HDF5_SUFFIXES:
        if not path.is_file():
            raise ConfigError(KEY, f"{source!r}: no such demo2rl HDF5 file")
        return Source("hdf5", path)
    raise ConfigError(
        KEY,
        f"{source!r} is neither expert, minari:<dataset id>, a Minari dataset directory nor a "
        f"demo2rl HDF5 file ({', '.join(HDF5_SUFFIXES)}), or it does not exist",
    )


def files(src: Source) -> list[Path]:
    """The files a dataset source holds: the HDF5 file, or every file under a Minari
    dataset's directory, in order."""
    if src.kind == "hdf5":
        return [src.path]
    return sorted(p for p in src.path.rglob("*") if p.is_file())


def env_of(src: Source | None) -> tuple[str, dict[str, Any]]:
    """The env id and kwargs the dataset ``src`` records (a Minari dataset's env spec, a
    demo2rl file's task): what ``task.env_id: dataset`` stands for; ConfigError naming
    ``task.env_id`` where it records none, or there is no dataset (None: the expert)."""
    if src is None:
        raise ConfigError(
            "task.env_id",
            f"{FROM_DATASET!r} takes the env from an imported dataset, but collect.source is "
            f"{EXPERT_SOURCE}: name the env",
        )
    try:
        if src.kind == "hdf5":
            attrs = dataset.read_attrs(src.path)
            env_id, env_kwargs = attrs.get("env_id"), attrs.get("env_kwargs")
        else:
            from demo2rl.demos import minari_io

            info = minari_io.describe(src.path)
            env_id, env_kwargs = info.env_id, info.env_kwargs
    except (dataset.DatasetError, ValueError, OSError, KeyError) as err:
        raise ConfigError(KEY, f"{src.path}: its env spec cannot be read ({err})") from None
    if not env_id:
        raise ConfigError(
            "task.env_id", f"{FROM_DATASET!r}, but {src.path} records no env spec: name the env"
        )
    return str(env_id), dict(env_kwargs or {})


def spaces(src: Source) -> tuple[dict[str, Any], dict[str, Any]]:
    """The observation and action spaces the dataset records
    (:func:`demo2rl.demos.dataset.describe_space` descriptions), read from its metadata alone."""
    if src.kind == "hdf5":
        attrs = dataset.read_attrs(src.path)
        return attrs["observation_space"], attrs["action_space"]
    from demo2rl.demos import minari_io

    info = minari_io.describe(src.path)
    return info.observation_space, info.action_space


def check_spaces(src: Source, observation_space: gym.Space, action_space: gym.Space) -> None:
    """ConfigError naming ``collect.source`` and both spaces where the dataset's observation or
    action space is not the task's (what the workflow would train and act on)."""
    try:
        found = spaces(src)
    except (dataset.DatasetError, ValueError, OSError, KeyError) as err:
        raise ConfigError(KEY, f"{src.path}: its spaces cannot be read ({err})") from None
    for name, recorded, space in zip(
        ("observation_space", "action_space"), found, (observation_space, action_space), strict=True
    ):
        problem = dataset.space_mismatch(name, recorded, dataset.describe_space(space))
        if problem:
            raise ConfigError(
                KEY,
                f"{src.path}: the dataset's {problem} (dataset vs the task's); dataset: "
                f"{dataset.short_description(recorded)}, task: "
                f"{dataset.short_description(dataset.describe_space(space))}",
            )

"""An RL run's state directory: its key, its lock, and its checkpoint (tensors, never a pickle).

The state belongs to exactly one run: the directory records the run's key (a digest of its
config, the content of its inputs and its code), and a job resumes only state with its own key;
any other state is discarded, with a warning naming what changed. One trainer at a time holds
the directory (:func:`lock_state_dir`). A checkpoint holds tensors, counters and JSON, loaded with
``weights_only=True``; the model itself is always built from the config in force, so a resumed
run cannot pick up another run's hyperparameters.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

from demo2rl import io, locks
from demo2rl.learning import checkpoints
from demo2rl.rl import replay, resume_point

log = logging.getLogger(__package__)  # "demo2rl.rl", as in every job log before the split

CHECKPOINT = "checkpoint.pt"
STATE = "state.json"
"""A readable copy of the checkpoint's run record (step, evaluations, resumes): for people and
tests; the checkpoint itself holds what a resume reads."""
KEY = "key.json"


def run_key(parts: Mapping[str, Any]) -> dict[str, Any]:
    """The key of a run: a digest of each part (config, inputs, code) and of all of them.

    ``parts`` must hold everything the run's result depends on, as JSON-able values.
    """
    digests = {name: _digest(value) for name, value in sorted(parts.items())}
    return {"key": _digest(digests), "parts": digests}


LOCK_WAIT_S = 60.0
"""How long a trainer waits for another one to let go of a state directory before giving up
(e.g. a preempted job still writing its checkpoint when its requeued self starts)."""


class StateDirBusy(RuntimeError):
    """Another live trainer holds the state directory."""


@contextlib.contextmanager
def lock_state_dir(state_dir: Path, wait: float | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``state_dir`` (the file ``<state_dir>.lock`` beside it;
    :func:`demo2rl.locks.exclusive`: it goes with its process, however that ends).

    So a SLURM retry or requeue of a job whose first run is still going (a lost node, a slow
    shutdown) waits up to ``wait`` seconds (default :data:`LOCK_WAIT_S`) and then fails, with
    :class:`StateDirBusy` naming the holder, instead of training on the same state.
    """
    wait = LOCK_WAIT_S if wait is None else wait

    def busy(holder: str) -> StateDirBusy:
        return StateDirBusy(
            f"{state_dir} is in use by another trainer ({holder}), still after {wait:.0f} s; "
            "two runs never share a state directory. Wait for that job to end (or cancel it); "
            "its lock goes with its process"
        )

    with locks.exclusive(state_dir.parent / f"{state_dir.name}.lock", wait, busy):
        yield


def claim_state_dir(state_dir: Path, key: Mapping[str, Any]) -> bool:
    """Make ``state_dir`` this run's: True if it holds state of this very run (resume).

    State of any other run (another key, or none recorded) is deleted, with a warning that names
    the parts of the key that differ; so is a start of this run that never reached a checkpoint.
    The directory then records ``key`` and is empty otherwise. (A finished run's state stays: a
    forced rerun of the same run resumes it at its end and gives the same result.)
    """
    key_file = state_dir / KEY
    recorded = json.loads(key_file.read_text()) if key_file.is_file() else None
    same_run = recorded is not None and recorded.get("key") == key["key"]
    if same_run and (state_dir / CHECKPOINT).is_file():
        return True
    if state_dir.exists() and any(state_dir.iterdir()):
        if same_run:
            why = "it holds no checkpoint yet"
        elif recorded is None:
            why = "it records no run key"
        else:
            old, new = recorded.get("parts", {}), key["parts"]
            changed = sorted(p for p in old.keys() | new.keys() if old.get(p) != new.get(p))
            why = f"its run key differs in: {', '.join(changed) or 'the key itself'}"
        log.warning("discarding the state in %s: %s; training from the start", state_dir, why)
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    io.write_json(key_file, key)
    return False


def optimizers(model: BaseAlgorithm) -> dict[str, torch.optim.Optimizer]:
    """The model's optimizers by name: PPO's one; SAC's actor, critic and (when the entropy
    coefficient is tuned) entropy coefficient."""
    if not isinstance(model, OffPolicyAlgorithm):
        return {"policy": model.policy.optimizer}
    found = {"actor": model.actor.optimizer, "critic": model.critic.optimizer}
    if getattr(model, "ent_coef_optimizer", None) is not None:
        found["ent_coef"] = model.ent_coef_optimizer
    return found


def _trained_tensors(model: BaseAlgorithm) -> dict[str, torch.Tensor]:
    """What a model trains beyond its policy's weights: SAC's log entropy coefficient."""
    log_ent_coef = getattr(model, "log_ent_coef", None)
    return {} if log_ent_coef is None else {"log_ent_coef": log_ent_coef}


def save_state(
    path: Path, model: BaseAlgorithm, run: Mapping[str, Any], at: resume_point.ResumePoint
) -> None:
    """The run's checkpoint, one file replaced atomically: the weights and optimizer states, an
    off-policy run's replay (:func:`demo2rl.rl.replay.buffer_state`), the run's own record
    ``run`` (its evaluations so far, its resumes) and where it stands, ``at``
    (:mod:`demo2rl.rl.resume_point`, taken at the same rollout start as the weights). One file, so
    a kill never pairs one checkpoint's weights with another's evaluations or replay. Then
    :data:`STATE`, a readable copy of ``run`` (the trainer never reads it)."""
    ckpt = {
        "policy": model.policy.state_dict(),
        "optimizers": {name: opt.state_dict() for name, opt in optimizers(model).items()},
        "trained": {k: v.detach().clone() for k, v in _trained_tensors(model).items()},
        "replay": (
            replay.buffer_state(model.replay_buffer)
            if isinstance(model, OffPolicyAlgorithm) and model.replay_buffer is not None
            else None
        ),
        "run": json.dumps(dict(run)),  # NaN kept (Python's JSON reads it back)
        "position": resume_point.to_tensors(at),
    }
    with io.atomic_path(path) as tmp, open(tmp, "wb") as fh:  # a file object keeps the errno
        torch.save(ckpt, fh)
    io.write_json(path.parent / STATE, {"timesteps": at.timesteps, **run})


def load_state(path: Path, model: BaseAlgorithm) -> tuple[dict[str, Any], resume_point.ResumePoint]:
    """Load :func:`save_state`'s weights into ``model`` (built from the config in force) and
    return the run's record and position (for :func:`demo2rl.rl.resume_point.restore`);
    ``weights_only=True``, so a crafted file cannot run code."""
    try:
        ckpt = torch.load(path, map_location=model.device, weights_only=True)
        model.policy.load_state_dict(ckpt["policy"], strict=True)
        opts = optimizers(model)
        if set(opts) != set(ckpt["optimizers"]):
            raise ValueError(f"optimizers {sorted(ckpt['optimizers'])}, the model's {sorted(opts)}")
        for name, opt in opts.items():
            opt.load_state_dict(ckpt["optimizers"][name])
        with torch.no_grad():
            for name, tensor in _trained_tensors(model).items():
                tensor.copy_(ckpt["trained"][name])
        if ckpt["replay"] is not None:
            assert isinstance(model, OffPolicyAlgorithm) and model.replay_buffer is not None
            replay.load_buffer_state(model.replay_buffer, ckpt["replay"])
        run, at = json.loads(ckpt["run"]), resume_point.from_tensors(ckpt["position"])
    except Exception as err:  # unpickling refused, truncated file, foreign shapes, old format
        raise checkpoints.CheckpointError(
            path, f"cannot resume from it ({type(err).__name__}: {err})"
        ) from err
    return run, at


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]

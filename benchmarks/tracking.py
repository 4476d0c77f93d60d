"""Tracking overhead: the share of a BC job's and an RL job's wall time spent in MLflow tracking.

Both jobs run the workflow's own stage functions (``demo2rl.stages.train_bc.train_bc``,
``demo2rl.stages.train_rl.train_rl``, the RL run warm-started from that clone) inside
``tracking.child_run``, with the arguments their rules pass, against two stores:

local   the default SQLite store (a fresh one, created once before the jobs, as ``onstart`` does);
server  a real ``mlflow server`` on a loopback port of this machine (its own SQLite store).

A job sends its tracking calls (run creation with params and tags, dataset inputs, every
metrics batch: one per BC epoch and one per RL rollout, artifacts, termination) through one
background sender thread. Its tracking time is what that can cost the job: the time the job's own
thread spends in ``demo2rl.tracking`` (set-up, queueing, the final flush) plus the CPU time of the
sender thread, which competes with the job for the job's cores (waiting on the disk or the
network costs none). ``overhead_fraction_*`` is that over the job's wall time, the larger of the
BC and the RL job. Also reported: ``*_inline_fraction``, the wall time of the calls themselves
(what sending them inline, synchronously, would cost), and the cost of ``import mlflow``, paid
once per job process.

demo2rl.tracking carries no timers: :class:`Probe` measures it from outside, wrapping the
package's entry points (``Run``'s public methods, ``Outbox.send`` and ``Outbox.flush``) and every
call handed to the sender with timers, for the duration of one job.

Writes results/bench/tracking.json. Run: .venv/bin/python benchmarks/tracking.py
    [--episodes 200] [--rl-steps 100000]  (the other settings are config/config.yaml's)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import logging
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from _common import BENCH_DIR, machine, report

from demo2rl import arms, names, provenance, tracking
from demo2rl.config import (
    BCConfig,
    CollectConfig,
    EvaluateConfig,
    PolicyConfig,
    RLConfig,
    TaskConfig,
    TrackingConfig,
)
from demo2rl.config import load as load_config
from demo2rl.demos import collect, dataset
from demo2rl.specs.train_bc import BCJob
from demo2rl.specs.train_rl import RLJob
from demo2rl.stages import train_bc as bc_stage
from demo2rl.stages import train_rl as rl_stage

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TARGET = 0.03


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=200, help="demonstration episodes")
    parser.add_argument("--rl-steps", type=int, default=100_000, help="env steps of the RL job")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    config = load_config(REPO / "config" / "config.yaml")
    config["experiment"] = "bench-tracking"
    config["rl"]["total_timesteps"] = args.rl_steps
    demos = build_dataset(BENCH_DIR / "tracking_demos.h5", config, args.episodes)

    jobs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-tracking-") as tmp:
        local = Path(tmp) / "local"
        with workflow_env(tracking.default_tracking_uri(local / "results")):
            jobs["local"] = run_jobs(config, demos, local)
        served = Path(tmp) / "server"
        with mlflow_server(served) as url, workflow_env(url):
            jobs["server"] = run_jobs(config, demos, served)
    import_s = import_seconds()

    figures: dict[str, Any] = {}
    for store, by_job in jobs.items():
        figures[f"overhead_fraction_{store}"] = max(j["fraction"] for j in by_job.values())
    for store, by_job in jobs.items():
        for name, job in by_job.items():
            figures[f"{store}_{name}_fraction"] = job["fraction"]
            figures[f"{store}_{name}_inline_fraction"] = job["inline_s"] / job["wall_s"]
            figures[f"{store}_{name}_wall_s"] = job["wall_s"]
            figures[f"{store}_{name}_fraction_with_import"] = (job["tracking_s"] + import_s) / (
                job["wall_s"] + import_s
            )
    figures |= {
        "import_mlflow_s": import_s,
        "target": f"overhead_fraction_* < {TARGET}",
        "meets_target": all(figures[f"overhead_fraction_{s}"] < TARGET for s in jobs),
        "definition": "max over the BC and the RL job of (the job thread's time in "
        "demo2rl.tracking + the sender thread's CPU time) / job wall time; *_inline_fraction: "
        "wall time of the calls themselves / job wall time; *_with_import: one `import mlflow` "
        "added to both",
        "jobs": jobs,
        "run": {
            "dataset": str(demos),
            "episodes": args.episodes,
            "rl_total_timesteps": args.rl_steps,
            "rl_rollout_steps": config["rl"]["n_envs"] * config["rl"]["ppo"]["n_steps"],
            "bc_max_epochs": config["bc"]["max_epochs"],
            "server": "mlflow server on 127.0.0.1, 1 worker, SQLite store, same machine",
            "versions": provenance.versions(),
        },
        "machine": machine(),
    }
    report("tracking", figures)


def run_jobs(config: dict[str, Any], demos: Path, root: Path) -> dict[str, dict[str, Any]]:
    """A workflow's parent run, then the BC job and the RL job (warm-started from that clone)."""
    out = root / "results"
    settings = TrackingConfig.of(config["tracking"])
    tracking.start_workflow(config["experiment"], config, settings, results_dir=out)
    common = {"task": config["task"], "policy": config["policy"], "seed": config["seed"]}
    policy = out / "bc" / "policy.pt"
    # what the rules pass: the held-out episodes of the quick evaluations (a param), the envs
    # stepped together in them and the checkpoint spacing (speed-only resources); train_rl gets
    # the task without its expert and the rl slice without the seed list and checkpoint_every
    evaluate = EvaluateConfig.of(config["evaluate"])
    eval_episodes, eval_envs = evaluate.during_training, evaluate.n_envs
    env = {k: config["task"][k] for k in ("env_id", "env_kwargs", "frame_stack")}
    rl_cfg = arms.get("bc").rl_slice(config["rl"])

    def train_bc(run: tracking.Run) -> None:
        spec = BCJob(
            task=TaskConfig.of(config["task"]),
            policy=PolicyConfig.of(config["policy"]),
            bc=BCConfig.of(config["bc"]),
            seed=config["seed"],
            eval_episodes=eval_episodes,
            demos=str(demos),
            policy_out=str(policy),
            metrics_out=str(out / "bc" / "metrics.json"),
            threads=1,
            eval_envs=eval_envs,
        )
        bc_stage.train_bc(spec, run)

    def train_rl(run: tracking.Run) -> None:
        rl_dir = Path(names.RLRun("bc", 0).dir(str(out)))
        spec = RLJob(
            arm="bc",
            run_seed=0,
            seed=config["seed"],
            task=TaskConfig.of(env),
            policy=PolicyConfig.of(config["policy"]),
            rl=RLConfig.of(rl_cfg),
            clip_obs=config["bc"]["clip_obs"],
            eval_episodes=eval_episodes,
            demos=str(demos),
            clone=str(policy),
            state_dir=str(rl_dir / "state"),
            policy_out=str(rl_dir / "policy.pt"),
            progress_out=str(rl_dir / "progress.csv"),
            evaluations_out=str(rl_dir / "evaluations.csv"),
            threads=1,
            eval_envs=eval_envs,
            checkpoint_every=config["rl"]["checkpoint_every"],
        )
        rl_stage.train_rl(spec, run)

    jobs = {
        "bc": timed_job(
            "bc", "bc", train_bc, common | {"bc": config["bc"]}, [demos], [policy], settings
        ),
        "rl": timed_job(
            "rl-bc-seed0",
            "rl",
            train_rl,
            common | {"task": env, "rl": rl_cfg},
            [demos, policy],
            [],
            settings,
        ),
    }
    tracking.end_workflow(success=True, settings=settings)
    return jobs


def timed_job(
    name: str,
    stage: str,
    body: Callable[[tracking.Run], None],
    params: dict[str, Any],
    inputs: list[Path],
    outputs: list[Path],
    settings: TrackingConfig,
) -> dict[str, Any]:
    """Run ``body`` in a job's child run; its wall time and the time spent tracking.

    The job thread's tracking time is the job's wall time less the time ``body`` spends on its
    own work: the child run's set-up and its end (the final flush) count whole, and within
    ``body`` the calls into the package.
    """
    probe = Probe()
    with probe.attached():
        start = time.perf_counter()
        with tracking.child_run(
            name,
            stage=stage,
            rule=f"train_{stage}",
            wildcards={},
            params=params,
            inputs=inputs,
            outputs=outputs,
            settings=settings,
        ) as run:
            with probe.job_work():
                body(run)
        wall = time.perf_counter() - start
    job_thread_s = wall - probe.work_s
    tracking_s = job_thread_s + probe.sender_cpu_s
    print(f"{name}: {wall:.1f} s, tracking {tracking_s:.3f} s ({100 * tracking_s / wall:.2f}%)")
    return {
        "wall_s": wall,
        "tracking_s": tracking_s,
        "fraction": tracking_s / wall,
        "job_thread_s": job_thread_s,
        "sender_cpu_s": probe.sender_cpu_s,
        "inline_s": probe.sender_s,
        "calls": dict(run.calls),
    }


class Probe:
    """Times demo2rl.tracking from outside while :meth:`attached`: the job thread's time in the
    package's entry points, and the wall and CPU time of the calls its sender thread makes."""

    def __init__(self) -> None:
        self.calls_s = 0.0
        """The job thread's wall time in the package's entry points (nested calls count once)."""
        self.work_s = 0.0
        """The job's own work: the wall time of :meth:`job_work` blocks less their calls_s."""
        self.sender_s = 0.0
        """Wall time of the calls in the sender: what sending them inline would have cost."""
        self.sender_cpu_s = 0.0
        """CPU time of the sender thread in those calls (it competes with the job for cores)."""
        self._job_thread = threading.get_ident()
        self._depth = 0

    @contextlib.contextmanager
    def attached(self) -> Iterator[None]:
        """Wrap ``Run``'s public methods, ``Outbox.send`` and ``Outbox.flush`` with timers."""
        methods = [(tracking.Run, n) for n, f in vars(tracking.Run).items() if _public(n, f)]
        methods += [(tracking.Outbox, "flush")]
        with contextlib.ExitStack() as stack:
            for owner, name in methods:
                stack.enter_context(
                    mock.patch.object(owner, name, self._timed(getattr(owner, name)))
                )
            stack.enter_context(mock.patch.object(tracking.Outbox, "send", self._send()))
            yield

    @contextlib.contextmanager
    def job_work(self) -> Iterator[None]:
        """Count the block's wall time, less the tracking calls in it, as the job's own work."""
        start, calls = time.perf_counter(), self.calls_s
        try:
            yield
        finally:
            self.work_s += time.perf_counter() - start - (self.calls_s - calls)

    @contextlib.contextmanager
    def _in_tracking(self) -> Iterator[None]:
        """Count the block's wall time as the job thread's time in tracking (an outermost block
        on the job's thread only: other threads never wait for the job)."""
        if threading.get_ident() != self._job_thread:
            yield
            return
        self._depth += 1
        start = time.perf_counter()
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.calls_s += time.perf_counter() - start

    def _timed(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """``method``, its calls counted by :meth:`_in_tracking`."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self._in_tracking():
                return method(*args, **kwargs)

        return timed

    def _send(self) -> Callable[..., None]:
        """``Outbox.send``, counted like :meth:`_timed`, handing the sender each call wrapped in
        a wall-clock and a thread-CPU timer."""
        send = tracking.Outbox.send

        def timed_send(outbox: tracking.Outbox, name: str, call: Callable[[], object]) -> None:
            def timed_call() -> object:
                start, cpu = time.perf_counter(), time.thread_time()
                try:
                    return call()
                finally:
                    self.sender_s += time.perf_counter() - start
                    self.sender_cpu_s += time.thread_time() - cpu

            with self._in_tracking():
                send(outbox, name, timed_call)

        return timed_send


def _public(name: str, value: object) -> bool:
    """A public method (not a property, not a dunder): an entry point of the job's thread."""
    return not name.startswith("_") and inspect.isfunction(value)


def build_dataset(path: Path, config: dict[str, Any], n_episodes: int) -> Path:
    """The config's task and expert, ``n_episodes`` merged demonstrations (reused when present)."""
    if path.is_file() and dataset.read(path).n_episodes == n_episodes:
        return path
    print(f"collecting {n_episodes} demonstration episodes into {path} ...")
    collect_cfg = CollectConfig.of(config["collect"])
    # (no episode cap but the env's own, no time limit: as this benchmark always collected)
    task = dataclasses.replace(
        TaskConfig.of(config["task"]), max_episode_steps=None, timeout_s=None
    )
    shard = collect.collect_shard(
        task=task, base_seed=config["seed"], episodes=range(n_episodes), n_envs=collect_cfg.n_envs
    )
    merged = dataset.merge(
        [shard], ["bench"], n_episodes=n_episodes, valid_fraction=collect_cfg.valid_fraction
    )
    dataset.write(path, merged)
    return path


@contextlib.contextmanager
def workflow_env(uri: str) -> Iterator[None]:
    """``MLFLOW_TRACKING_URI`` set, and the variables start_workflow exports undone afterwards."""
    keys = ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME")
    keys += (tracking.PARENT_ENV,)
    saved = {k: os.environ.pop(k, None) for k in keys}
    os.environ["MLFLOW_TRACKING_URI"] = uri
    try:
        yield
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None)
            if value is not None:
                os.environ[key] = value


@contextlib.contextmanager
def mlflow_server(root: Path) -> Iterator[str]:
    """A real ``mlflow server`` on a free loopback port, stopped as a whole process group."""
    root.mkdir(parents=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [str(BIN / "mlflow"), "server", "--host=127.0.0.1", f"--port={port}", "--workers=1"]
    cmd += [f"--backend-store-uri=sqlite:///{root / 'mlflow.db'}"]
    cmd += [f"--artifacts-destination={root / 'artifacts'}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    with open(root / "server.log", "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((root / "server.log").read_text()[-2000:]) from None
                time.sleep(0.5)
        yield url
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM to the process group, SIGKILL if it is not gone after ``timeout`` s."""
    os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while True:
        proc.poll()  # reap the leader
        try:
            os.killpg(proc.pid, signal.SIGKILL if time.monotonic() > deadline else 0)
        except ProcessLookupError:
            return
        time.sleep(0.3)


def import_seconds(repeats: int = 3) -> float:
    """Median wall time of importing mlflow (and its client) in a fresh interpreter."""
    code = (
        "import time; t = time.perf_counter(); import mlflow; "
        "from mlflow.tracking import MlflowClient; print(time.perf_counter() - t)"
    )
    runs = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout)
        for _ in range(repeats)
    ]
    return statistics.median(runs)


if __name__ == "__main__":
    main()

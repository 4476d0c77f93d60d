"""Faults: a workflow hard-killed while it writes resumes to identical results; a broken expert,
a NaN reward, a bad file and a full disk fail the job with a clear error and leave no output; a
task whose every return is 0 divides by nothing. Every case runs the real workflow."""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from conftest import BIN, REPO, TEST_CONFIG, snakemake, unavailable
from user_tasks import nan_reward_step

from demo2rl import collect, dataset, seeds

pytestmark = pytest.mark.integration
CONFIG = yaml.safe_load(TEST_CONFIG.read_text())
EXP = CONFIG["experiment"]
SHARDS = [f"results/{EXP}/demos/shard-{k}.h5" for k in range(CONFIG["collect"]["n_shards"])]
DEMOS = f"results/{EXP}/demos/demos.h5"
BC_TARGET = f"results/{EXP}/bc/policy.pt"
BC_OUTPUTS = [BC_TARGET, f"results/{EXP}/bc/metrics.json"]
USER_CODE = {
    "PYTHONPATH": os.pathsep.join(
        filter(None, [str(Path(__file__).parent), os.getenv("PYTHONPATH")])
    )
}
"""The environment that lets a config name the user modules tests/user_tasks.py, user_expert.py."""


UNTRACKED = {"enabled": False}
"""The tracking section of the workflows here that check no tracking (conftest.untracked): all
but the hard kill, which runs as a user's would, tracked."""


def config_file(workdir: Path, experiment: str, **sections: dict) -> Path:
    """The test config under another experiment name, with ``sections`` replacing its keys
    section by section (a shallow update of each); written to ``workdir``."""
    spec = yaml.safe_load(TEST_CONFIG.read_text()) | {"experiment": experiment}
    for key, value in sections.items():
        spec[key] = spec.get(key, {}) | value
    path = workdir / f"{experiment}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def temp_files(directory: Path) -> list[str]:
    """The atomic writers' temporary files in ``directory`` (io.atomic_path: .<name>.tmp-<pid>)."""
    return sorted(p.name for p in directory.glob(".*.tmp-*")) if directory.is_dir() else []


# --------------------------------------------------------------------------------------------
# a hard kill while a job writes its output


def start(workdir: Path, *args: str) -> subprocess.Popen:
    """Snakemake in its own process group (so SIGKILL takes it and its jobs down at once)."""
    cmd = [
        str(BIN / "snakemake"),
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(workdir),
        "--configfile",
        str(TEST_CONFIG),
        "--cores",
        "2",
        *args,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DEMO2RL_"))}
    with open(workdir / "snakemake-output.log", "a") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )


class Creations:
    """The names created in a directory, as the kernel reports them (inotify): a file that
    exists for a few milliseconds is seen without polling."""

    IN_CREATE = 0x100

    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            init, add_watch = libc.inotify_init1, libc.inotify_add_watch
        except (OSError, AttributeError) as err:
            unavailable(f"inotify (Linux) is needed to catch a job while it writes: {err}")
        self.fd = init(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0 or add_watch(self.fd, os.fsencode(directory), self.IN_CREATE) < 0:
            unavailable(f"inotify on {directory}: {os.strerror(ctypes.get_errno())}")

    def wait(self, timeout: float) -> list[str]:
        """The names created since the last call, waiting up to ``timeout`` s for the first."""
        if not select.select([self.fd], [], [], timeout)[0]:
            return []
        data, names, i = os.read(self.fd, 1 << 16), [], 0
        while i < len(data):  # struct inotify_event: wd, mask, cookie, len, name[len]
            length = struct.unpack_from("iIII", data, i)[3]
            names.append(data[i + 16 : i + 16 + length].rstrip(b"\0").decode())
            i += 16 + length
        return names

    def close(self) -> None:
        os.close(self.fd)


WRITTEN = 1024
"""A write is caught once its temporary file holds more than this many bytes (more than the
header an HDF5 file has from its creation on)."""


@dataclass
class KilledWrite:
    tmp: Path  # the temporary file the killed writer was writing
    at_kill: int  # its size in bytes when the writer was stopped, then killed


def kill_while_writing(
    workdir: Path, outputs: list[str], rule: str, *args: str, attempts: int = 3
) -> KilledWrite:
    """Run the workflow (``args``) until a job of ``rule`` is writing one of ``outputs`` (files in
    one directory), and SIGKILL the whole workflow then, mid-write.

    The temporary file of an output is seen the moment it is created (inotify) and watched until
    it holds more than WRITTEN bytes; then the writer (whose pid is in the file's name) and the
    workflow are stopped (SIGSTOP) at once. If the temporary file is still there once the writer
    has stopped, the writer had not renamed it yet: the workflow is killed with the file half
    written. If the writer was faster (the rename came first), the workflow goes on to the next
    write, and is started again with ``--forcerun rule`` when it ends, up to ``attempts`` times.
    """
    directory = (workdir / outputs[0]).parent
    names = {Path(o).name for o in outputs}
    for attempt in range(attempts):
        creations = Creations(directory)
        proc = start(workdir, *args, *(("--forcerun", rule) if attempt else ()))
        try:
            deadline = time.time() + 300
            while proc.poll() is None and time.time() < deadline:
                for created in creations.wait(0.2):
                    match = re.fullmatch(r"\.(.+)\.tmp-(\d+)", created)
                    if not match or match[1] not in names:
                        continue
                    writer, tmp = int(match[2]), directory / created
                    if not _written(tmp):
                        continue  # renamed already: the write is over
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(writer, signal.SIGSTOP)
                    os.killpg(proc.pid, signal.SIGSTOP)
                    _wait_stopped(writer)
                    at_kill = _size(tmp)
                    if at_kill is not None:  # stopped before its rename: kill it mid-write
                        _kill_group(proc)
                        return KilledWrite(tmp, at_kill)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(writer, signal.SIGCONT)
                    os.killpg(proc.pid, signal.SIGCONT)
            if proc.poll() is None:
                pytest.fail(f"no write of {sorted(names)} within 5 minutes")
        finally:
            creations.close()
            if proc.poll() is None:
                _kill_group(proc)
        if proc.returncode != 0:
            output = (workdir / "snakemake-output.log").read_text()[-4000:]
            pytest.fail(f"workflow failed (rc {proc.returncode}) before a write:\n{output}")
    pytest.fail(f"every write of {sorted(names)} finished before it could be stopped")


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def _written(path: Path, timeout: float = 10) -> bool:
    """Whether ``path`` holds more than WRITTEN bytes before it disappears (busy-waits: a small
    file is written in a millisecond)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        size = _size(path)
        if size is None:
            return False
        if size > WRITTEN:
            return True
    pytest.fail(f"{path.name} stayed at {_size(path)} bytes for {timeout} s")


def _wait_stopped(pid: int, timeout: float = 10) -> None:
    """Until ``pid`` is stopped (or gone): a stop takes effect when it leaves the kernel, e.g. a
    rename in progress completes first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state in ("T", "t", "Z", "X"):
            return
        time.sleep(0.001)
    pytest.fail(f"process {pid} did not stop")


def _kill_group(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    while True:  # until every process of the group (the jobs too) is gone
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)


def dry_run(workdir: Path, target: str) -> str:
    """What a dry run for ``target`` without --rerun-incomplete says (Snakemake refuses to use
    the outputs of a job that did not finish, and names them)."""
    proc = snakemake(workdir, "--configfile", str(TEST_CONFIG), "-n", target, check=False)
    return proc.stdout + proc.stderr


def test_sigkill_while_writing_shard_dataset_and_clone_then_rerun_incomplete(tmp_path, request):
    """SIGKILL the workflow while a collection job writes its shard, then while the merge writes
    the dataset, then while BC writes the clone; `--rerun-incomplete` then gives what an
    uninterrupted run gave (the session's test_workflow), bit for bit. (The session's run is
    asked for once this test needs it: the kills go on while another worker makes it.)"""
    kills: list[tuple[str, KilledWrite, Path]] = []
    whole: dict[str, str] = {}  # outputs that finished before a kill: their content hash
    for outputs, rule, target in (
        (SHARDS, "collect_shard", SHARDS),
        ([DEMOS], "merge_demos", [DEMOS]),
        (BC_OUTPUTS, "train_bc", [BC_TARGET]),
    ):
        killed = kill_while_writing(tmp_path, outputs, rule, *target, "--rerun-incomplete")
        final = killed.tmp.with_name(re.sub(r"^\.(.+)\.tmp-\d+$", r"\1", killed.tmp.name))
        kills.append((rule, killed, final.relative_to(tmp_path)))
        # the writer died between creating and renaming its file, with data written: the
        # half-written temporary file is left behind (no cleanup runs on SIGKILL), under a name
        # that no rule declares, and nothing has the output's name
        assert killed.at_kill > WRITTEN
        assert killed.tmp.is_file(), f"{killed.tmp.name} was not left behind by the kill"
        assert not final.exists(), f"{final.name} looks complete after a kill mid-write"
        snakemake(tmp_path, "--configfile", str(TEST_CONFIG), "--unlock")  # left by the kill
        done = [path for path in outputs if (tmp_path / path).exists()]
        if done:
            # an output that exists is either the work of a job that the kill interrupted
            # (Snakemake knows it as incomplete and will not use it) or of one that finished
            # before the kill (another shard's job): then it is whole, equal to the reference
            # (compared below)
            listed = set(dry_run(tmp_path, target[0]).partition("Incomplete files:")[2].split())
            for path in set(done) - listed:
                assert path.endswith(".h5"), f"{path} not marked incomplete: {sorted(listed)}"
                whole[path] = dataset.read(tmp_path / path, verify=True).attrs["content_hash"]
    snakemake(
        tmp_path, "--configfile", str(TEST_CONFIG), "--cores", "2", "--rerun-incomplete", BC_TARGET
    )
    test_workflow: Path = request.getfixturevalue("test_workflow")
    for rule, killed, rel in kills:
        complete = (test_workflow / rel).stat().st_size
        print(f"killed {rule} writing {rel.name}: {killed.at_kill} of {complete} bytes")
    for path, content_hash in whole.items():
        reference = dataset.read(test_workflow / path).attrs["content_hash"]
        assert content_hash == reference, f"{path} is neither marked incomplete nor whole"
    ours, ref = (p / "results" / EXP for p in (tmp_path, test_workflow))
    for path in [*SHARDS, DEMOS]:
        name = Path(path).name
        assert (
            dataset.read(ours / "demos" / name, verify=True).attrs["content_hash"]
            == dataset.read(ref / "demos" / name).attrs["content_hash"]
        ), name
    a, b = (
        torch.load(p / "bc" / "policy.pt", weights_only=True)["state_dict"] for p in (ours, ref)
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    metrics = [json.loads((p / "bc" / "metrics.json").read_text()) for p in (ours, ref)]
    assert metrics[0]["bc_return_mean"] == metrics[1]["bc_return_mean"]
    for directory in (ours / "demos", ours / "bc"):
        assert not temp_files(directory), "the rerun removes the killed writers' temporary files"


# --------------------------------------------------------------------------------------------
# bad data and broken user code


def run_to(
    workdir: Path, target: str, *args: str, config: Path = TEST_CONFIG, env: dict | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the workflow to ``target`` on one core (``args``: more Snakemake options, ``env``:
    e.g. :data:`USER_CODE`); the caller checks how it failed."""
    return snakemake(
        workdir, "--configfile", str(config), "--cores", "1", target, *args, env=env, check=False
    )


def test_a_truncated_shard_is_named_by_the_merge(tmp_path, test_workflow, untracked_config):
    """The session run's shards, one of them cut to a third: the merge fails naming it."""
    for path in SHARDS:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(test_workflow / path, tmp_path / path)
    shard = tmp_path / SHARDS[1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 3])
    proc = run_to(tmp_path, DEMOS, "--forcerun", "merge_demos", config=untracked_config)
    assert proc.returncode != 0
    assert "rule collect_shard" not in proc.stdout + proc.stderr, "the shards were not redone"
    log = (tmp_path / "results" / EXP / "logs" / "merge_demos.log").read_text()
    assert f"{SHARDS[1]}: unreadable or incomplete HDF5 dataset" in log
    assert not (tmp_path / DEMOS).exists()


def test_an_expert_that_raises_fails_its_job_with_the_traceback_in_the_log(tmp_path):
    """A user's expert that raises mid-collection (tests/user_expert.py:breaking_pursuit, on its
    third call: after the workflow's task probe): the shard job fails, its log ends with the
    expert's traceback, and no shard file (nor a temporary one) is left."""
    exp = "faults-expert"
    expert = {"entry_point": "user_expert:breaking_pursuit", "kwargs": {"margin": 0.65}}
    config = config_file(tmp_path, exp, task={"expert": expert}, tracking=UNTRACKED)
    shard = tmp_path / "results" / exp / "demos" / "shard-0.h5"
    proc = run_to(tmp_path, str(shard.relative_to(tmp_path)), config=config, env=USER_CODE)
    assert proc.returncode != 0
    assert "Error in rule collect_shard" in proc.stdout + proc.stderr
    log = (tmp_path / "results" / exp / "logs" / "collect_shard" / "0.log").read_text()
    lines = log.rstrip().splitlines()
    assert "Traceback (most recent call last):" in log, log
    assert re.search(r'user_expert\.py", line \d+, in breaking_pursuit', log), log
    assert lines[-1] == "RuntimeError: breaking_pursuit broke on its call 3", lines[-3:]
    assert not shard.exists()
    assert not temp_files(shard.parent)


def test_a_nan_reward_fails_collection_naming_the_env_episode_and_step(tmp_path):
    """A user task whose reward turns NaN mid-episode (tests/user_tasks.py:NanRewardEnv, at a step
    set by the episode's seed): the shard job fails naming the env, the first episode to hit
    it (its global index and seed) and the step; no shard file is written."""
    exp = "faults-nan-reward"
    env_id = "user_tasks:NanReward-v0"
    task = {
        "env_id": env_id,
        "env_kwargs": {},
        "expert": {"entry_point": "user_tasks:zero_expert", "kwargs": {}},
    }
    config = config_file(tmp_path, exp, task=task, tracking=UNTRACKED)
    shard, n = 1, CONFIG["collect"]
    shard_path = tmp_path / "results" / exp / "demos" / f"shard-{shard}.h5"
    target = str(shard_path.relative_to(tmp_path))
    proc = run_to(tmp_path, target, config=config, env=USER_CODE)
    assert proc.returncode != 0
    # the shard's episodes run side by side (n_envs >= episodes per shard): the first NaN comes
    # at the smallest NaN step, in the first episode with that step
    episodes = collect.shard_episodes(n["n_episodes"], n["n_shards"], shard)
    assert n["n_envs"] >= len(episodes)
    ep_seeds = {e: seeds.demo_seed(CONFIG["seed"], e) for e in episodes}
    step, first = min((nan_reward_step(s), e) for e, s in ep_seeds.items())
    assert first != episodes.start, "the test should name an episode other than the shard's first"
    log = (tmp_path / "results" / exp / "logs" / "collect_shard" / f"{shard}.log").read_text()
    message = (
        f"demo2rl.rollout.RolloutError: {env_id} returned a non-finite reward (NaN or inf) "
        f"in episode {first} (seed {ep_seeds[first]}) at step {step}"
    )
    assert log.rstrip().splitlines()[-1] == message, log[-2000:]
    assert not shard_path.exists()
    assert not temp_files(shard_path.parent)


@pytest.fixture
def tmpfs(tmp_path):
    """A mount-a-tmpfs function (it needs root); everything mounted is unmounted afterwards."""
    mounted: list[Path] = []

    def mount(path: Path, size: str) -> Path:
        if os.geteuid() != 0:
            unavailable("mounting a tiny tmpfs needs root")
        path.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            unavailable(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", str(path)], check=False)


def test_a_full_disk_gives_a_clear_error(tmp_path, tmpfs, untracked_config):
    """The shard's directory is a 4 MiB tmpfs, filled up but for 256 KiB: the job fails naming the
    file, the space it needs and the space free; checked while the disk is still full, nothing
    (no shard, no temporary file) was left on it."""
    demos = tmpfs(tmp_path / "results" / EXP / "demos", "4m")
    with open(demos / "filler", "wb") as fh:
        fh.write(b"\0" * (shutil.disk_usage(demos).free - 256 * 1024))
    free = shutil.disk_usage(demos).free
    assert free <= 256 * 1024, "the tmpfs is full"
    proc = run_to(tmp_path, SHARDS[0], config=untracked_config)
    # still mounted and full: everything below is about the full disk, not the directory under it
    assert os.path.ismount(demos)
    assert proc.returncode != 0
    log = (tmp_path / "results" / EXP / "logs" / "collect_shard" / "0.log").read_text()
    match = re.search(
        rf"{re.escape(SHARDS[0])}: not enough disk space: the file needs about ([\d.]+) MiB, "
        rf"([\d.]+) MiB are free in {re.escape(str(Path(SHARDS[0]).parent))}",
        log,
    )
    assert match, log[-2000:]
    need_mib, free_mib = map(float, match.groups())
    assert math.isclose(free_mib, free / 2**20, abs_tol=0.051), (free_mib, free)
    assert need_mib > free_mib
    assert os.listdir(demos) == ["filler"], "no shard and no temporary file on the full disk"
    assert shutil.disk_usage(demos).free == free


# --------------------------------------------------------------------------------------------
# a task whose every return is 0


ZERO_WARNINGS = re.compile(
    r"divide by zero|invalid value|ZeroDivision|Mean of empty slice|Degrees of freedom"
    r"|RuntimeWarning"
)


def test_a_task_whose_every_return_is_0_runs_end_to_end_without_dividing_by_0(tmp_path):
    """A sparse-reward user task the expert never solves (tests/user_tasks.py:SparseGoalEnv):
    every policy's return is 0. The workflow runs end to end, the summary's numbers are finite
    and what they must be (means, IQMs and intervals 0; every P(X > Y) one half, all ties), and
    no job warned of a division by zero or an invalid value."""
    exp = "faults-sparse"
    spec = {
        "experiment": exp,
        "seed": 3,
        "task": {
            "env_id": "user_tasks:SparseGoal-v0",
            "env_kwargs": {},
            "expert": {"entry_point": "user_tasks:hold_expert", "kwargs": {}},
        },
        "collect": {"n_episodes": 8, "n_shards": 1, "n_envs": 4, "valid_fraction": 0.25},
        "bc": {"max_epochs": 3},
        "rl": {
            "seeds": [0],
            "inits": ["bc", "scratch"],
            "total_timesteps": 1024,
            "n_envs": 4,
            "vec_env": "dummy",
            "checkpoint_every": 512,
            "eval_every": 512,
            "ppo": {"n_steps": 128, "batch_size": 256, "n_epochs": 1},
        },
        "evaluate": {"episodes": 4, "during_training": 2, "n_envs": 4, "bootstrap_reps": 200},
        "tracking": UNTRACKED,
    }
    config = tmp_path / f"{exp}.yaml"
    config.write_text(yaml.safe_dump(spec))
    proc = snakemake(tmp_path, "--cores", "2", "--configfile", str(config), env=USER_CODE)
    out = tmp_path / "results" / exp
    demos = dataset.read(out / "demos" / "demos.h5")
    assert (demos.episodes["return"] == 0).all() and demos.n_episodes == 8
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert set(summary["groups"]) == {"expert", "bc", "rl_bc", "rl_scratch"}
    for group, st in summary["groups"].items():
        for value in (st["mean"], st["iqm"], *st["mean_ci"], *st["iqm_ci"]):
            assert value == 0.0, (group, st)
    assert summary["probability_of_improvement"]
    for key, c in summary["probability_of_improvement"].items():
        assert c["probability"] == 0.5 and c["ci"] == [0.5, 0.5], (key, c)
    assert summary["curve_levels"] == {"expert": 0.0, "bc": 0.0}
    first_eval = {g: band["step"][0] for g, band in summary["learning_curves"].items()}
    assert summary["steps_to_expert"] == first_eval  # a level of 0 is reached at once
    for band in summary["learning_curves"].values():
        assert band["mean"] == band["low"] == band["high"] == [0.0] * len(band["step"]), band
    numbers = list(_numbers({k: summary[k] for k in ("groups", "runs", "learning_curves")}))
    assert numbers and all(v is not None and math.isfinite(v) for v in numbers), numbers
    metrics = json.loads((out / "bc" / "metrics.json").read_text())
    assert metrics["expert_return_mean"] == 0.0 and metrics["bc_return_mean"] == 0.0
    ratio = metrics["bc_vs_expert"]  # the clone's share of a return of 0: undefined
    assert ratio is None or math.isnan(ratio), ratio
    for name in ("policies.csv", "improvement.csv", "summary.md"):
        text = (out / "report" / name).read_text()
        assert not re.search(r"\b(nan|inf)\b", text, re.IGNORECASE), (name, text)
    assert (out / "report" / "plots" / "final_returns.png").stat().st_size > 0
    logs = {p: p.read_text() for p in (out / "logs").rglob("*.log")}
    logs[Path("snakemake output")] = proc.stdout + proc.stderr
    warned = {str(p): ZERO_WARNINGS.findall(text) for p, text in logs.items()}
    assert not {p: w for p, w in warned.items() if w}, warned


def _numbers(obj, key=None):
    """Every number (or null) in a JSON document, but for the ``seed`` (null for expert, clone)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, k)
    elif isinstance(obj, list):
        for v in obj:
            yield from _numbers(v, key)
    elif key != "seed" and (obj is None or isinstance(obj, (int, float))):
        yield obj

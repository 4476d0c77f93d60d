"""Faults: a workflow hard-killed while it writes resumes to identical results; a broken expert,
a NaN reward, a bad file and a full disk fail the job with a clear error and leave no output; a
task whose every return is 0 divides by nothing. Every case runs the real workflow, but for the
full disks: each writer is run on a real tiny filesystem (tmpfs), and a full MLflow store under
one tracked job."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
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
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import BIN, REPO, TEST_CONFIG, copy_run, isolated_tracking_env, snakemake, unavailable
from test_dataset_images import make_image_demos
from user_tasks import nan_reward_step

from demo2rl import io, seeds
from demo2rl.demos import collect, dataset

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
"""The tracking section of the workflows here, which check no tracking (conftest.untracked): all
of them, the hard kill too (tracking cost it half its CPU time; a full MLflow store is tested
under a tracked job below)."""


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


def start(workdir: Path, config: Path, *args: str) -> subprocess.Popen:
    """Snakemake with ``config`` in its own process group (so SIGKILL takes it and its jobs
    down at once)."""
    cmd = [
        str(BIN / "snakemake"),
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(workdir),
        "--configfile",
        str(config),
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

    @property
    def output(self) -> Path:
        """The output the killed writer was writing (a job writes several: which one was caught
        depends on how soon the test saw each temporary file)."""
        return self.tmp.with_name(re.sub(r"^\.(.+)\.tmp-\d+$", r"\1", self.tmp.name))


def kill_while_writing(
    workdir: Path, config: Path, outputs: list[str], rule: str, *args: str, attempts: int = 10
) -> KilledWrite:
    """Run the workflow (``args``) until a job of ``rule`` is writing one of ``outputs`` (files in
    one directory), and SIGKILL the whole workflow then, mid-write.

    The temporary file of an output is seen the moment it is created (inotify), and its writer
    (whose pid is in the file's name) is stopped (SIGSTOP) at once, then let on a millisecond at
    a time until the file holds more than WRITTEN bytes: the workflow is then killed with the
    file half written. If a step took the writer past its rename (a small file), the workflow
    goes on to the next write, and is started again with ``--forcerun rule`` when it ends, up to
    ``attempts`` times.
    """
    directory = (workdir / outputs[0]).parent
    names = {Path(o).name for o in outputs}
    for attempt in range(attempts):
        creations = Creations(directory)
        proc = start(workdir, config, *args, *(("--forcerun", rule) if attempt else ()))
        try:
            deadline = time.time() + 300
            while proc.poll() is None and time.time() < deadline:
                for created in creations.wait(0.2):
                    match = re.fullmatch(r"\.(.+)\.tmp-(\d+)", created)
                    if not match or match[1] not in names:
                        continue
                    writer, tmp = int(match[2]), directory / created
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(writer, signal.SIGSTOP)  # at once: the write has barely begun
                    _wait_stopped(writer)
                    at_kill = _step_until_written(writer, tmp)
                    if at_kill is not None:  # stopped before its rename: kill it mid-write
                        _kill_group(proc)
                        return KilledWrite(tmp, at_kill)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(writer, signal.SIGCONT)  # renamed in a step: the write is over
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


def _step_until_written(writer: int, path: Path, timeout: float = 600) -> int | None:
    """Let the stopped ``writer`` run a millisecond at a time until ``path`` holds more than
    WRITTEN bytes; its size then, the writer stopped again, or None if the file was renamed in
    a step. Stepping, not watching a free-running writer: however loaded the machine, the
    writer cannot run ahead of the test by more than a step."""
    deadline = time.monotonic() + timeout  # a bound on a hang, not a speed
    while time.monotonic() < deadline:
        size = _size(path)
        if size is None or size > WRITTEN:
            return size
        try:
            os.kill(writer, signal.SIGCONT)
        except ProcessLookupError:
            return _size(path)
        time.sleep(0.001)
        with contextlib.suppress(ProcessLookupError):
            os.kill(writer, signal.SIGSTOP)
        _wait_stopped(writer)
    pytest.fail(f"{path.name} stayed at {_size(path)} bytes for {timeout} s")


def _wait_stopped(pid: int, timeout: float = 60) -> None:
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


def unlock(workdir: Path) -> None:
    """What ``snakemake --unlock`` does once a kill has left ``workdir`` locked: remove its
    lock directory (Snakemake's file persistence), without the seconds a workflow start costs
    (config, schema, task probe)."""
    shutil.rmtree(workdir / ".snakemake" / "locks")


@pytest.mark.slow
def test_sigkill_while_writing_shard_dataset_and_clone_then_rerun_incomplete(
    tmp_path, test_workflow, untracked_config
):
    """In a copy of the session's finished run (test_workflow), SIGKILL the workflow while a
    collection job rewrites its shard, then, going on with `--rerun-incomplete`, while the merge
    writes the dataset, then while BC writes the clone or its metrics. Each kill leaves the
    half-written temporary file and nothing under the output's name, and whatever the job wrote
    before it is marked incomplete; the last rerun gives what the uninterrupted run gave, bit
    for bit, and removes the temporary files.

    The copy spares the kills every job they do not test: one shard job is forced (the other
    shards are the session's), the merge after it reruns only that shard, and BC reruns only
    the merge (from scratch, each kill reran the jobs upstream of it). Untracked, as tracking
    changes no result (test_rerun_matrix): it took half the test's CPU time."""
    workdir = copy_run(test_workflow, tmp_path / "run")
    kills: list[tuple[str, KilledWrite, Path]] = []
    for outputs, rule, args in (
        ([SHARDS[1]], "collect_shard", (SHARDS[1], "--forcerun", "collect_shard")),
        ([DEMOS], "merge_demos", (DEMOS,)),
        (BC_OUTPUTS, "train_bc", (BC_TARGET,)),
    ):
        killed = kill_while_writing(
            workdir, untracked_config, outputs, rule, *args, "--rerun-incomplete"
        )
        kills.append((rule, killed, killed.output.relative_to(workdir)))
        # the writer died between creating and renaming its file, with data written: the
        # half-written temporary file is left behind (no cleanup runs on SIGKILL), under a name
        # that no rule declares, and the output it was writing does not exist (Snakemake
        # removed the session's before the job started)
        assert killed.at_kill > WRITTEN
        assert killed.tmp.is_file(), f"{killed.tmp.name} was not left behind by the kill"
        final = killed.output
        assert not final.exists(), f"{final.name} looks complete after a kill mid-write"
        unlock(workdir)
        # outputs the job wrote before the one caught (train_bc: the clone, then its metrics;
        # which write is caught depends on timing) may exist, but Snakemake knows them as
        # incomplete: it refuses to go on without --rerun-incomplete, naming each of them
        left = [path for path in outputs if (workdir / path).exists()]
        if left:
            plan = snakemake(
                workdir, "-n", *args[:1], "--configfile", str(untracked_config), check=False
            )
            said = plan.stdout + plan.stderr
            assert plan.returncode != 0 and "incomplete" in said, said[-2000:]
            assert all(path in said for path in left), (left, said[-2000:])
    rerun = ("--configfile", str(untracked_config), "--cores", "2", "--rerun-incomplete")
    snakemake(workdir, *rerun, BC_TARGET)
    for rule, killed, rel in kills:
        complete = (test_workflow / rel).stat().st_size
        print(f"killed {rule} writing {rel.name}: {killed.at_kill} of {complete} bytes")
    ours, ref = (p / "results" / EXP for p in (workdir, test_workflow))
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
        f"demo2rl.demos.rollout.RolloutError: {env_id} returned a non-finite reward (NaN or inf) "
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
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            # a file still open (MLflow's store, torch's writer held by a caught error's
            # traceback): detached now, freed once closed
            subprocess.run(["umount", "--lazy", str(path)], check=False)


def fill(directory: Path, leave: int) -> int:
    """Fill the filesystem of ``directory`` (a file ``filler`` in it) until ``leave`` bytes are
    free, or up to a page (4 KiB) more; returns the bytes free then."""
    with open(directory / "filler", "ab") as fh:
        fh.write(b"\0" * (max(0, shutil.disk_usage(directory).free - leave) // 4096 * 4096))
    return shutil.disk_usage(directory).free


def image_demos(frames: int, first: int = 0) -> dataset.Demos:
    """A shard of ``frames`` 32x32x3 frames in 4 episodes (3 KiB a frame, stored uncompressed
    with codec "none", so that its size is known)."""
    return make_image_demos(4, first, shape=(32, 32, 3), lengths=np.full(4, frames // 4))


def check_then_fill(monkeypatch: pytest.MonkeyPatch, disk: Path, leave: int) -> list[Path]:
    """dataset's space check runs as it is (and passes); then another writer takes all but
    ``leave`` bytes of ``disk``, before the file is written. Returns the paths checked."""
    checked: list[Path] = []
    real = dataset._check_space

    def check(path: Path, nbytes: int) -> None:
        real(path, nbytes)
        checked.append(path)
        fill(disk, leave)

    monkeypatch.setattr(dataset, "_check_space", check)
    return checked


def assert_disk_full(err: io.DiskFull, path: Path) -> None:
    """``err`` names ``path`` and the space free on its filesystem (now), and the full disk
    holds neither the file nor a temporary file, only the filler."""
    free = shutil.disk_usage(path.parent).free
    assert isinstance(err, OSError) and err.errno == errno.ENOSPC
    assert (err.path, err.free) == (path, free)
    assert str(err).startswith(f"{path}: not enough disk space: the disk filled up "), err
    assert str(err).endswith(f"; {io.size_text(free)} are free in {path.parent}"), err
    assert os.listdir(path.parent) == ["filler"], "no file and no temporary file"


def test_the_space_check_refuses_a_shard_that_would_not_fit_with_its_margin(tmp_path, tmpfs):
    """A shard of 1.0 MiB of data on a disk with 1.5 MiB free: room for the file itself, but
    not for the 5% and 1 MiB the space check adds (for HDF5's structures), so only the check can
    refuse it. The write fails before it starts, naming the file, the space it needs and the
    space free, and writes nothing; with the space it asks for free, the same shard is written
    (and takes less than the 1.5 MiB of the first try)."""
    demos = image_demos(320)
    nbytes = sum(a.nbytes for g in (demos.steps, demos.episodes, demos.info) for a in g.values())
    need = math.ceil(nbytes * 1.05) + 2**20
    disk = tmpfs(tmp_path / "demos", "4m")
    path = disk / "shard-0.h5"
    free = fill(disk, nbytes + 2**19)
    with pytest.raises(io.DiskFull) as caught:
        dataset.write(path, demos, codec="none")
    assert (caught.value.need, caught.value.free) == (need, free)
    assert str(caught.value) == (
        f"{path}: not enough disk space: the file needs about {io.size_text(need)}, "
        f"{io.size_text(free)} are free in {disk}"
    )
    assert os.listdir(disk) == ["filler"] and shutil.disk_usage(disk).free == free
    (disk / "filler").unlink()
    fill(disk, need)
    dataset.write(path, demos, codec="none")
    assert dataset.read(path, verify=True).n_steps == 320
    assert path.stat().st_size < free, "the first try had room for the file"


def test_a_shard_that_fills_the_disk_while_it_is_written(tmp_path, tmpfs, monkeypatch):
    """The space check passes; then another writer leaves 256 KiB of the disk for a shard of
    1 MiB: its write runs out of space. The error names the file and the free space, HDF5 has
    not crashed the process (it does when it cannot flush its caches at close), and neither
    the shard nor its temporary file is left."""
    disk = tmpfs(tmp_path / "demos", "4m")
    path = disk / "shard-0.h5"
    checked = check_then_fill(monkeypatch, disk, 2**18)
    with pytest.raises(io.DiskFull) as caught:
        dataset.write(path, image_demos(320), codec="none")
    assert checked == [path]
    assert_disk_full(caught.value, path)


def test_a_merge_that_fills_the_disk_while_it_writes(tmp_path, tmpfs, monkeypatch):
    """Two shards of 0.5 MiB (on another disk) merged onto one that the space check finds big
    enough, and that another writer then fills but for 256 KiB: the merge stops when the disk
    is full, with the error naming the merged file and the free space, not a shard (the merge
    names a shard it cannot read), and leaves no file."""
    shards = [image_demos(160), image_demos(160, first=4)]
    paths = [tmp_path / f"shard-{k}.h5" for k in range(2)]
    for shard, shard_path in zip(shards, paths, strict=True):
        dataset.write(shard_path, shard, codec="none")
    disk = tmpfs(tmp_path / "demos", "4m")
    path = disk / "demos.h5"
    checked = check_then_fill(monkeypatch, disk, 2**18)
    with pytest.raises(io.DiskFull) as caught:
        dataset.merge_files(paths, path, n_episodes=8, valid_fraction=0.25, codec="none")
    assert checked == [path]
    assert_disk_full(caught.value, path)


def test_a_policy_checkpoint_that_fills_the_disk(tmp_path, tmpfs):
    """The clone's and every RL policy's checkpoint (checkpoints.save_checkpoint), 1 MiB of
    weights, on a disk with 64 KiB free."""
    from configs import policy as policy_config

    from demo2rl.learning import checkpoints
    from demo2rl.learning import policy as P

    cfg = policy_config(net_arch={"pi": [256, 256], "vf": [256, 256]})
    obs, act = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-1, 1, (1,), np.float32)
    policy, norm = P.build_policy(obs, act, cfg), P.ObsNormalizer(np.zeros(3), np.ones(3))
    disk = tmpfs(tmp_path / "bc", "1m")
    fill(disk, 2**16)
    path = disk / "policy.pt"
    with pytest.raises(io.DiskFull) as caught:
        checkpoints.save_checkpoint(
            path, policy, norm, policy_cfg=cfg, observation_space=obs, action_space=act, meta={}
        )
    assert_disk_full(caught.value, path)


def test_an_rl_checkpoint_that_fills_the_disk(tmp_path, tmpfs):
    """RL's resumable state (rl.state.save_state: torch.save to a path, whose C++ writer fails
    with a RuntimeError that names no cause), 1 MiB of weights, on a disk with 64 KiB free."""
    from demo2rl.rl import resume_point, state

    policy = torch.nn.Linear(512, 512)
    policy.optimizer = torch.optim.Adam(policy.parameters())
    at = resume_point.ResumePoint(
        timesteps=1024,
        n_updates=8,
        rng={"torch": torch.get_rng_state()},
        last_obs=np.zeros((4, 3), np.float32),
        episode_starts=np.zeros(4, bool),
        episode_infos=[],
        successes=[],
        env=None,
    )
    disk = tmpfs(tmp_path / "state", "1m")
    fill(disk, 2**16)
    path = disk / state.CHECKPOINT
    with pytest.raises(io.DiskFull) as caught:
        state.save_state(path, SimpleNamespace(policy=policy), {"evaluations": []}, at)
    assert_disk_full(caught.value, path)


def test_rl_progress_rows_that_fill_the_disk(tmp_path, tmpfs):
    """An RL run whose state directory fills up while SB3 appends its progress rows (its own
    CSV writer, in place): the run fails with DiskFull naming the progress segment and the free
    space, not SB3's bare OSError; no checkpoint is left half-written."""
    from test_rl import dataset_and_clone, train

    demos, _ = dataset_and_clone(
        tmp_path / "demos",
        "user_tasks:LateNanReward-v0",
        {},
        "user_tasks:zero_expert",
        8,
        batch_size=64,
        max_epochs=1,
    )
    disk = tmpfs(tmp_path / "rl", "1m")
    fill(disk, 8192)  # room for key.json and a page of progress rows
    state_dir = disk / "state"
    with pytest.raises(io.DiskFull) as caught:
        train(
            (demos, None),
            state_dir,
            "scratch",
            task=("user_tasks:LateNanReward-v0", {}),
            vec_env="dummy",
            total_timesteps=65_536,
            checkpoint_every=10**9,
        )
    segment = state_dir / "progress-000000000.csv"
    assert caught.value.path == segment and caught.value.free < 8192  # free when it failed
    assert str(caught.value) == (
        f"{segment}: not enough disk space: the disk filled up while writing it; "
        f"{io.size_text(caught.value.free)} are free in {state_dir}"
    )
    assert sorted(p.name for p in state_dir.iterdir()) == ["key.json", segment.name]


def _markdown(path: Path) -> None:  # as stages.summarize writes summary.md
    with io.atomic_path(path) as tmp:
        tmp.write_text("| policy | return |\n|---|---|\n" + "| bc | 1.0 |\n" * 4000)


def _table(path: Path) -> None:  # as stages.train_rl writes progress.csv and evaluations.csv
    with io.atomic_path(path) as tmp:
        pd.DataFrame({"step": range(4000), "return_mean": 0.5}).to_csv(tmp, index=False)


def _summary_csv(path: Path) -> None:
    from demo2rl.stages import summarize

    summarize._write_csv(str(path), [{"policy": "bc", "return": 1.0}] * 4000)


def _figure(path: Path) -> None:
    from demo2rl.report import plots

    history = [{"epoch": e, "train_nll": 1 / e, "valid_nll": 1.1 / e} for e in range(1, 40)]
    plots.loss_curves(history, path)


def _animation(path: Path) -> None:
    from demo2rl.report import plots

    rng = np.random.default_rng(0)
    plots.animation(list(rng.integers(0, 256, (4, 64, 64, 3), dtype=np.uint8)), path, fps=10)


WRITERS = {
    "evaluation.json": lambda path: io.write_json(path, {"returns": list(range(4000))}),
    "summary.md": _markdown,
    "policies.csv": _summary_csv,
    "progress.csv": _table,
    "bc_loss.png": _figure,
    "episode.gif": _animation,
}
"""The other writers, by the file they write: JSON (evaluations, the summary, BC's metrics, RL's
state), Markdown, CSV (the summary's tables; pandas: RL's progress and evaluations), figures
and animations. Each writes more than 8 KiB."""


@pytest.mark.parametrize("name", WRITERS)
def test_every_other_writer_on_a_full_disk(tmp_path, tmpfs, name):
    """Each on a disk with 8 KiB free."""
    disk = tmpfs(tmp_path / "out", "256k")
    fill(disk, 2**13)
    path = disk / name
    with pytest.raises(io.DiskFull) as caught:
        WRITERS[name](path)
    assert_disk_full(caught.value, path)


def test_a_full_disk_under_the_mlflow_store_degrades_tracking_as_an_outage(
    tmp_path, tmpfs, monkeypatch, caplog
):
    """The SQLite store has a filesystem of its own, which fills up once the workflow has
    started (store, experiment and parent run made). A merge job then cannot create its run nor
    log to it ("database or disk is full"): its tracking degrades as in an outage (buffered,
    retried, given up at the job's end, saying why) and the job's dataset is complete. With
    space free again, the store is intact and records the end of the workflow."""
    import sqlite3

    from mlflow.tracking import MlflowClient

    from demo2rl import tracking
    from demo2rl.config import TrackingConfig
    from demo2rl.specs.merge_demos import MergeJob, Split
    from demo2rl.stages.merge_demos import merge_demos
    from demo2rl.tracking import outbox

    isolated_tracking_env(monkeypatch)
    store = tmpfs(tmp_path / "store", "16m")
    uri = f"sqlite:///{store / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setattr(outbox, "FLUSH_GRACE_S", 2.0)
    settings = TrackingConfig(enabled=True, fail_on_error=False)
    results = tmp_path / "results"
    parent = tracking.start_workflow("faults-store", {}, settings, results_dir=results)
    assert parent is not None
    shards = [results / f"shard-{k}.h5" for k in range(2)]
    for k, path in enumerate(shards):
        dataset.write(path, make_image_demos(4, first=4 * k))
    out = results / "demos.h5"
    fill(store, 0)
    caplog.set_level(logging.INFO, logger="demo2rl.tracking")
    with tracking.child_run(
        "merge-demos",
        stage="merge",
        rule="merge_demos",
        wildcards={},
        params={"n_episodes": 8},
        inputs=shards,
        outputs=[out],
        settings=settings,
    ) as run:
        job = MergeJob(
            collect=Split(n_episodes=8, valid_fraction=0.25),
            shards=[str(p) for p in shards],
            out=str(out),
            codec="gzip",
        )
        merge_demos(job, run)
    assert dataset.read(out, verify=True).n_episodes == 8
    full = re.escape("sqlite3.OperationalError: database or disk is full; ")
    assert re.search(rf"MLflow tracking failed \(create_run: {full}", caplog.text)
    assert re.search(rf"\(last error: {full}.*\): giving up on \d+ tracking calls", caplog.text)
    assert run.run_id is None and run.outbox.dropped > 0
    (store / "filler").unlink()
    tracking.end_workflow(True, settings)
    assert MlflowClient(uri).get_run(parent).info.status == "FINISHED"
    with contextlib.closing(sqlite3.connect(store / "mlflow.db")) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


# --------------------------------------------------------------------------------------------
# a task whose every return is 0


ZERO_WARNINGS = re.compile(
    r"divide by zero|invalid value|ZeroDivision|Mean of empty slice|Degrees of freedom"
    r"|RuntimeWarning"
)


@pytest.mark.slow
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
            "arms": ["bc", "scratch"],
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

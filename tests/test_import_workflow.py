"""Demonstrations from elsewhere, through the real workflow: a Minari dataset made in the test
with Minari's own API (no expert to call) runs the workflow end to end; its export, imported
again, is the same dataset (content hash); a dataset whose spaces are not the task's, and what
needs an expert without one, are refused before any job, naming the culprit. Camera frames as
users have them, JPEG-encoded by Minari, import as Minari decodes them, train the clone and an
arm, and import in memory bounded as the merge of collected frames is."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import configs
import h5py
import minari
import numpy as np
import pytest
import torch
import yaml
from conftest import REPO, TEST_CONFIG, snakemake, untracked
from test_dataset_images import child_peak_rss
from test_minari_io import make_minari

from demo2rl import names, tasks
from demo2rl.demos import dataset, minari_io, rollout

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("import-workflow")]

EXPERIMENT = "test-import"
RACING = {"env_id": "Racing-v0", "env_kwargs": {"max_steps": 150}}
N_EPISODES = 8


def racing_episodes(
    n: int,
    task: dict[str, Any] = RACING,
    *,
    frame_stack: int = 1,
    expert_input: str = rollout.OBSERVATION,
) -> tuple[list[dict[str, Any]], Any, Any]:
    """``n`` episodes of ``task`` (the test task; or its camera, the expert reading
    ``expert_input``) driven by the racing expert, as Minari's buffers take them (T+1
    observations, ``frame_stack`` stacked), with the task's spaces: a recording of "another
    controller"."""
    expert = tasks.load_expert("demo2rl.experts.racing:pure_pursuit", {"margin": 0.65})
    seeds = [1000 + e for e in range(n)]
    task_cfg = dataclasses.replace(
        configs.task(task["env_id"], task["env_kwargs"]), frame_stack=frame_stack
    )
    steps, table, _ = rollout.run_episodes(
        task_cfg, expert, seeds, n_envs=4, policy_input=expert_input
    )
    obs_space, act_space = tasks.spaces(task["env_id"], task["env_kwargs"], frame_stack)
    episodes = []
    for e in range(n):
        rows = slice(table["start"][e], table["start"][e] + table["length"][e])
        obs = np.concatenate([steps["observations"][rows], table["final_observation"][e][None]])
        episodes.append(
            {
                "seed": seeds[e],
                "observations": obs,
                "actions": steps["actions"][rows],
                "rewards": steps["rewards"][rows],
                "terminations": steps["terminated"][rows],
                "truncations": steps["truncated"][rows],
            }
        )
    return episodes, obs_space, act_space


def import_config(workdir: Path, source: str, **changes: Any) -> Path:
    """The test config, untracked, importing ``source`` with no expert, one seed of two arms
    (the warm start reads the clone, scratch does not), and no variants; ``changes`` replace
    whole sections."""
    spec = untracked(yaml.safe_load(TEST_CONFIG.read_text()))
    spec |= {"experiment": EXPERIMENT, "variants": {}}
    spec["task"] = copy.deepcopy(RACING) | {"expert": {"entry_point": None}}
    spec["collect"] = {"source": source, "valid_fraction": 0.25}
    spec["rl"] |= {"arms": ["bc", "scratch"], "seeds": [0]}
    spec |= changes
    path = workdir / "import.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Minari store of the module's own, holding ``test/racing-v0``: the racing expert's
    episodes written with Minari's API, with no env spec (the task config names the env)."""
    path = tmp_path_factory.mktemp("minari-store")
    with minari_io._store(path):
        make_minari("test/racing-v0", *racing_episodes(N_EPISODES))
    return path


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory, store: Path) -> Path:
    """The workflow run end to end on the store's dataset, named by its Minari id (the store
    found through MINARI_DATASETS_PATH, as a user sets it); its working directory."""
    workdir = tmp_path_factory.mktemp("import-run")
    config = import_config(workdir, "minari:test/racing-v0")
    env = {"MINARI_DATASETS_PATH": str(store)}
    snakemake(workdir, "--cores", "2", "--configfile", str(config), env=env)
    return workdir


def results(workdir: Path) -> Path:
    return workdir / "results" / EXPERIMENT


def test_an_imported_minari_dataset_runs_the_workflow_without_an_expert(imported, store):
    out = results(imported)
    demos = dataset.read(out / "demos" / "demos.h5", verify=True)
    episodes, _, _ = racing_episodes(N_EPISODES)
    # the dataset holds the Minari episodes as they were recorded, split and hashed as ours
    assert demos.n_episodes == N_EPISODES
    for e, ep in enumerate(episodes):
        rows = demos.step_rows(np.array([e]))
        np.testing.assert_array_equal(demos.steps["observations"][rows], ep["observations"][:-1])
        np.testing.assert_array_equal(demos.steps["actions"][rows], ep["actions"])
        np.testing.assert_array_equal(
            demos.episodes["final_observation"][e], ep["observations"][-1]
        )
        assert demos.episodes["seed"][e] == ep["seed"]
    assert len(demos.split["valid"]) == 2 and demos.stats is not None
    # no collection ran, no expert was evaluated: the jobs are the import and what follows it
    logs = out / "logs"
    assert (logs / "import_demos.log").is_file() and not (logs / "collect_shard").exists()
    assert not (out / "eval" / f"{names.EXPERT}.json").exists()
    bc = json.loads((out / "bc" / "metrics.json").read_text())
    assert bc["expert_return_mean"] is None and bc["bc_vs_expert"] is None
    # the reference row is the dataset's own episodes, said plainly as not held-out
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert names.EXPERT not in summary["groups"]
    reference = summary["reference"]
    assert reference["n_tracks"] == N_EPISODES
    assert reference["mean"] == pytest.approx(float(demos.episodes["return"].mean()))
    assert "not held-out" in reference["label"]
    assert "**not held-out**" in (out / "report" / "summary.md").read_text()


def test_the_export_imported_again_is_the_same_dataset(imported, store, tmp_path):
    """`snakemake export` writes the dataset as a Minari dataset that Minari loads; a workflow
    importing that export, with the env its env spec records (``task.env_id: dataset``), writes
    a dataset of the same content hash."""
    config = imported / "import.yaml"
    env = {"MINARI_DATASETS_PATH": str(store)}
    snakemake(imported, "export", "--cores", "1", "--configfile", str(config), env=env)
    exported = results(imported) / names.MINARI_DIR
    with minari_io._store(exported):
        loaded = minari.load_dataset(f"demo2rl/{EXPERIMENT}-v0")
        assert loaded.total_episodes == N_EPISODES
    again = tmp_path / "again"
    again.mkdir()
    source = exported / "demo2rl" / f"{EXPERIMENT}-v0"  # a Minari dataset's directory
    # the env as the export records it (its env spec): env_id dataset, no kwargs of our own
    task = {"env_id": "dataset", "expert": {"entry_point": None}}
    config = import_config(again, str(source), task=task)
    demos = f"results/{EXPERIMENT}/demos/demos.h5"
    snakemake(again, demos, "--cores", "1", "--configfile", str(config))
    first = dataset.read_attrs(results(imported) / "demos" / "demos.h5")["content_hash"]
    assert dataset.verify(again / demos) == first


def plan_error(workdir: Path, config: Path, env: dict[str, str] | None = None) -> str:
    """The error of a run of ``config`` that must fail before any job: a real run (not a dry
    one, which would write nothing either way), which leaves no results."""
    proc = snakemake(workdir, "--cores", "1", "--configfile", str(config), env=env, check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Invalid config" in said, said[-2000:]
    assert not (workdir / "results").exists(), "a job ran"
    return said


def test_a_dataset_of_other_spaces_is_refused_before_any_job(tmp_path, store):
    """A Minari dataset of another observation space (another task's recording) fails the
    plan, naming collect.source and both spaces; so does a demo2rl file of another task."""
    with minari_io._store(store):
        import gymnasium as gym

        obs = gym.spaces.Box(-1.0, 1.0, (7,), np.float32)
        act = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        rng = np.random.default_rng(0)
        episode = {
            "observations": rng.uniform(-1, 1, (6, 7)).astype(np.float32),
            "actions": rng.uniform(-1, 1, (5, 2)).astype(np.float32),
            "rewards": np.ones(5),
            "terminations": np.array([False] * 4 + [True]),
            "truncations": np.zeros(5, bool),
        }
        make_minari("test/other-v0", [episode], obs, act)
    said = plan_error(
        tmp_path,
        import_config(tmp_path, "minari:test/other-v0"),
        env={"MINARI_DATASETS_PATH": str(store)},
    )
    assert "collect.source" in said and "observation_space shape (7,) vs (39,)" in said, said
    assert "dataset: {'type': 'Box', 'shape': [7]" in said and "'shape': [39]" in said, said


def test_what_needs_an_expert_is_refused_without_one(tmp_path, store):
    """DAgger rounds without an expert, and collection without one, fail before any job,
    naming the key; a dataset source that is not there names itself."""
    source = "minari:test/racing-v0"
    env = {"MINARI_DATASETS_PATH": str(store)}
    bc = yaml.safe_load(TEST_CONFIG.read_text())["bc"] | {"dagger": {"rounds": 1}}
    said = plan_error(tmp_path, import_config(tmp_path, source, bc=bc), env=env)
    assert "bc.dagger.rounds" in said and "need an expert" in said, said
    said = plan_error(
        tmp_path, import_config(tmp_path, source, collect={"source": "expert"}), env=env
    )
    assert "task.expert" in said and "collect.source is expert" in said, said
    # the env from a dataset that records none (made without an env spec)
    task = {"env_id": "dataset", "expert": {"entry_point": None}}
    said = plan_error(tmp_path, import_config(tmp_path, source, task=task), env=env)
    assert "task.env_id" in said and "records no env spec" in said, said
    said = plan_error(tmp_path, import_config(tmp_path, "minari:test/absent-v0"), env=env)
    assert "collect.source" in said and "test/absent-v0" in said, said
    said = plan_error(tmp_path, import_config(tmp_path, str(tmp_path / "none.h5")), env=env)
    assert "collect.source" in said and "none.h5" in said, said


def test_dagger_on_an_imported_dataset_is_refused_before_any_job(tmp_path, store):
    """DAgger extends the dataset the task's expert collected; an imported one (here with an
    expert the task could call) is refused naming both keys."""
    expert = {"entry_point": "demo2rl.experts.racing:pure_pursuit", "kwargs": {"margin": 0.65}}
    bc = yaml.safe_load(TEST_CONFIG.read_text())["bc"] | {"dagger": {"rounds": 1}}
    config = import_config(
        tmp_path, "minari:test/racing-v0", bc=bc, task=copy.deepcopy(RACING) | {"expert": expert}
    )
    said = plan_error(tmp_path, config, env={"MINARI_DATASETS_PATH": str(store)})
    assert "bc.dagger.rounds" in said and "collect.source" in said, said


def test_a_changed_file_of_the_minari_dataset_reruns_the_import(imported, store):
    """The import reads every file of the dataset's directory (a directory's own time does not
    change with its files'): a file whose content changed plans the import and what follows it
    again (Snakemake compares an input's checksum, not only its time); restored, nothing."""
    config = imported / "import.yaml"
    env = {"MINARI_DATASETS_PATH": str(store)}
    metadata = store / "test" / "racing-v0" / "data" / "metadata.json"
    original = metadata.read_bytes()
    try:
        metadata.write_bytes(original + b"\n")  # the same metadata, other bytes
        proc = snakemake(imported, "-n", "--configfile", str(config), "--nolock", env=env)
        said = proc.stdout + proc.stderr
        assert "rule import_demos:" in said and "metadata.json" in said, said[-3000:]
    finally:
        metadata.write_bytes(original)
    proc = snakemake(imported, "-n", "--configfile", str(config), "--nolock", env=env)
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_a_poisoned_dataset_stops_the_run_at_the_import_naming_the_value(tmp_path):
    """A recording with one action of 7.0 in a Box(-1, 1) (Minari writes it without a word):
    the import job fails naming the episode, the step and the field, writes no demos.h5, and
    nothing after it (BC, the arms) runs."""
    episodes, obs_space, act_space = racing_episodes(4)
    episodes[2]["actions"] = episodes[2]["actions"].copy()
    episodes[2]["actions"][10, 0] = 7.0
    with minari_io._store(tmp_path / "store"):
        make_minari("test/poisoned-v0", episodes, obs_space, act_space)
    config = import_config(tmp_path, "minari:test/poisoned-v0")
    env = {"MINARI_DATASETS_PATH": str(tmp_path / "store")}
    proc = snakemake(tmp_path, "--cores", "2", "--configfile", str(config), env=env, check=False)
    assert proc.returncode != 0
    out = results(tmp_path)
    said = (out / "logs" / "import_demos.log").read_text()
    assert (
        "episode 2 (Minari id 2), step 10: action element 0 is 7.0, above the space's high bound 1"
    ) in said, said[-2000:]
    assert not (out / "demos").exists() or os.listdir(out / "demos") == []
    assert not (out / "bc").exists() and not (out / "rl").exists()
    assert not (out / "logs" / "train_bc.log").exists()


# --------------------------------------------------------------------------------------------
# images as users have them: JPEG-encoded by Minari (its default for an image space)

CAMERA = {"env_id": "Racing-v0", "env_kwargs": {"camera": 32, "max_steps": 40}, "frame_stack": 3}
"""The racing task's camera, 32x32 frames (the smallest Minari treats as images: it JPEG-encodes
a uint8 Box(0, 255) of at least 32x32), 3 stacked: a 32x32x3 frame, as an RGB camera's. (Minari
writes JPEG with Pillow, which writes 1 or 3 channels only: it refuses the camera's unstacked
32x32x1 frames, and 2 stacked.)"""
JPEG_ID = "test/racing-camera-jpeg-v0"
JPEG_EXPERIMENT = "test-import-jpeg"
N_JPEG = 4


@pytest.fixture(scope="module")
def camera_recording() -> tuple[list[dict[str, Any]], Any, Any]:
    """Episodes of the camera task, the racing expert driving from the state in the infos, and
    the task's spaces (frames of 32x32x3 uint8)."""
    return racing_episodes(
        N_JPEG,
        {"env_id": CAMERA["env_id"], "env_kwargs": CAMERA["env_kwargs"]},
        frame_stack=CAMERA["frame_stack"],
        expert_input="info.state",
    )


@pytest.fixture(scope="module")
def jpeg_store(tmp_path_factory: pytest.TempPathFactory, camera_recording) -> Path:
    """A Minari store holding JPEG_ID: the camera recording, JPEG-encoded by Minari."""
    path = tmp_path_factory.mktemp("minari-jpeg-store")
    with minari_io._store(path):
        make_minari(JPEG_ID, *camera_recording, jpeg_encoding=True)
        assert minari.load_dataset(JPEG_ID).storage.jpeg_encoding  # (Minari's default)
    return path


def test_a_jpeg_image_dataset_imports_decoded_and_runs_the_clone_and_an_arm(
    tmp_path, jpeg_store, camera_recording
):
    """A JPEG-encoded Minari dataset of camera frames, no expert, through the whole workflow:
    the import writes the frames Minari's reader decodes (not the frames recorded: JPEG is
    lossy), as uint8 image columns compressed as collected frames are; the clone trains on them
    and the warm-started arm from it, and both are evaluated."""
    spec = untracked(yaml.safe_load((REPO / "config" / "test-pixels.yaml").read_text()))
    spec |= {"experiment": JPEG_EXPERIMENT, "variants": {}}
    spec["task"] = copy.deepcopy(CAMERA) | {"expert": {"entry_point": None}}
    spec["collect"] = {"source": f"minari:{JPEG_ID}", "valid_fraction": 0.25}
    spec["bc"] = {"max_epochs": 1, "patience": 1}
    # the arm that starts from the clone, alone; one PPO rollout of 2 envs
    spec["rl"] |= {
        "arms": [names.BC],
        "seeds": [0],
        "total_timesteps": 64,
        "n_envs": 2,
        "checkpoint_every": 64,
        "eval_every": 64,
        "ppo": {"n_steps": 32, "batch_size": 32, "n_epochs": 1},
    }
    spec["evaluate"] = {"episodes": 2, "during_training": 1, "n_envs": 2, "bootstrap_reps": 100}
    config = tmp_path / "jpeg.yaml"
    config.write_text(yaml.safe_dump(spec))
    snakemake(
        tmp_path,
        "--cores",
        "2",
        "--configfile",
        str(config),
        env={"MINARI_DATASETS_PATH": str(jpeg_store)},
    )
    out = tmp_path / "results" / JPEG_EXPERIMENT
    demos_path = out / "demos" / "demos.h5"
    demos = dataset.read(demos_path, verify=True)
    recorded, obs_space, _ = camera_recording
    frames = demos.steps["observations"]
    assert frames.dtype == np.uint8 and frames.shape[1:] == obs_space.shape == (32, 32, 3)
    # the frames are those Minari's own reader decodes from the JPEG, episode by episode
    decoded = list(minari.MinariDataset(jpeg_store / JPEG_ID / "data").iterate_episodes())
    assert demos.n_episodes == len(decoded) == N_JPEG
    lossy = []
    for e, (ep, raw) in enumerate(zip(decoded, recorded, strict=True)):
        rows = demos.step_rows(np.array([e]))
        np.testing.assert_array_equal(frames[rows], ep.observations[:-1])
        np.testing.assert_array_equal(demos.episodes["final_observation"][e], ep.observations[-1])
        np.testing.assert_array_equal(demos.steps["actions"][rows], raw["actions"])
        assert demos.episodes["seed"][e] == raw["seed"]
        lossy.append(not np.array_equal(ep.observations, raw["observations"]))
    assert any(lossy)  # decoded JPEG, not the frames recorded: the store held no raw frames
    # image columns as collected frames are: gzip, 64 whole frames a chunk, no statistics
    with h5py.File(demos_path) as f:
        for key in dataset.COMPRESSIBLE:
            column = f[key]
            assert column.dtype == np.uint8, key
            assert (column.compression, column.compression_opts) == ("gzip", dataset.GZIP_LEVEL)
            rows = min(dataset.IMAGE_CHUNK_ROWS, column.shape[0])
            assert column.chunks == (rows, *obs_space.shape), key
    assert set(demos.stats) == {"act_mean", "act_std"}
    assert demos.attrs["expert"] is None and JPEG_ID in json.dumps(demos.attrs["source"])
    # the clone (a CNN, on frames), the arm warm-started from it, each evaluated held-out
    checkpoint = torch.load(out / "bc" / "policy.pt", weights_only=True)
    assert checkpoint["normalizer"] == {"kind": "image", "channels_last": True}
    run = names.RL_DIR.format(arm=names.BC, seed=0)
    assert (out / run / "policy.pt").is_file()
    for policy in (names.BC, names.RL_POLICY.format(arm=names.BC, seed=0)):
        returns = json.loads((out / "eval" / f"{policy}.json").read_text())["episodes"]["return"]
        assert len(returns) == 2 and np.isfinite(returns).all(), (policy, returns)
    assert not (out / "logs" / "collect_shard").exists()


# the import job's peak memory: as the merge's for collected frames (test_dataset_images), the
# peak RSS (VmHWM) of a fresh process that runs the stage, over one that only imports it
MEMORY_STEPS = 100  # steps an episode: 101 decoded frames, 0.3 MiB
IMPORT_CHILD = """
import json, sys
from pathlib import Path
import minari
from demo2rl import tasks
from demo2rl.config import TaskConfig
from demo2rl.demos.sources import Source
from demo2rl.specs.import_demos import ImportJob
from demo2rl.stages import import_demos as stage

class Run:
    def log_metrics(self, metrics): pass
    def log_dataset(self, path, digest, context): pass

args = json.loads(sys.argv[1])
if args["out"]:
    job = ImportJob(
        source=args["data"], env=TaskConfig.of(args["env"]), valid_fraction=0.25, seed=0,
        data=Source("minari", Path(args["data"])), files=[], out=args["out"], codec="gzip",
    )
    stage.import_demos(job, Run())
else:  # the baseline: the same imports, the task's spaces, Minari's dataset opened
    env = args["env"]
    tasks.spaces(env["env_id"], env["env_kwargs"], env["frame_stack"])
    minari.MinariDataset(Path(args["data"]) / "data")
"""


def import_peak_rss(data: Path, out: Path | None) -> int:
    """Peak RSS (bytes) of a fresh process that runs the import_demos stage on the Minari
    dataset directory ``data`` (or, with ``out`` None, only imports it and opens ``data``)."""
    return child_peak_rss(IMPORT_CHILD, {"data": str(data), "out": out and str(out), "env": CAMERA})


def test_the_jpeg_import_job_runs_in_bounded_memory(tmp_path, camera_recording):
    """The import_demos stage on JPEG datasets of 48 and 96 episodes of camera frames (14 and 28
    MiB decoded), in fresh processes, checked as the merge of collected frames is: its peak RSS
    over a baseline does not grow with the dataset, and stays below what the import holds
    (test_minari_io: an episode three times over, Minari's decoded one among them, and two copy
    blocks) plus the merge test's fixed margin for what RSS counts beyond Python's allocations
    (HDF5, gzip, the allocator). Measured: 21.4 and 21.7 MiB (the blocks fill up to their size
    by 48 episodes); a reader of the dataset whole would grow by the 14 MiB between the two."""
    recorded, obs_space, act_space = camera_recording
    pool = np.concatenate([ep["observations"] for ep in recorded])  # the camera's frames

    def episodes(n: int) -> list[dict[str, Any]]:
        rows = np.arange(MEMORY_STEPS + 1)
        return [
            {
                "seed": e,
                "observations": pool[(rows + 7 * e) % len(pool)],
                "actions": np.zeros((MEMORY_STEPS, 2), np.float32),
                "rewards": np.ones(MEMORY_STEPS),
                "terminations": rows[1:] == MEMORY_STEPS,
                "truncations": np.zeros(MEMORY_STEPS, bool),
            }
            for e in range(n)
        ]

    with minari_io._store(tmp_path / "store"):
        data = {
            n: make_minari(
                f"test/memory-{n}-v0", episodes(n), obs_space, act_space, jpeg_encoding=True
            )
            for n in (48, 96)
        }
    episode_bytes = (MEMORY_STEPS + 1) * pool[0].nbytes
    base = import_peak_rss(data[48], None)
    growth = {n: import_peak_rss(p, tmp_path / f"{n}.h5") - base for n, p in data.items()}
    mib = {n: round(g / 2**20, 1) for n, g in growth.items()}
    print(f"import peak RSS over baseline, MiB: {mib}; an episode {episode_bytes / 2**20:.2f} MiB")
    assert max(growth.values()) < 3 * episode_bytes + 2 * dataset.COPY_BYTES + (16 << 20), mib
    assert growth[96] - growth[48] < 4 << 20, mib
    imported = dataset.read_tables(tmp_path / "96.h5")
    assert imported.n_steps == 96 * MEMORY_STEPS
    assert dataset.verify(tmp_path / "96.h5") == imported.attrs["content_hash"]

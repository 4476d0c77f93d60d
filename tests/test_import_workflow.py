"""Demonstrations from elsewhere, through the real workflow: a Minari dataset made in the test
with Minari's own API (no expert to call) runs the workflow end to end; its export, imported
again, is the same dataset (content hash); a dataset whose spaces are not the task's, and what
needs an expert without one, are refused before any job, naming the culprit."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import TEST_CONFIG, snakemake, untracked
from test_minari_io import make_minari

from demo2rl import dataset, names, rollout, tasks

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("import-workflow")]

EXPERIMENT = "test-import"
RACING = {"env_id": "Racing-v0", "env_kwargs": {"max_steps": 150}}
N_EPISODES = 8


def racing_episodes(n: int) -> tuple[list[dict[str, Any]], Any, Any]:
    """``n`` episodes of the test task driven by the racing expert, as Minari's buffers take
    them (T+1 observations), with the task's spaces: a recording of "another controller"."""
    expert = tasks.load_expert("demo2rl.experts.racing:pure_pursuit", {"margin": 0.65})
    seeds = [1000 + e for e in range(n)]
    steps, table, _ = rollout.run_episodes(
        RACING["env_id"], RACING["env_kwargs"], expert, seeds, n_envs=4
    )
    obs_space, act_space = tasks.spaces(RACING["env_id"], RACING["env_kwargs"])
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
    before = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(path)
    try:
        episodes, obs_space, act_space = racing_episodes(N_EPISODES)
        make_minari("test/racing-v0", episodes, obs_space, act_space)
    finally:
        if before is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = before
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
    import minari

    os.environ["MINARI_DATASETS_PATH"], before = (
        str(exported),
        os.environ.get("MINARI_DATASETS_PATH"),
    )
    try:
        loaded = minari.load_dataset(f"demo2rl/{EXPERIMENT}-v0")
        assert loaded.total_episodes == N_EPISODES
    finally:
        if before is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = before
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
    """The error of a dry run of ``config`` that must fail before any job."""
    proc = snakemake(workdir, "-n", "--configfile", str(config), env=env, check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Invalid config" in said, said[-2000:]
    return said


def test_a_dataset_of_other_spaces_is_refused_before_any_job(tmp_path, store):
    """A Minari dataset of another observation space (another task's recording) fails the
    plan, naming collect.source and both spaces; so does a demo2rl file of another task."""
    os.environ["MINARI_DATASETS_PATH"], before = str(store), os.environ.get("MINARI_DATASETS_PATH")
    try:
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
    finally:
        if before is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = before
    said = plan_error(
        tmp_path,
        import_config(tmp_path, "minari:test/other-v0"),
        env={"MINARI_DATASETS_PATH": str(store)},
    )
    assert "collect.source" in said and "observation_space shape (7,) vs (39,)" in said, said
    assert "dataset: {'type': 'Box', 'shape': [7]" in said and "'shape': [39]" in said, said
    assert not (tmp_path / "results").exists()


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

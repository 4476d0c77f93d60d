"""Image observations in the dataset: compressed columns, a codec that never changes the data or
its hash, the streaming merge (the same dataset as the in-memory one) and its bounded memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np
import pytest
from test_dataset import make_demos

from demo2rl.demos import dataset

FRAME = (16, 16, 3)


def frames(n: int, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Racing-like uint8 frames, random-ish but compressible: a bright band whose centre drifts
    from frame to frame on a dark background, with sparse speckle."""
    rng = np.random.default_rng(seed)
    h, w = shape[:2]
    drift = np.cumsum(rng.normal(0, 0.6, size=n))
    centre = w / 2 + 0.3 * w * np.sin(drift[:, None] / 8 + np.arange(h)[None, :] / 9)  # (n, h)
    road = np.abs(np.arange(w)[None, None, :] - centre[:, :, None]) < w / 8  # (n, h, w)
    out = np.where(road, 170, 40).astype(np.uint8)[..., None].repeat(shape[2], axis=-1)
    out[..., 0] += 10  # channels differ a little
    speck = rng.random(out.shape[:3]) < 0.02
    out[speck] = rng.integers(0, 256, size=(int(speck.sum()), shape[2]), dtype=np.uint8)
    return out


def make_image_demos(
    n_episodes: int = 4,
    first: int = 0,
    seed: int = 0,
    *,
    shape: tuple[int, ...] = FRAME,
    lengths: np.ndarray | None = None,
) -> dataset.Demos:
    """A shard of image observations (uint8 ``shape``) over the toy episodes of make_demos."""
    demos = make_demos(n_episodes, first, seed)
    if lengths is not None:  # episodes of given lengths (the step columns redrawn to fit)
        rng = np.random.default_rng(seed + first)
        n = int(lengths.sum())
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        demos.steps = {
            "actions": rng.uniform(-1, 1, size=(n, 2)).astype(np.float32),
            "rewards": rng.normal(size=n),
            "terminated": np.zeros(n, bool),
            "truncated": np.zeros(n, bool),
        }
        demos.steps["truncated"][starts + lengths - 1] = True
        demos.episodes |= {"start": starts, "length": lengths.astype(np.int64)}
        demos.episodes["return"] = np.array(
            [
                dataset.episode_return(demos.steps["rewards"][s : s + k])
                for s, k in zip(starts, lengths, strict=True)
            ]
        )
    demos.steps["observations"] = frames(demos.n_steps, shape, seed * 1000 + first)
    demos.episodes["final_observation"] = frames(n_episodes, shape, seed * 1000 + first + 1)
    space = gym.spaces.Box(0, 255, shape, np.uint8)
    demos.attrs["observation_space"] = dataset.describe_space(space)
    return demos


def write_shards(tmp, shards: list[dataset.Demos], codec: str = "gzip") -> list[str]:
    paths = [str(tmp / f"shard-{k}.h5") for k in range(len(shards))]
    for path, shard in zip(paths, shards, strict=True):
        dataset.write(path, shard, codec=codec)
    return paths


def image_shards(n: int = 3) -> list[dataset.Demos]:
    """Shards whose sizes do not line up with the image chunks (64 frames)."""
    sizes = [np.array([40, 31, 9]), np.array([70, 1]), np.array([65, 64, 3, 130])][:n]
    firsts = np.cumsum([0] + [len(s) for s in sizes])
    return [
        make_image_demos(len(s), first=int(f), lengths=s)
        for s, f in zip(sizes, firsts, strict=False)
    ]


# --------------------------------------------------------------------------------------------
# the codec


@pytest.mark.parametrize("kind", ["vector", "image"])
def test_the_codec_never_changes_the_content_hash(tmp_path, kind):
    demos = make_demos() if kind == "vector" else make_image_demos()
    digests = {}
    for codec in dataset.CODECS:
        path = tmp_path / f"{codec}.h5"
        digests[codec] = dataset.write(path, demos, codec=codec)
        assert dataset.verify(path) == digests[codec]
        back = dataset.read(path, verify=True)
        np.testing.assert_array_equal(back.steps["observations"], demos.steps["observations"])
        assert back.attrs["codec"] == codec
    assert len(set(digests.values())) == 1, digests
    assert digests["gzip"] == dataset.content_hash(demos)
    assert "codec" not in dataset.DEFINING_ATTRS


def test_image_columns_are_compressed_in_chunks_of_whole_frames(tmp_path):
    demos = make_image_demos(lengths=np.array([100, 50]))
    sizes = {}
    for codec in dataset.CODECS:
        dataset.write(tmp_path / f"{codec}.h5", demos, codec=codec)
        sizes[codec] = (tmp_path / f"{codec}.h5").stat().st_size
        with h5py.File(tmp_path / f"{codec}.h5") as f:
            for name in ("steps/observations", "episodes/final_observation"):
                column = f[name]
                assert column.chunks == (min(len(column), dataset.IMAGE_CHUNK_ROWS), *FRAME)
                assert column.compression == (None if codec == "none" else codec)
                assert not column.shuffle
            if codec == "gzip":
                assert f["steps/observations"].compression_opts == dataset.GZIP_LEVEL
            for name in ("steps/actions", "steps/rewards", "episodes/return"):
                assert f[name].compression is None  # vector columns: exactly as before
                assert f[name].chunks == dataset._chunks(f[name].shape, f[name].dtype)
    assert sizes["gzip"] < sizes["lzf"] < sizes["none"]


def test_vector_columns_are_never_compressed(tmp_path):
    for codec in dataset.CODECS:
        dataset.write(tmp_path / f"{codec}.h5", make_demos(), codec=codec)
        with h5py.File(tmp_path / f"{codec}.h5") as f:
            assert f["steps/observations"].compression is None
            assert f["steps/observations"].chunks == (len(f["steps/observations"]), 3)
    with pytest.raises(ValueError, match="unknown codec 'zstd'"):
        dataset.write(tmp_path / "z.h5", make_demos(), codec="zstd")


# --------------------------------------------------------------------------------------------
# the streaming merge


def test_streaming_merge_equals_the_in_memory_merge_for_vector_shards(tmp_path):
    shards = [make_demos(3, first=0), make_demos(4, first=3), make_demos(2, first=7)]
    paths = write_shards(tmp_path, shards)
    old = dataset.merge(
        [dataset.read(p, verify=True) for p in paths], paths, n_episodes=9, valid_fraction=0.25
    )
    old_digest = dataset.write(tmp_path / "old.h5", old)
    digest = dataset.merge_files(paths, tmp_path / "new.h5", n_episodes=9, valid_fraction=0.25)
    assert digest == old_digest == dataset.verify(tmp_path / "new.h5")
    new = dataset.read(tmp_path / "new.h5")
    for key in ("obs_mean", "obs_std", "act_mean", "act_std"):  # bit for bit
        assert new.stats[key].tobytes() == old.stats[key].tobytes()
    assert new.attrs["shards"] == old.attrs["shards"]
    with h5py.File(tmp_path / "old.h5") as a, h5py.File(tmp_path / "new.h5") as b:
        for name in ("steps/observations", "steps/actions", "episodes/start", "stats/obs_mean"):
            assert (a[name].chunks, a[name].compression) == (b[name].chunks, b[name].compression)


@pytest.mark.parametrize("shard_codec,codec", [("gzip", "gzip"), ("none", "lzf"), ("lzf", "none")])
def test_streaming_merge_equals_the_in_memory_merge_for_image_shards(tmp_path, shard_codec, codec):
    shards = image_shards()
    n_episodes = sum(s.n_episodes for s in shards)
    paths = write_shards(tmp_path, shards, shard_codec)
    old = dataset.merge(shards, paths, n_episodes=n_episodes, valid_fraction=0.2)
    old_digest = dataset.write(tmp_path / "old.h5", old, codec=codec)
    digest = dataset.merge_files(
        paths, tmp_path / "new.h5", n_episodes=n_episodes, valid_fraction=0.2, codec=codec
    )
    assert digest == old_digest == dataset.verify(tmp_path / "new.h5")
    new = dataset.read(tmp_path / "new.h5")
    np.testing.assert_array_equal(
        new.steps["observations"], np.concatenate([s.steps["observations"] for s in shards])
    )
    assert set(new.stats) == {"act_mean", "act_std"}  # image observations: actions only
    assert new.attrs["codec"] == codec
    with h5py.File(tmp_path / "new.h5") as f:
        assert f["steps/observations"].chunks == (dataset.IMAGE_CHUNK_ROWS, *FRAME)
        assert f["steps/observations"].compression == (None if codec == "none" else codec)


def test_streaming_merge_keeps_the_checks_of_merge(tmp_path):
    paths = write_shards(tmp_path, [make_demos(3), make_demos(4, first=4)])
    out = tmp_path / "out.h5"
    with pytest.raises(dataset.DatasetError, match="shard-1.h5: starts at episode 4, expected 3"):
        dataset.merge_files(paths, out, n_episodes=7, valid_fraction=0.1)
    other = make_demos(4, first=3)
    other.attrs["env_id"] = "Other-v0"
    dataset.write(paths[1], other)
    with pytest.raises(dataset.DatasetError, match="shard-1.h5: attribute 'env_id' differs"):
        dataset.merge_files(paths, out, n_episodes=7, valid_fraction=0.1)
    with pytest.raises(
        dataset.DatasetError, match="shard-0.h5: shards hold 3 episodes, expected 5"
    ):
        dataset.merge_files(paths[:1], out, n_episodes=5, valid_fraction=0.1)
    assert not out.exists()


def test_streaming_merge_checks_each_shards_hash_and_columns(tmp_path):
    shards = image_shards(2)
    paths = write_shards(tmp_path, shards)
    out = tmp_path / "out.h5"
    with h5py.File(paths[1], "r+") as f:  # one pixel of the second shard
        f["steps/observations"][70, 0, 0, 0] ^= 1
    with pytest.raises(dataset.DatasetError, match="shard-1.h5: content hash mismatch"):
        dataset.merge_files(paths, out, n_episodes=5, valid_fraction=0.1)
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["shard-0.h5", "shard-1.h5"]
    small = make_image_demos(2, first=3, shape=(8, 8, 3))
    small.attrs["observation_space"] = shards[0].attrs["observation_space"]  # yet 8x8 frames
    dataset.write(paths[1], small)
    with pytest.raises(dataset.DatasetError, match=r"shard-1.h5: /steps/observations is uint8"):
        dataset.merge_files(paths, out, n_episodes=5, valid_fraction=0.1)
    raw = Path(paths[1]).read_bytes()
    Path(paths[1]).write_bytes(raw[: len(raw) // 3])
    with pytest.raises(dataset.DatasetError, match="shard-1.h5: unreadable or incomplete"):
        dataset.merge_files(paths, out, n_episodes=5, valid_fraction=0.1)
    assert not out.exists()


def test_read_tables_leaves_the_columns_out(tmp_path):
    shards = image_shards(2)
    paths = write_shards(tmp_path, shards)
    dataset.merge_files(paths, tmp_path / "m.h5", n_episodes=5, valid_fraction=0.2)
    tables = dataset.read_tables(tmp_path / "m.h5")
    whole = dataset.read(tmp_path / "m.h5")
    assert set(tables.steps) == {"rewards", "terminated", "truncated"}
    assert "final_observation" not in tables.episodes
    assert tables.n_steps == whole.n_steps and tables.n_episodes == whole.n_episodes
    np.testing.assert_array_equal(tables.episodes["start"], whole.episodes["start"])
    np.testing.assert_array_equal(tables.split["valid"], whole.split["valid"])
    assert tables.attrs == whole.attrs


# --------------------------------------------------------------------------------------------
# bounded memory

MEMORY_FRAME = (64, 64, 3)
MEMORY_STEPS = 1000  # frames a shard: 12.3 MB raw, three times a copy block
CHILD = """
import json, sys
from demo2rl.demos import dataset
from demo2rl.specs.merge_demos import MergeJob, Split
from demo2rl.stages import merge_demos as stage

class Run:
    def log_metrics(self, metrics): pass
    def log_dataset(self, path, digest, context): pass

args = json.loads(sys.argv[1])
if args["out"]:
    collect = Split(n_episodes=args["n_episodes"], valid_fraction=0.1)
    job = MergeJob(collect=collect, shards=args["shards"], out=args["out"], codec="gzip")
    stage.merge_demos(job, Run())
else:  # the baseline: the same imports, HDF5 opened once
    dataset.read_attrs(args["shards"][0])
"""
VMHWM = """
with open("/proc/self/status") as status:
    print(next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:")))
"""


def child_peak_rss(program: str, args: dict[str, Any]) -> int:
    """Peak RSS (bytes) of a fresh Python process running ``program`` (its arguments: ``args``,
    JSON in ``sys.argv[1]``): the VmHWM of that process image. (ru_maxrss would not do: Linux
    carries it over from the parent through fork and exec, so a child reports at least the test
    process's own peak.)"""
    proc = subprocess.run(
        [sys.executable, "-c", program + VMHWM, json.dumps(args)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return int(proc.stdout.split()[-1])


def peak_rss(shards: list[str], out: str | None) -> int:
    """Peak RSS (bytes) of a fresh process that runs the merge stage on ``shards`` (or, with
    ``out`` None, only imports it and opens a shard's attributes)."""
    return child_peak_rss(CHILD, {"shards": shards, "out": out, "n_episodes": 10 * len(shards)})


@pytest.fixture(scope="module")
def image_shard_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("image-shards")
    template = make_image_demos(10, lengths=np.full(10, MEMORY_STEPS // 10), shape=MEMORY_FRAME)
    paths = []
    for k in range(16):
        shard = dataset.Demos(
            dict(template.steps),
            template.episodes | {"index": np.arange(10 * k, 10 * k + 10)},
            template.info,
            template.attrs | {"first_episode": 10 * k},
        )
        paths.append(str(tmp / f"shard-{k}.h5"))
        dataset.write(paths[-1], shard)
    return paths, template.steps["observations"].nbytes


def test_the_merge_stage_runs_in_bounded_memory(image_shard_files, tmp_path):
    """Peak RSS of the merge stage over a baseline process, for 8 and 16 shards of 12.3 MB of
    frames each (98 and 197 MB in all): below two shards' frames plus a fixed margin, and not
    growing with the number of shards. (Reading the shards whole, as the merge did before, grows
    by about the whole dataset's frames.)"""
    paths, shard_bytes = image_shard_files
    base = peak_rss(paths[:1], None)
    growth = {n: peak_rss(paths[:n], str(tmp_path / f"m{n}.h5")) - base for n in (8, 16)}
    mib = {n: round(g / 2**20, 1) for n, g in growth.items()}
    print(f"merge peak RSS over baseline, MiB: {mib}; one shard's frames {shard_bytes / 2**20:.1f}")
    assert max(growth.values()) < 2 * shard_bytes + (16 << 20), (mib, shard_bytes)
    assert growth[16] - growth[8] < 4 << 20, mib
    merged = dataset.read_tables(tmp_path / "m16.h5")
    assert merged.n_steps == 16 * MEMORY_STEPS
    assert dataset.verify(tmp_path / "m16.h5") == merged.attrs["content_hash"]

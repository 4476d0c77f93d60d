"""Demonstrations in and out: the dataset format and everything that fills or reads it.

:mod:`~demo2rl.demos.dataset` is the one HDF5 format (columnar episodes, self-describing spaces,
content hash, the value checks every source passes); :mod:`~demo2rl.demos.rollout` runs a batched
policy for one episode per seed, which :mod:`~demo2rl.demos.collect` uses to record an expert's
shards; :mod:`~demo2rl.demos.sources` says where a workflow's demonstrations come from (the expert,
a demo2rl file, a Minari dataset), and :mod:`~demo2rl.demos.minari_io` converts Minari datasets in
and out. Nothing here trains a network.
"""

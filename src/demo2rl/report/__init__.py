"""The report: how the evaluated policies compare, in numbers and in pictures.

:mod:`~demo2rl.report.groups` names the policy groups (expert, clone, DAgger rounds, one per arm)
and the comparisons between them; :mod:`~demo2rl.report.summary` computes rliable's aggregates with
bootstrap intervals, the probabilities of improvement and what each arm costs in env steps and CPU
seconds; :mod:`~demo2rl.report.plots` draws every figure; :mod:`~demo2rl.report.racing_replay`
replays a recorded racing episode for the racing task's figures. It reads results files only:
nothing here runs an env or trains.
"""

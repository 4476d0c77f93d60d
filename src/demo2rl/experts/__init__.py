"""Scripted experts: batched callables, observations in, actions out."""

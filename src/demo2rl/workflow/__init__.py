"""The workflow as one object in the library (see graph.py and plan.py)."""

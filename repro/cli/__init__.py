"""Command-line entry points (``[project.scripts]`` in pyproject.toml): ``lra-run``, ``lra-bench``.

experiments/run.py and experiments/bench.py are thin wrappers around the same ``main()``s.
"""

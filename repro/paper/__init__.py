"""Both papers' tables and figures from a bundle (``lra-paper``; ``python -m repro.paper`` from a checkout).

Modules: ``view`` (a bundle's records), ``claims`` (paper/claims.yaml), ``evaluate`` (each claim's
primary test and verdict), ``accuracy``, ``efficiency``, ``claims_tables``, ``listops`` (the
tables), ``figures`` and ``plots`` (the figures), ``render`` (Markdown and LaTeX), ``cli``.
"""

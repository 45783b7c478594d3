"""Analyses of run records beyond their accuracy, shared by bundle freezing and the paper tables
(a record's share of the protocol is ``repro.run.protocol``'s).

* ``listops_roots``: ListOps test examples by root operator (rebuilt from a record's config at
  freeze time, stored in the bundle) and the root-operator baseline (the follow-up study,
  appendix B).
* ``baselines``: trivial baselines of a task (majority class, root operator) and their intervals.
"""

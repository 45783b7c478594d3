"""Statistics between arms (tables and statistics read only records).

* ``core``: the basic tests on plain arrays (Welch, exact permutation, McNemar, Holm, TOST,
  one-sample t, bootstraps), each returning a :class:`StatResult`.
* ``pooled``: per-example evidence pooled over every seed pair (Cochran-Mantel-Haenszel).
* ``power``: the pooled seed sd and the seeds a claim needs (statsmodels' power tools).
* ``verdict``: the verdict rules R1-R7 applied to one claim's primary test.

``from repro import stats; stats.welch(a, b)`` keeps working: the names below are re-exported.
"""

from .core import (
    NAN,
    StatResult,
    bootstrap_hierarchical,
    bootstrap_seeds,
    holm,
    mcnemar,
    mcnemar_table,
    one_sample,
    permutation,
    tost_ind,
    tost_published,
    welch,
)
from .pooled import cmh_seed_pairs, discordant_counts
from .power import pooled_sd, seeds_needed
from .verdict import SHARE_NEEDED, Evidence, Verdict, decide

__all__ = [
    "NAN",
    "StatResult",
    "bootstrap_hierarchical",
    "bootstrap_seeds",
    "holm",
    "mcnemar",
    "mcnemar_table",
    "one_sample",
    "permutation",
    "tost_ind",
    "tost_published",
    "welch",
    "cmh_seed_pairs",
    "discordant_counts",
    "pooled_sd",
    "seeds_needed",
    "SHARE_NEEDED",
    "Evidence",
    "Verdict",
    "decide",
]

"""The claims' statistics: interval coverage on synthetic records, the verdict rules, the pooled
per-example test, the permutation test, seeds needed, and the trivial baselines on a fixture."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT
from omegaconf import OmegaConf
from scipy import stats as sps
from statsmodels.stats.contingency_tables import StratifiedTable
from statsmodels.stats.power import TTestIndPower, TTestPower

from repro import stats
from repro.analysis import baselines, listops_roots
from repro.run import protocol
from repro.stats import Evidence, decide

# ---------------------------------------------------------------- coverage on synthetic records


def synthetic_records(rng, q: np.ndarray, delta: float, seed_sd: float, datasets: int, seeds: int) -> np.ndarray:
    """Per-seed test accuracy (%) of ``datasets`` x ``seeds`` runs scored on one fixed test set.

    Example i is right with probability q_i + delta + u, u ~ N(0, seed_sd) one draw per seed (the
    training seed's effect); q in [0.25, 0.75] and |delta + u| < 0.25, so no probability is clipped
    and the expected accuracy on this test set is exactly mean(q) + delta.
    """
    shift = np.clip(rng.normal(0.0, seed_sd, (datasets, seeds, 1)), -0.2, 0.2)
    assert np.all(np.abs(delta + shift) < 0.25)
    return 100.0 * (rng.random((datasets, seeds, q.size)) < q + delta + shift).mean(axis=2)


def _covers(ci, truth: float) -> bool:
    return ci[0] <= truth <= ci[1]


def _assert_nominal(hits: int, n: int, level: float, name: str) -> None:
    """Coverage at least the nominal level, within 3 Monte Carlo standard errors."""
    coverage, se = hits / n, math.sqrt(level * (1 - level) / n)
    assert coverage >= level - 3 * se, f"{name}: coverage {coverage:.4f} < {level} - 3 x {se:.4f}"


@pytest.mark.parametrize("seeds", [3])
def test_welch_and_tost_intervals_of_two_arms_reach_their_nominal_coverage(seeds):
    """The primary test's intervals (Welch 95%, TOST's 90%) cover the known difference A - B of expected
    accuracy on the shared test set, with 3 seeds per arm and unequal seed noise."""
    rng = np.random.default_rng(20240611)
    q = rng.uniform(0.25, 0.75, 400)
    datasets, delta_a, delta_b = 1000, 0.04, 0.0
    a = synthetic_records(rng, q, delta_a, 0.01, datasets, seeds)
    b = synthetic_records(rng, q, delta_b, 0.02, datasets, seeds)
    truth = 100.0 * (delta_a - delta_b)
    welch = sum(_covers(stats.welch(x, y).ci, truth) for x, y in zip(a, b, strict=True))
    tost = sum(_covers(stats.tost_ind(x, y, margin=1.0).ci, truth) for x, y in zip(a, b, strict=True))
    _assert_nominal(welch, datasets, 0.95, "Welch 95%")
    _assert_nominal(tost, datasets, 0.90, "TOST 90%")


def test_one_sample_intervals_against_a_published_number_reach_their_nominal_coverage():
    rng = np.random.default_rng(7)
    q = rng.uniform(0.25, 0.75, 400)
    datasets, delta, published = 1000, 0.02, 47.0
    runs = synthetic_records(rng, q, delta, 0.015, datasets, 3)
    truth = 100.0 * (q.mean() + delta) - published
    t95 = sum(_covers(stats.one_sample(x, published).ci, truth) for x in runs)
    t90 = sum(_covers(stats.tost_published(x, published, margin=2.0).ci, truth) for x in runs)
    _assert_nominal(t95, datasets, 0.95, "one-sample 95%")
    _assert_nominal(t90, datasets, 0.90, "one-sample TOST 90%")


# ---------------------------------------------------------------- verdict rules on hand-made cases


def evidence(**changes) -> Evidence:
    """A claim of +5 points (A > B, margin 2), two arms of 3 seeds at the full protocol, away from the baseline."""
    base = dict(
        published=5.0,
        direction="greater",
        margin=2.0,
        estimate=5.0,
        ci=(3.0, 7.0),
        ci_equivalence=(3.5, 6.5),
        seeds={"a": 3, "b": 3},
        shares={"a": 1.0, "b": 0.8},
        means={"a": 60.0, "b": 55.0},
        baseline=(35.0, 40.0),
    )
    return Evidence(**{**base, **changes})


CASES = [  # (what changes, verdict, rule)
    ({"seeds": {"a": 3, "b": 1}, "ci": (math.nan, math.nan)}, "not tested", "R1: fewer than 2 seeds of b"),
    (
        {
            "seeds": {"a": 0, "b": 1},
            "ci": (math.nan, math.nan),
            "missing": {"b": ("text",), "a": ("retrieval", "image")},
        },
        "not tested",
        "R1: fewer than 2 seeds of a, b with every task of the average "
        "(no records of a on retrieval, image; b on text)",
    ),
    ({"shares": {"a": 1.0, "b": 0.46}}, "not tested", "R2: below 50% of the protocol's training examples (b 46.0%)"),
    (
        {"shares": {"a": math.nan, "b": 1.0}},
        "not tested",
        "R2: below 50% of the protocol's training examples (a unknown)",
    ),
    (
        {"means": {"a": 38.0, "b": 36.0}},
        "not tested",
        "R3: every arm's mean inside the trivial baseline's [35.00, 40.00]",
    ),
    ({}, "matches", "R4: 90% interval [3.50, 6.50] inside +5.00 ± 2"),
    (
        {"ci": (-4.5, 0.5), "ci_equivalence": (-4.0, 0.0)},
        "contradicted",
        "R5: interval [-4.50, 0.50] excludes the published +5.00",
    ),
    (
        {"ci": (-4.5, -0.5), "ci_equivalence": (-4.0, -1.0)},
        "contradicted",
        "R5: interval [-4.50, -0.50] on the side of zero opposite to the claim",
    ),
    (
        {"ci": (7.5, 11.0), "ci_equivalence": (8.0, 10.5)},
        "contradicted",
        "R5: interval [7.50, 11.00] excludes the published +5.00",
    ),
    (  # a claim of your own: the effect it expects stands where a published one would
        {"ci": (7.5, 11.0), "ci_equivalence": (8.0, 10.5), "effect_name": "expected"},
        "contradicted",
        "R5: interval [7.50, 11.00] excludes the expected +5.00",
    ),
    (
        {"ci": (0.5, 12.0), "ci_equivalence": (1.5, 11.0)},
        "supported",
        "R6: interval [0.50, 12.00] on the claimed side of zero, holds +5.00",
    ),
    (
        {"ci": (-1.0, 12.0), "ci_equivalence": (0.0, 11.0)},
        "inconclusive",
        "R7: interval [-1.00, 12.00] holds +5.00; holds zero",
    ),
    (
        {"direction": "none", "ci": (0.5, 12.0), "ci_equivalence": (1.5, 11.0)},
        "inconclusive",
        "R7: interval [0.50, 12.00] holds +5.00; claim has no direction",
    ),
]


@pytest.mark.parametrize("changes,word,rule", CASES)
def test_each_verdict_rule_fires_where_it_should(changes, word, rule):
    verdict = decide(evidence(**changes))
    assert (verdict.word, verdict.rule) == (word, rule)


def test_rules_apply_in_order_and_the_share_rule_can_be_left_out():
    # below half the protocol AND an interval that would contradict: R2 wins; without R2, R5 speaks
    short = evidence(shares={"a": 0.05, "b": 0.02}, ci=(7.5, 11.0), ci_equivalence=(8.0, 10.5))
    assert decide(short).rule.startswith("R2:")
    assert decide(short, share_rule=False).rule == "R5: interval [7.50, 11.00] excludes the published +5.00"
    # at the baseline AND a would-be match: R3 wins
    assert decide(evidence(means={"a": 38.0, "b": 39.9})).word == "not tested"
    # one arm outside the baseline's interval (below it): R3 does not apply
    assert decide(evidence(means={"a": 38.0, "b": 20.0})).word == "matches"
    # a match inside the margin wins over a 95% interval that excludes the published effect
    assert decide(evidence(ci=(5.2, 6.8), ci_equivalence=(5.4, 6.6))).word == "matches"
    with pytest.raises(ValueError, match="direction 'up': use one of greater, less, none"):
        evidence(direction="up")
    with pytest.raises(ValueError, match="margin must be positive, got 0"):
        evidence(margin=0)


# ---------------------------------------------------------------- per-example evidence over seed pairs


def _runs(rng, seeds: int, n: int, p: float) -> np.ndarray:
    return (rng.random((seeds, n)) < p).astype(float)


def test_cmh_over_seed_pairs_is_stratifiedtable_over_every_example_of_every_pair_and_mcnemar_on_summed_counts():
    rng = np.random.default_rng(3)
    ca, cb = _runs(rng, 3, 120, 0.6), _runs(rng, 2, 120, 0.5)
    result = stats.cmh_seed_pairs(ca, cb)
    # every (seed pair, example) as its own 2x2 stratum, concordant ones included
    pairs = itertools.product(range(3), range(2))
    strata = [[[a, 1 - a], [b, 1 - b]] for i, j in pairs for a, b in zip(ca[i], cb[j], strict=True)]
    reference = StratifiedTable(np.transpose(np.array(strata, dtype=float), (1, 2, 0))).test_null_odds(correction=False)
    assert result.p_value == pytest.approx(reference.pvalue, rel=1e-10)
    only_a = sum(int(((ca[i] == 1) & (cb[j] == 0)).sum()) for i in range(3) for j in range(2))
    only_b = sum(int(((ca[i] == 0) & (cb[j] == 1)).sum()) for i in range(3) for j in range(2))
    chi2 = (only_a - only_b) ** 2 / (only_a + only_b)
    assert result.p_value == pytest.approx(sps.chi2.sf(chi2, 1), rel=1e-10)
    assert (result.details["only_a"], result.details["only_b"], result.details["seed_pairs"]) == (only_a, only_b, 6)
    assert result.estimate == pytest.approx(ca.mean() - cb.mean())
    assert result.details["odds_ratio"] == pytest.approx(only_a / only_b)


def test_cmh_says_why_it_cannot_run_and_refuses_different_test_sets():
    same = np.ones((2, 10))
    assert stats.cmh_seed_pairs(same, same).note == "no discordant pairs"
    with pytest.raises(ValueError, match="different test sets: 10 vs 9 examples"):
        stats.cmh_seed_pairs(same, np.ones((2, 9)))


# ---------------------------------------------------------------- exact permutation


def test_permutation_p_value_is_the_share_of_splits_at_least_as_extreme():
    a, b = np.array([41.2, 40.1, 42.7, 41.9]), np.array([39.0, 40.4, 38.2, 41.0])
    pooled, observed = np.concatenate([a, b]), a.mean() - b.mean()
    diffs = []
    for chosen in itertools.combinations(range(pooled.size), a.size):
        mask = np.zeros(pooled.size, dtype=bool)
        mask[list(chosen)] = True
        diffs.append(pooled[mask].mean() - pooled[~mask].mean())
    diffs = np.array(diffs)
    one_sided = min((diffs >= observed - 1e-12).mean(), (diffs <= observed + 1e-12).mean())
    result = stats.permutation(a, b)
    assert result.p_value == pytest.approx(min(1.0, 2 * one_sided))
    assert result.details["splits"] == math.comb(8, 4) and result.note == ""
    few = stats.permutation(a[:3], b[:3])
    assert few.note == "cannot reach p < 0.05: 3 + 3 seeds give 20 splits, smallest p 0.100"


# ---------------------------------------------------------------- seeds needed and the pooled sd


@pytest.mark.parametrize("effect,sd,two_arms", [(7.49, 1.54, True), (0.62, 0.56, True), (1.47, 0.61, False)])
def test_seeds_needed_is_the_least_n_whose_statsmodels_power_reaches_the_target(effect, sd, two_arms):
    tool, key = (TTestIndPower(), "nobs1") if two_arms else (TTestPower(), "nobs")

    def power(n, size, alpha):
        return tool.power(effect_size=size, alpha=alpha, alternative="larger", **{key: n})

    n = stats.seeds_needed(effect, sd, goal="detect", two_arms=two_arms)
    assert power(n, effect / sd, 0.025) >= 0.8 and (n == 2 or power(n - 1, effect / sd, 0.025) < 0.8)
    m = stats.seeds_needed(effect, sd, goal="match", margin=1.0, two_arms=two_arms)
    assert 2 * power(m, 1.0 / sd, 0.05) - 1 >= 0.8 and (m == 2 or 2 * power(m - 1, 1.0 / sd, 0.05) - 1 < 0.8)
    # the normal approximation of the two-sample size, 2 (z_a/2 + z_b)^2 / d^2, is a lower bound
    if two_arms:
        assert n >= 2 * (sps.norm.ppf(0.975) + sps.norm.ppf(0.8)) ** 2 / (effect / sd) ** 2 - 1


def test_seeds_needed_cannot_be_computed_without_an_sd_or_an_effect():
    assert stats.seeds_needed(1.0, math.nan, goal="detect") is None
    assert stats.seeds_needed(0.0, 1.0, goal="detect") is None
    with pytest.raises(ValueError, match="goal 'match' needs a positive margin, got None"):
        stats.seeds_needed(1.0, 1.0, goal="match")


def test_pooled_sd_is_the_sd_of_residuals_from_each_cell_mean():
    cells = [[37.4, 38.75, 39.5], [77.87, 79.29, 79.53], [38.45, 38.5], [50.0]]
    residuals = np.concatenate([np.asarray(c) - np.mean(c) for c in cells if len(c) > 1])
    dof = sum(len(c) - 1 for c in cells if len(c) > 1)
    assert stats.pooled_sd(cells) == pytest.approx((math.sqrt((residuals**2).sum() / dof), dof))
    assert math.isnan(stats.pooled_sd([[1.0]])[0])


# ---------------------------------------------------------------- trivial baselines on a fixture

TRAIN = pd.DataFrame(
    {
        "root": ["[MAX"] * 5 + ["[MIN"] * 4 + ["[SM"] * 3 + ["[MED"] * 3,
        "label": [9, 9, 8, 9, 1, 0, 0, 2, 0, 3, 7, 7, 4, 4, 5],
    }
)
TEST = pd.DataFrame(
    {"root": ["[MAX", "[MAX", "[MIN", "[MIN", "[MIN", "[SM", "[MED", "[MED"], "label": [9, 3, 0, 0, 1, 7, 4, 5]}
)


def test_root_operator_baseline_predicts_each_roots_most_frequent_training_label():
    counts = listops_roots.train_label_counts(TRAIN["root"], TRAIN["label"])
    summary = {root: {"label_counts": c} for root, c in counts.items()}
    rows = [
        {"index": i, "root": r, "label": int(y)}
        for i, (r, y) in enumerate(zip(TEST["root"], TEST["label"], strict=True))
    ]
    found = baselines.root_operator(summary, rows)
    # independently: pandas' mode per root (smallest label on ties), then the share of test labels equal to it
    mode = TRAIN.groupby("root")["label"].agg(lambda s: s.value_counts().sort_index().idxmax())
    expected = float((TEST["root"].map(mode) == TEST["label"]).mean()) * 100
    assert found.accuracy == pytest.approx(expected) and found.n_test == len(TEST)
    assert found.detail == "MAX -> 9, MED -> 4, MIN -> 0, SM -> 7"
    # the 95% Wilson interval, written out
    p, n, z = expected / 100, len(TEST), sps.norm.ppf(0.975)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert found.interval == pytest.approx((100 * (centre - half), 100 * (centre + half)))
    majority = baselines.majority_class(baselines.listops_train_counts(summary), TEST["label"])
    top = TRAIN["label"].value_counts().sort_index().idxmax()
    assert majority.accuracy == pytest.approx(100 * float((TEST["label"] == top).mean()))
    assert majority.detail == f"label {top} everywhere"


def test_a_verdict_between_two_trivial_predictors_is_flagged_with_their_names():
    from types import SimpleNamespace

    from repro.paper.claims_tables import trivial_sides

    root = baselines.Baseline("root operator", 37.4, (35.31, 39.54), 2000, "")
    majority = baselines.Baseline("majority class", 17.15, (15.56, 18.86), 2000, "")
    task = [root, majority]

    def result(a: float, b: float | None):
        side = SimpleNamespace(mean=b) if b is not None else None
        return SimpleNamespace(a=SimpleNamespace(mean=a), b=side)

    # R3 misses this pair (only B is inside the strongest baseline); each arm sits at its own trivial predictor
    assert trivial_sides(result(17.15, 37.60), task) == "A: majority class, B: root operator"
    assert trivial_sides(result(37.1, 37.6), task) == "A: root operator, B: root operator"
    assert trivial_sides(result(17.15, 45.0), task) is None  # B learned more than any trivial predictor
    assert trivial_sides(result(25.2, 37.6), task) is None  # A between the two intervals
    assert trivial_sides(result(17.15, None), task) is None  # against a published number: no B arm
    assert trivial_sides(result(17.15, 37.6), []) is None  # no baselines for the task


def test_a_root_never_seen_in_training_is_an_error():
    with pytest.raises(ValueError, match=r"root operator\(s\) \[MED of the test set never occur in the training split"):
        listops_roots.baseline_predictions({"[MAX": 9}, ["[MAX", "[MED"])


# ---------------------------------------------------------------- share of the protocol's training examples

CONF = Path(__file__).resolve().parents[1] / "experiments" / "conf"


def _task_train(base: str, task: str) -> dict:
    """The per-task train block of a base config, read straight from its YAML."""
    return OmegaConf.to_container(OmegaConf.load(CONF / "base" / f"{base}.yaml"))["tasks"][task]["train"]


@pytest.mark.parametrize(
    "arm,base,task,n_train", [("lra_transformer", "lra", "listops", 96000), ("locality_k61", "locality", "text", 22500)]
)
def test_share_is_examples_trained_over_the_paper_profiles_steps_times_batch(arm, base, task, n_train):
    train = _task_train(base, task)
    steps = 1234
    metrics = {
        "steps": steps,
        "train_settings": {"batch_size": train["batch_size"]},
        "data": {"source": "generated" if task == "listops" else "bundle", "sizes": {"train": n_train}},
    }
    planned = train["epochs"] * (n_train // train["batch_size"])
    if train.get("max_steps") is not None:
        planned = min(planned, train["max_steps"])
    share, note = protocol.share(metrics, arm, task)
    assert note == "" and share == pytest.approx(steps / planned)


def test_a_generated_task_is_measured_against_the_paper_profiles_training_set_size():
    smoke = {
        "steps": 100,
        "train_settings": {"batch_size": 32},
        "data": {"source": "generated", "sizes": {"train": 128}},
    }
    train, generate = _task_train("locality", "listops"), OmegaConf.load(CONF / "task" / "listops.yaml")["generate"]
    share, _ = protocol.share(smoke, "locality_k5", "listops")
    assert share == pytest.approx(100 / (train["epochs"] * (generate["n_train"] // train["batch_size"])))


def test_an_unknown_protocol_or_record_says_why():
    metrics = {"steps": 10, "train_settings": {"batch_size": 32}, "data": {"sizes": {"train": 100}}}
    share, note = protocol.share(metrics, "no_such_arm", "listops")
    assert math.isnan(share) and note == (
        "arm=no_such_arm task=listops profile=paper techniques=none: In 'config': Could not find 'arm/no_such_arm'"
    )
    share, note = protocol.share({"steps": 10}, "locality_k5", "listops")
    assert math.isnan(share) and note == "the record lacks data.sizes.train, steps or train_settings.batch_size"
    share, note = protocol.share(metrics, "locality_k5", "listops", conf_dir=Path("/nonexistent"))
    assert math.isnan(share) and "config.yaml not found" in note


def test_an_arm_of_your_own_has_its_protocol_read_from_its_config_folder(tmp_path):
    """``lra-paper --config-dir``: an arm outside the package gets its protocol (and so its share) from there."""
    (tmp_path / "arm").mkdir()
    (tmp_path / "arm" / "locality_k9.yaml").write_text(
        "# @package arm\ndefaults:\n  - /base/locality@_here_\n  - _self_\nname: locality_k9\nmodel: {kernel_size: 9}\n"
    )
    metrics = {"steps": 300, "train_settings": {"batch_size": 32}, "data": {"sizes": {"train": 96_000}}}
    mine = protocol.share(metrics, "locality_k9", "listops", arm_dirs=(str(tmp_path),))
    assert mine == protocol.share(metrics, "locality_k61", "listops") and mine[0] > 0  # one protocol, one share
    share, note = protocol.share(metrics, "locality_k9", "listops")
    assert math.isnan(share) and note.endswith("Could not find 'arm/locality_k9'")


def test_the_protocol_is_cached_per_config_search_path(tmp_path):
    """Read inside a Hydra app (a run's ``budget.fraction``), the protocol comes from that app's config folders
    and is not served to a caller in another context."""
    import shutil

    from hydra import initialize_config_dir

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    base = conf / "base" / "locality.yaml"
    base.write_text(
        base.read_text().replace(
            "train: {lr: 0.001, batch_size: 32, weight_decay: 0.1, epochs: 120}",
            "train: {lr: 0.001, batch_size: 32, weight_decay: 0.1, epochs: 7}",
        )
    )
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        inside = protocol.paper_protocol("locality_k5", "listops")
    outside = protocol.paper_protocol("locality_k5", "listops")
    assert (inside.epochs, outside.epochs) == (7, 120)


def test_the_budget_a_record_ran_under():
    assert protocol.budget_label({"budget_minutes": 3, "budget_fraction": 0.1}) == "fraction 0.1 of the protocol"
    assert protocol.budget_label({"budget_minutes": 3}) == "3 min wall clock"
    assert protocol.budget_label({"train_settings": {"budget_minutes": None}}) == "no cap"


# ---------------------------------------------------------------- an average over some of LRA's tasks


class _Seeds:
    """A stand-in for BundleView.seeds: per (arm, task), seeds and test accuracies (%)."""

    def __init__(self, table: dict):
        self.table = table

    def seeds(self, arm: str, task: str) -> pd.DataFrame:
        found = self.table.get((arm, task), {})
        return pd.DataFrame(
            {"seed": list(found), "test_acc": list(found.values()), "share": [1.0] * len(found), "share_note": ""}
        )


def test_an_average_over_some_tasks_takes_the_seeds_with_all_of_them_and_names_the_missing():
    from repro.paper.evaluate import arm_data

    view = _Seeds(
        {
            ("x", "listops"): {0: 40.0, 1: 38.0, 2: 36.0},
            ("x", "text"): {0: 60.0, 2: 64.0},
            ("x", "image"): {0: 41.0, 1: 43.0, 2: 44.0},
        }
    )
    three = arm_data(view, "x", None, ("listops", "text", "image"))
    assert three.seeds == (0, 2) and three.missing == ()
    assert three.values.tolist() == pytest.approx([(40 + 60 + 41) / 3, (36 + 64 + 44) / 3])
    five = arm_data(view, "x", None)  # LRA's five tasks: no seed has retrieval and Pathfinder
    assert five.seeds == () and five.missing == ("retrieval", "pathfinder")


def test_an_average_claim_over_some_tasks_reads_the_mean_of_their_published_columns(tmp_path):
    from repro.paper import claims
    from repro.reference import published

    spec = claims.load(ROOT / "paper" / "claims.yaml")
    claim = next(c for c in spec.claims if c.id == "lra-average3-transformer-first")
    pub = published("lra_table1_accuracy").set_index("model")
    tasks = ["listops", "text", "image"]
    expected = float(pub.loc["transformer", tasks].mean() - pub.loc["bigbird", tasks].mean())
    assert claim.primary.tasks == tuple(tasks) and claim.primary.published_effect() == pytest.approx(expected)
    bad = tmp_path / "claims.yaml"
    text = (ROOT / "paper" / "claims.yaml").read_text()
    bad.write_text(text.replace("tasks: [listops, text, image]\n", "tasks: [listops, pathx]\n", 1))
    with pytest.raises(claims.ClaimsError) as error:
        claims.load(bad)
    where = f"claims[{[c.id for c in spec.claims].index(claim.id)}].primary"
    assert str(error.value) == (
        f"{bad}: {where}.tasks ['listops', 'pathx']: two or more of listops, text, retrieval, image, pathfinder, "
        "or leave it out (all five)"
    )

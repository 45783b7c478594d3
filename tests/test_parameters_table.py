"""The parameter-count table: the records' counts per arm and task, and the LRA release's 10% rule."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from repro.paper.parameters import parameters_table, size_flag


def view(rows: list[tuple]) -> SimpleNamespace:
    runs = pd.DataFrame(rows, columns=["arm", "techniques", "task", "seed", "parameters"])
    return SimpleNamespace(runs=runs, profile_note=lambda: "profile note")


def test_the_release_rule_allows_at_most_ten_percent_more_than_the_base_transformer():
    assert size_flag(110, 100) == "within 10%" and size_flag(50, 100) == "within 10%"
    assert size_flag(111, 100) == "+11%"
    # the counts a release user reported (long-range-arena/issues/2): Performer against the image Transformer
    assert size_flag(248458, 52266) == "+375%"


def test_cells_hold_each_arm_s_count_per_task_and_the_rule_for_lra_arms_only():
    table = parameters_table(
        view(
            [
                ("lra_transformer", "none", "image", 0, 52266.0),
                ("lra_transformer", "none", "image", 1, 52266.0),
                ("lra_performer", "none", "image", 0, 248458.0),
                ("lra_performer", "none", "listops", 0, 19982858.0),  # no Transformer record on ListOps: no flag
                ("lra_sinkhorn", "none", "image", 0, 52810.0),
                ("gmlp", "followup", "image", 0, 1000.0),
                ("gmlp", "followup", "image", 1, 1200.0),  # seeds that disagree: the range
                ("gmlp", "followup", "text", 0, float("nan")),  # a record without a count
            ]
        )
    )
    assert table.columns == ["Arm", "Techniques", "ListOps", "Text", "Image"]
    rows = {row[0]: row[2:] for row in table.rows}
    assert rows["lra_transformer"] == ["—", "—", "52,266 (within 10%)"]
    assert rows["lra_performer"] == ["19,982,858", "—", "248,458 (+375%)"]
    assert rows["lra_sinkhorn"][2] == "52,810 (within 10%)"
    assert rows["gmlp"] == ["—", "—", "1,000-1,200"]

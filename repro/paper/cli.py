"""Regenerate both papers' tables and figures from a bundle, ours beside the published numbers.

Usage::

    lra-paper --bundle results/v1 [--bundle results/v1b ...] [--out paper] [--profile budget]
              [--listops-arm locality_k61] [--claims paper/claims.yaml] [--no-verify]
    lra-paper lra-table1 --bundle results/v0.2-lra [--bundle ...] [--leave-out RECORD ...] [--out paper]
                         [--leave-out-from GRID] [--profile paper] [--no-verify]
    lra-paper pathfinder-samples [--seed 0] [--difficulty hard] [--render release] [--out paper]
    python -m repro.paper ...   (the same, from a checkout without installing)

Writes ``<out>/tables/<name>.md`` and ``.tex`` and ``<out>/figures/<name>.png``:

tables
  ``lra_table1_accuracy``      Tay et al. 2021, Table 1: test accuracy per task, seeds' mean ± sd, published beside
  ``lra_table2_efficiency``    Tay et al. 2021, Table 2: training steps/s and peak memory at 1K-4K (benchmark records)
  ``followup_table1_locality`` ... ``followup_table4_positional_ablation``: the follow-up study's Tables 1-4
  ``statistics_claims``        each claim of both papers (paper/claims.yaml): its primary test, interval, the
                               verdict rule that applied, and the seeds it would need
  ``statistics_secondary``     secondary tests: exact permutation, per-example CMH over every seed pair, and
                               the claims' further comparisons
  ``trivial_baselines``        majority class and (ListOps) root operator on each task's test set
  ``protocol_share``           per cell: data, budget, examples trained and their share of the protocol's
  ``parameters``               per arm and task: the parameter count, and the LRA release's 10% rule for lra_*
  ``listops_operator_accuracy`` per root operator: the root-operator baseline vs a model (the follow-up, appendix B)
  ``runs``                     every record in the bundle
  ``index``                    (Markdown only) the bundle's version and hash, and what each file is
figures
  ``lra_figure3_tradeoff`` (LRA Figure 3; for a campaign's records ``lra_table1_figure3``, below),
  ``followup_accuracy_vs_kernel``, ``listops_label_distribution``, ``listops_operator_accuracy``

``lra-table1`` writes ``<out>/tables/lra_table1.md`` (and .tex; the main command too, for records of profile
paper of the ``lra_*`` arms): LRA Table 1 at the release's protocol
over the tasks with records (per cell mean ± sd, a 95% interval over seeds, the published number;
averages over those tasks; each column's data source and trivial baselines) and the ranking table
(Spearman's rho of our means against the published per task, with a bootstrap interval over seeds;
``repro.paper.lra_campaign``), then the claims of Tay et al. 2021 in the claims file, each under its
primary test and the verdict rule that applied; and ``<out>/figures/lra_table1_figure3.png``, LRA
Figure 3 from the same records: accuracy over the tasks every arm with records has, against speed (the
first bundle's benchmark records at 4K, else the text records' training examples/s), circle area the
peak memory, beside the published points over the same tasks.

``--bundle`` may be repeated: the records of several bundles (each record in one of them; a campaign
frozen slot by slot), the first bundle's benchmark records; the ListOps root-operator baseline comes from
whichever bundle holds the analysis of the records' test set.

``pathfinder-samples`` needs no bundle: it writes ``<out>/figures/pathfinder32_samples.png`` and
``pathx128_samples.png``, 8 positive and 8 negative generated images of Pathfinder (32x32) and Path-X
(128x128), drawn by ``--render`` (``release``, the default of the task configs:
``repro.tasks.pathfinder_release``; ``contour_v3``: ``repro.tasks.pathfinder_render``) exactly as the model
sees them.

Only records of one profile are shown (``--profile``; default the largest present: paper, then
budget, then smoke); the tables say how many records of other profiles the bundle holds. A cell
whose run is not in the bundle is "—" and every table counts them; nothing is filled in. Same
bundle, same bytes: rows are sorted, numbers have fixed formats and no table carries a date.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..bundle import BundleError, require_intact
from ..grid.cells import GridError, superseded_records, superseded_source
from ..reference import LRA_MODEL_ARMS
from ..tasks import pathfinder as pf
from ..tasks import pathfinder_render as render
from . import claims as claims_file
from . import plots
from .accuracy import FOLLOWUP_TASKS, followup_tables, lra_table1, runs_table
from .claims_tables import baselines_table, claims_table, secondary_table, shares_table
from .efficiency import bench_frame, lra_table2
from .evaluate import evaluate, pooled_sds
from .figures import PATHFINDER_SAMPLE_FILES, kernel_curves, pathfinder_samples, tradeoff_points
from .listops import listops_analysis, listops_table
from .lra_campaign import ranking, table1, tasks_run
from .parameters import parameters_table
from .render import Table
from .view import BundleView

PAPER_DIR = Path(__file__).resolve().parents[2] / "paper"  # a checkout's paper/ folder
DEFAULT_CLAIMS = PAPER_DIR / "claims.yaml"


def _bundles_line(view: BundleView) -> str:
    return "; ".join(f"{v} (MANIFEST.json sha256 {h})" for v, h in zip(view.versions, view.hashes, strict=True))


def _bundle_flags(view: BundleView) -> str:
    """The ``--bundle`` (``--leave-out``, ``--config-dir``) options that regenerate the view."""
    return " ".join(
        [
            *(f"--bundle {p.as_posix()}" for p in view.paths),
            *(f"--leave-out {r}" for r in view.left_out),
            *(f"--config-dir {d}" for d in view.arm_dirs),
        ]
    )


def index_page(view: BundleView, tables: list[Table], figures: list[Path], campaign: bool = False) -> str:
    """The index of what was written; ``campaign``: ``lra_table1.md`` was written too."""
    lines = [
        f"# Tables and figures of bundle {', '.join(view.versions)}",
        "",
        f"Regenerated by `python -m repro.paper {_bundle_flags(view)}` (or `lra-paper`) from bundle version "
        f"{_bundles_line(view)}; profile shown: {view.profile}.",
        "",
        "| table | missing cells (not run) | files |",
        "| --- | --- | --- |",
    ]
    for t in tables:
        missing, total = t.missing()
        files = f"[{t.name}.md]({t.name}.md) (the command writes {t.name}.tex beside it)"
        lines.append(f"| {t.title} | {missing} of {total} | {files} |")
    if campaign:
        lines.append(
            "| LRA Table 1 at the release's protocol, the ranking and the LRA paper's claims | counted in the file "
            "| [lra_table1.md](lra_table1.md) (as `lra-paper lra-table1` writes it) |"
        )
    lines += ["", "| figure | file |", "| --- | --- |"]
    lines += [f"| {p.stem} | [../figures/{p.name}](../figures/{p.name}) |" for p in figures]
    return "\n".join(lines) + "\n"


def _tradeoff(view: BundleView, bench, path: Path) -> Path:
    return plots.tradeoff(*tradeoff_points(view, bench), path)


def _figures(view: BundleView, counts, operator_rows, note: str, figures_dir: Path) -> list[Path]:
    """The bundle's figures but LRA Figure 3 (``make`` draws the one that fits its records)."""
    kernels, pub_curves, our_curves = kernel_curves(view)
    return [
        plots.accuracy_vs_kernel(
            list(FOLLOWUP_TASKS), kernels, pub_curves, our_curves, figures_dir / "followup_accuracy_vs_kernel.png"
        ),
        plots.label_distribution(counts, figures_dir / "listops_label_distribution.png", note),
        plots.operator_accuracy(operator_rows, figures_dir / "listops_operator_accuracy.png", note),
    ]


def _views(
    bundles, profile: str | None, verify: bool, leave_out: list[Path] | None = None, arm_dirs: tuple = ()
) -> BundleView:
    """The view of one bundle folder or a list of them, each verified first (unless ``verify`` is off)."""
    bundles = [Path(b) for b in (bundles if isinstance(bundles, (list, tuple)) else [bundles])]
    if verify:
        for bundle in bundles:
            require_intact(bundle)
    return BundleView(bundles, profile, leave_out=leave_out, arm_dirs=arm_dirs)


LRA_PAPER = "Tay et al. 2021"  # the claims of paper/claims.yaml that lra-table1 tests


def make_lra_table1(
    bundles,
    out: Path,
    profile: str | None = None,
    claims: Path = DEFAULT_CLAIMS,
    verify: bool = True,
    leave_out: list[Path] | None = None,
) -> list[Path]:
    """``<out>/tables/lra_table1.md`` and ``.tex``: LRA Table 1 at the protocol, the ranking table, and the
    LRA paper's claims of the claims file under their primary tests and verdict rules (``leave_out``:
    records not shown, e.g. one whose arm's settings were corrected after it ran); and
    ``<out>/figures/lra_table1_figure3.png``, LRA Figure 3 from the same records."""
    spec = claims_file.load(Path(claims))
    view = _views(bundles, profile, verify, leave_out)
    tables = write_lra_table1(view, spec, evaluate(view, spec), out)
    return [*tables, write_lra_figure3(view, bench_frame(view), out)]


CAMPAIGN_FIGURE = "lra_table1_figure3.png"  # LRA Figure 3 from the records lra_table1.md shows


def write_lra_figure3(view: BundleView, bench, out: Path) -> Path:
    """LRA Figure 3 from the records of ``lra_table1.md``: ``<out>/figures/lra_table1_figure3.png``."""
    return _tradeoff(view, bench, out / "figures" / CAMPAIGN_FIGURE)


def write_lra_table1(view: BundleView, spec, results: list, out: Path) -> list[Path]:
    """``make_lra_table1``'s tables from a view and the claims evaluated on it (those of the LRA paper shown)."""
    results = [r for r in results if r.claim.paper == LRA_PAPER]
    claims_rows = claims_table(results, view, spec.alpha, spec.power)
    claims_rows.name, claims_rows.title = "lra_table1_claims", f"The claims of {LRA_PAPER}, tested on these records"
    sizes = parameters_table(view, "lra_table1_parameters")
    sizes.rows = [row for row in sizes.rows if row[0] in set(LRA_MODEL_ARMS.values()) and row[1] == "none"]
    tables = [table1(view), sizes, ranking(view), claims_rows]
    folder = out / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    md, tex = folder / "lra_table1.md", folder / "lra_table1.tex"
    command = f"python -m repro.paper lra-table1 {_bundle_flags(view)}"
    header = f"Regenerated by `{command}` from bundle version {_bundles_line(view)}."
    header += f" LRA Figure 3 from the same records: [../figures/{CAMPAIGN_FIGURE}](../figures/{CAMPAIGN_FIGURE})."
    md.write_text(header + "\n\n" + "\n".join(t.markdown() for t in tables), encoding="utf-8")
    tex.write_text("\n".join(t.latex() for t in tables), encoding="utf-8")
    return [md, tex]


def make(
    bundle: Path,
    out: Path,
    profile: str | None = None,
    claims: Path = DEFAULT_CLAIMS,
    listops_arm: str | None = None,
    verify: bool = True,
    arm_dirs: tuple = (),
) -> list[Path]:
    """Write every table and figure; returns the paths written. Nothing is written when the bundle
    fails verification or the claims file is malformed. Records of profile paper of the ``lra_*`` arms
    (the LRA campaign) also get ``lra_table1.md`` and its Figure 3, ``lra_table1_figure3.png``, as ``lra-table1``
    writes them, in place of ``lra_figure3_tradeoff.png``."""
    spec = claims_file.load(Path(claims))
    view = _views(bundle, profile, verify, arm_dirs=arm_dirs)
    bench = bench_frame(view)
    results = evaluate(view, spec)
    counts, operator_rows, note = listops_analysis(view, listops_arm)
    tables = [
        lra_table1(view),
        lra_table2(view, bench),
        *followup_tables(view),
        claims_table(results, view, spec.alpha, spec.power),
        secondary_table(results, view, pooled_sds(view)),
        baselines_table(view),
        shares_table(view),
        parameters_table(view),
        listops_table(operator_rows, note),
        runs_table(view),
    ]
    written = [p for t in tables for p in t.write(out / "tables")]
    campaign = view.profile == "paper" and bool(tasks_run(view))
    if campaign:
        written += write_lra_table1(view, spec, results, out)
        figure3 = write_lra_figure3(view, bench, out)
    else:
        figure3 = _tradeoff(view, bench, out / "figures" / "lra_figure3_tradeoff.png")
    figures = [figure3, *_figures(view, counts, operator_rows, note, out / "figures")]
    index = out / "tables" / "index.md"
    index.write_text(index_page(view, tables, figures, campaign), encoding="utf-8")
    return written + figures + [index]


def draw_pathfinder_samples(out: Path, seed: int = 0, difficulty: str = "hard", render_name: str = pf.DEFAULT_RENDER):
    """The sample grids of generated Pathfinder (32x32) and Path-X (128x128) images in ``<out>/figures``."""
    written = []
    for resolution, name in PATHFINDER_SAMPLE_FILES.items():
        positives, negatives, title = pathfinder_samples(resolution, difficulty, seed, render_name)
        written.append(plots.pathfinder_samples(positives, negatives, title, out / "figures" / name))
    return written


def samples_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lra-paper pathfinder-samples",
        description="Sample grids of generated Pathfinder (32x32) and Path-X (128x128) images, 8 positive, 8 negative.",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--difficulty", default="hard", choices=render.DIFFICULTIES)
    p.add_argument("--render", default=pf.DEFAULT_RENDER, choices=sorted(pf.RENDERS))
    p.add_argument("--out", type=Path, default=PAPER_DIR, help=f"the grids go to OUT/figures (default: {PAPER_DIR})")
    return p


def table1_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lra-paper lra-table1",
        description="LRA Table 1 at the release's protocol and the ranking table, from one or more bundles.",
    )
    p.add_argument("--bundle", type=Path, action="append", required=True, help="a bundle folder (repeatable)")
    p.add_argument(
        "--out",
        type=Path,
        default=PAPER_DIR,
        help=f"the table goes to OUT/tables, Figure 3 to OUT/figures (default: {PAPER_DIR})",
    )
    p.add_argument("--profile", default="paper", help="profile to show (default: paper)")
    p.add_argument("--claims", type=Path, default=DEFAULT_CLAIMS, help=f"the claims file (default: {DEFAULT_CLAIMS})")
    p.add_argument("--no-verify", action="store_true", help="skip checking the bundles' checksums first")
    p.add_argument(
        "--leave-out",
        type=Path,
        action="append",
        default=[],
        help="a record folder of the bundles not to show, e.g. one run before its arm's settings were corrected "
        "(repeatable; the table names it)",
    )
    p.add_argument(
        "--leave-out-from",
        type=Path,
        action="append",
        default=[],
        help="a grid file whose 'superseded' records are left out too, each a record of the bundles given, its path "
        "relative to the working directory as in the grid file (run from the repository root; repeatable)",
    )
    return p


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lra-paper",
        description=__doc__.split("\n\n")[0],
        epilog="'lra-paper lra-table1 --help': LRA Table 1 at the protocol; "
        "'lra-paper pathfinder-samples --help': the grids of generated Pathfinder and Path-X images",
    )
    p.add_argument(
        "--bundle", type=Path, action="append", required=True, help="a bundle folder, e.g. results/v1 (repeatable)"
    )
    p.add_argument("--out", type=Path, default=PAPER_DIR, help=f"where tables/ and figures/ go (default: {PAPER_DIR})")
    p.add_argument("--profile", help="profile to show (default: paper, else budget, else smoke)")
    p.add_argument(
        "--claims",
        "--comparisons",
        dest="claims",
        type=Path,
        default=DEFAULT_CLAIMS,
        help=f"the claims file (default: {DEFAULT_CLAIMS})",
    )
    p.add_argument("--listops-arm", help="arm of the ListOps per-operator figure (default: best mean ListOps accuracy)")
    p.add_argument("--no-verify", action="store_true", help="skip checking the bundle's checksums first")
    p.add_argument(
        "--config-dir",
        action="append",
        default=[],
        help="a config folder holding arms of your own, as experiments/run.py --config-dir took them (repeatable): "
        "their protocol is read from it",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["pathfinder-samples"]:
        args = samples_parser().parse_args(argv[1:])
        for path in draw_pathfinder_samples(args.out, args.seed, args.difficulty, args.render):
            print(path)
        return 0
    if argv[:1] == ["lra-table1"]:
        args = table1_parser().parse_args(argv[1:])
        try:
            leave_out = [*args.leave_out, *superseded_records(args.leave_out_from, args.bundle)]
            written = make_lra_table1(
                args.bundle, args.out, args.profile, args.claims, verify=not args.no_verify, leave_out=leave_out
            )
        except (BundleError, claims_file.ClaimsError, GridError) as err:
            print(f"error: {err}{superseded_source(str(err), args.leave_out_from)}", file=sys.stderr)
            return 1
        print("\n".join(str(p) for p in written))
        return 0
    args = parser().parse_args(argv)
    try:
        written = make(
            args.bundle,
            args.out,
            args.profile,
            args.claims,
            args.listops_arm,
            verify=not args.no_verify,
            arm_dirs=args.config_dir,
        )
    except (BundleError, claims_file.ClaimsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0

"""Regenerate both papers' tables and figures from a bundle, ours beside the published numbers.

Usage::

    lra-paper --bundle results/v1 [--bundle results/v1b ...] [--out paper] [--profile budget]
              [--listops-arm locality_k61] [--claims paper/claims.yaml] [--no-verify] [--study results/v0.2-lra]
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
  ``followup_power``           per follow-up claim: whether two seeds can decide it, from the seed sd of the
                               nearest arm's three-seed records (``--study``, else the bundle's own)
  ``trivial_baselines``        majority class and (ListOps) root operator on each task's test set
  ``protocol_share``           per cell: data, budget, examples trained and their share of the protocol's
  ``parameters``               per arm and task: the parameter count, and the LRA release's 10% rule for lra_*
  ``listops_operator_accuracy`` per root operator: the root-operator baseline vs a model (the follow-up, appendix B)
  ``runs``                     every record in the bundle
  ``index``                    (Markdown only) the bundles' versions and hashes, and what each file is: first
                               the LRA campaign's Table 1 and Figure 3 (``--study``, or the bundle's own)
figures
  ``lra_figure3_tradeoff`` (LRA Figure 3; for a campaign's records ``lra_table1_figure3``, below),
  ``followup_accuracy_vs_kernel``, ``listops_label_distribution``, ``listops_operator_accuracy``

``lra-table1`` writes ``<out>/tables/lra_table1.md`` (and .tex; the main command too, for records of profile
paper of the ``lra_*`` arms or the bundles of ``--study``): LRA Table 1 at the release's protocol
over the tasks with records (per cell mean ± sd, a 95% interval over seeds, the published number;
averages over those tasks; each column's data source and trivial baselines; the builder of
``lra_table1_accuracy`` too, ``repro.paper.accuracy.lra_table1``) and the ranking table
(Spearman's rho of our means against the published per task, with a bootstrap interval over seeds;
``repro.paper.lra_campaign``), then the claims of Tay et al. 2021 in the claims file, each under its
primary test and the verdict rule that applied; and ``<out>/figures/lra_table1_figure3.png``, LRA
Figure 3 from the same records: accuracy over the tasks every arm with records has (bars: sd over the
seeds), against speed, circle area the peak memory. With the first bundle's benchmark records at 4K the
published points (over the same tasks) get a panel of their own beside ours; with the text records'
training examples/s, a quantity the published figure does not show, ours are drawn alone.

``--bundle`` may be repeated: the records of several bundles (each record in one of them; a campaign
frozen slot by slot), the first bundle's benchmark records; the ListOps root-operator baseline comes from
whichever bundle holds the analysis of the records' test set.

``pathfinder-samples`` needs no bundle: it writes ``<out>/figures/pathfinder32_samples.png`` and
``pathx128_samples.png``, 8 positive and 8 negative generated images of Pathfinder (32x32) and Path-X
(128x128), drawn by ``--render`` (``release``, the default of the task configs:
``repro.tasks.pathfinder.release``; ``contour_v3``: ``repro.tasks.pathfinder.render``) exactly as the model
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
from ..tasks.pathfinder import render
from . import claims as claims_file
from . import plots
from .accuracy import followup_tables, lra_table1, runs_table, tasks_run
from .claims_power import power_table
from .claims_tables import baselines_table, claims_table, secondary_table, shares_table
from .commands import DEBUG_HELP, DEFAULT_CLAIMS, PAPER_DIR, parser, table1_parser
from .efficiency import bench_frame, lra_table2
from .evaluate import evaluate, pooled_sds
from .figures import PATHFINDER_SAMPLE_FILES, kernel_curves, pathfinder_samples, tradeoff_points
from .listops import listops_analysis, listops_table
from .lra_campaign import ranking
from .names import FOLLOWUP_TASKS
from .parameters import parameters_table
from .render import Table
from .view import BundleView


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


def _budgets(view: BundleView) -> str:
    """The budgets the shown records ran under, in words ("3 min wall clock", "no cap")."""
    return ", ".join(sorted({str(b) for b in view.runs["budget"].dropna()})) or "no records"


def index_page(
    view: BundleView,
    tables: list[Table],
    figures: list[Path],
    study: BundleView | None = None,
) -> str:
    """The index of what was written: first the LRA campaign's Table 1 and Figure 3 (``study``: the view that
    ``lra_table1.md`` and ``lra_table1_figure3.png`` were written from, when they were), then every table and
    figure of ``view``'s bundles."""
    command = f"python -m repro.paper {_bundle_flags(view)}"
    if study is not None and study is not view:
        command += " " + _bundle_flags(study).replace("--bundle ", "--study ")
    lines = [
        "# Tables and figures",
        "",
        f"Regenerated by `{command}` (or `lra-paper`).",
        "",
    ]
    if study is not None:
        lines += [
            f"## Bundle {', '.join(study.versions)}: LRA Table 1 at the release's protocol (profile {study.profile})",
            "",
            f"From bundle version {_bundles_line(study)}: {len(study.runs)} records.",
            "",
            "| table | files |",
            "| --- | --- |",
            "| LRA Table 1 at the release's protocol, the ranking and the LRA paper's claims "
            f"| [lra_table1.md](lra_table1.md) (as `python -m repro.paper lra-table1 {_bundle_flags(study)}` "
            "writes it) |",
            "",
            "| figure | file |",
            "| --- | --- |",
            f"| LRA Figure 3 from the same records | [../figures/{CAMPAIGN_FIGURE}](../figures/{CAMPAIGN_FIGURE}) |",
            "",
        ]
    where = "the papers' protocol" if view.profile == "paper" else f"{_budgets(view)} a run, not the papers' protocol"
    lines += [
        f"## Bundle {', '.join(view.versions)}: every table, profile {view.profile} ({where})",
        "",
        f"From bundle version {_bundles_line(view)}; profile shown: {view.profile}.",
        "",
        "| table | missing cells (not run) | files |",
        "| --- | --- | --- |",
    ]
    for t in tables:
        missing, total = t.missing()
        files = f"[{t.name}.md]({t.name}.md) (the command writes {t.name}.tex beside it)"
        lines.append(f"| {t.title} | {missing} of {total} | {files} |")
    lines += ["", "| figure | file |", "| --- | --- |"]
    lines += [f"| {p.stem} | [../figures/{p.name}](../figures/{p.name}) |" for p in figures]
    return "\n".join(lines) + "\n"


def _tradeoff(view: BundleView, bench, path: Path) -> Path:
    points = tradeoff_points(view, bench)
    return plots.tradeoff(points.published, points.ours, points.ours_axis, points.tasks, points.same_quantity, path)


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
    for bundle in bundles:
        if not bundle.is_dir():
            raise BundleError(f"--bundle {bundle}: no such folder (a bundle under results/, from lra-bundle freeze)")
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
    tables = [lra_table1(view, campaign=True), sizes, ranking(view), claims_rows]
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
    study: list[Path] | None = None,
) -> list[Path]:
    """Write every table and figure; returns the paths written. Nothing is written when the bundle
    fails verification or the claims file is malformed. Records of profile paper of the ``lra_*`` arms
    (the LRA campaign) also get ``lra_table1.md`` and its Figure 3, ``lra_table1_figure3.png``, as ``lra-table1``
    writes them, in place of ``lra_figure3_tradeoff.png``; ``study``: the bundles of such a campaign whose
    ``lra_table1.md`` and Figure 3 are written beside the tables of ``bundle`` and lead the index."""
    spec = claims_file.load(Path(claims))
    view = _views(bundle, profile, verify, arm_dirs=arm_dirs)
    campaign = view.profile == "paper" and bool(tasks_run(view))
    study_view = _views(study, None, verify) if study else None
    if study_view is not None and (campaign or study_view.profile != "paper" or not tasks_run(study_view)):
        raise BundleError(
            f"--study {', '.join(study_view.versions)}: "
            + (
                f"--bundle {', '.join(view.versions)} holds a campaign's records already; give it alone"
                if campaign
                else "no records of profile paper of the lra_* arms; give the bundles of the LRA campaign"
            )
        )
    bench = bench_frame(view)
    results = evaluate(view, spec)
    counts, operator_rows, note = listops_analysis(view, listops_arm)
    tables = [
        lra_table1(view),
        lra_table2(bench, sorted(view.manifest.get("devices", []))),
        *followup_tables(view),
        claims_table(results, view, spec.alpha, spec.power),
        secondary_table(results, view, pooled_sds(view)),
        power_table(spec, study_view or view),
        baselines_table(view),
        shares_table(view),
        parameters_table(view),
        listops_table(operator_rows, note),
        runs_table(view),
    ]
    written = [p for t in tables for p in t.write(out / "tables")]
    figures, study_figure = [], None
    if campaign:
        study_view = view
        written += write_lra_table1(view, spec, results, out)
        study_figure = write_lra_figure3(view, bench, out)
    else:
        figures.append(_tradeoff(view, bench, out / "figures" / "lra_figure3_tradeoff.png"))
        if study_view is not None:
            written += write_lra_table1(study_view, spec, evaluate(study_view, spec), out)
            study_figure = write_lra_figure3(study_view, bench_frame(study_view), out)
    figures += _figures(view, counts, operator_rows, note, out / "figures")
    index = out / "tables" / "index.md"
    index.write_text(index_page(view, tables, figures, study_view), encoding="utf-8")
    return written + ([study_figure] if study_figure else []) + figures + [index]


def draw_pathfinder_samples(out: Path, seed: int = 0, difficulty: str = "hard", render_name: str = pf.DEFAULT_RENDER):
    """The sample grids of generated Pathfinder (32x32) and Path-X (128x128) images in ``<out>/figures``."""
    written = []
    for resolution, name in PATHFINDER_SAMPLE_FILES.items():
        positives, negatives, title = pathfinder_samples(resolution, difficulty, seed, render_name)
        written.append(plots.pathfinder_samples(positives, negatives, title, out / "figures" / name))
    return written


def samples_parser(prog: str = "lra-paper") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{prog} pathfinder-samples",
        description="Sample grids of generated Pathfinder (32x32) and Path-X (128x128) images, 8 positive, 8 negative.",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--difficulty", default="hard", choices=render.DIFFICULTIES)
    p.add_argument("--render", default=pf.DEFAULT_RENDER, choices=sorted(pf.RENDERS))
    p.add_argument("--out", type=Path, default=PAPER_DIR, help=f"the grids go to OUT/figures (default: {PAPER_DIR})")
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    return p


# Input the command refuses, with exit status 2 (``validate.refused``); anything else is a bug (exit status 1).
USER_ERRORS = (BundleError, claims_file.ClaimsError, GridError)


def out_problem(out: Path) -> str | None:
    """``--out`` where a folder cannot be: a file there, or a file where one of its parent folders would be."""
    for folder in (out, *out.parents):
        if folder.exists():
            if folder.is_dir():
                return None
            where = "" if folder == out else f" (where its folder {folder} would be)"
            return f"--out {out}: {folder} is a file, not a folder{where}; point --out at a folder (created if absent)"
    return None


def main(argv: list[str] | None = None, prog: str = "lra-paper") -> int:
    """The work of ``lra-paper`` (``repro.paper.entry.main``, the entry point, prints the help pages first).
    Refused input is one line and exit status 2 (``--debug``: its traceback)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv[:1] in (["pathfinder-samples"], ["lra-table1"]) else None
    make_parser = {"pathfinder-samples": samples_parser, "lra-table1": table1_parser, None: parser}[command]
    args = make_parser(prog).parse_args(argv[1:] if command else argv)
    leave_out_from = getattr(args, "leave_out_from", [])
    try:
        if problem := out_problem(args.out):
            raise BundleError(problem)
        if command == "pathfinder-samples":
            written = draw_pathfinder_samples(args.out, args.seed, args.difficulty, args.render)
        elif command == "lra-table1":
            leave_out = [*args.leave_out, *superseded_records(leave_out_from, args.bundle)]
            written = make_lra_table1(
                args.bundle, args.out, args.profile, args.claims, verify=not args.no_verify, leave_out=leave_out
            )
        else:
            written = make(
                args.bundle,
                args.out,
                args.profile,
                args.claims,
                args.listops_arm,
                verify=not args.no_verify,
                arm_dirs=args.config_dir,
                study=args.study,
            )
    except USER_ERRORS as err:
        from ..run.validate import refused

        return refused(err, args.debug, superseded_source(str(err), leave_out_from))
    for path in written:
        print(path)
    return 0

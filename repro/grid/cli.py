"""``lra-grid``: run, plan and account a grid of (arm, task, seed) cells on GPU machines lent in short slots.

Usage (``python -m repro.grid`` takes the same arguments)::

    lra-grid GRID.yaml [options] [-- overrides for every cell]     # run the cells left
    lra-grid GRID.yaml --plan [options] [-- overrides]             # GPU-minutes per cell
    lra-grid GRID.yaml --dry-run [-- overrides]                    # print the commands
    lra-grid ledger GRID.yaml --records DIR [--records DIR2 ...] [--plan-file F]  # write the grid's LEDGER.md
    lra-grid unpack FOLDER --into DIR                              # a slot's archives into an output folder
    lra-grid stage FOLDER --budget-mib M --checkout-mib C [--data-mib D] [--to DIR]  # parts over inbound calls
    lra-grid assemble FOLDER [FOLDER ...] --into DIR               # check the parts, write the set (on the machine)

Each cell is ``python experiments/run.py arm=A task=T seed=S progress=false <common> <overrides>``
(``--runner`` names another script); a cell of a block with ``gpus: N`` runs it under ``torchrun`` on N
GPUs (``cells``). A cell whose record is already complete with the same
settings is skipped at once; an unfinished one resumes from its checkpoint (the runner's).

The slot driver, one command for a GPU machine lent for 30 minutes (start it in the
background with ``setsid``, poll its output, and copy ``<out>`` back when it has returned)::

    lra-grid experiments/grids/v0.2-lra.yaml --gpus all --per-gpu 3 --deadline-minutes 24 \\
        --plan-file experiments/grids/v0.2-lra/plan.csv --archive-to <out> \\
        --resume-from <the previous slot's <out> files> -- data_dir=.gpu/data output_dir=outputs

It unpacks the previous slot's archives into ``output_dir`` (``--resume-from``), starts every
cell left on every GPU, ``--per-gpu`` at once on each (a block's ``per_gpu`` wins for its cells),
in the grid's order (``--columns text:1,listops``: only those columns, in that order; ``--first A,B``: those
arms' cells first within each task and seed); starts
a cell only if its expected time (the plan's GPU-minutes or another seed's, else a record's of the
same arm and task, here or in ``--records``, else the grid file's ``minutes_per_run +
overhead_minutes``; times the fraction its checkpoint has left; times ``--pack-slowdown``, by default the GPU's
packing limit) ends before the deadline (``--deadline-minutes`` from the command's start,
``--stop-at`` a UTC time; the earlier); at the deadline, or on SIGTERM/SIGINT/SIGUSR1, sends
the running cells that signal (SIGTERM at the deadline: each checkpoints and exits 143), waits
``--stop-grace-seconds`` (120) and kills what is left; appends a row per cell and per GPU to
``<output_dir>/grid_log.csv`` (``gridlog``: GPU seconds, examples, aggregate examples/s) and
prints the throughput; then writes ``--archive-to``: the complete records, the unfinished runs'
checkpoints and the logs in parts of at most ``--archive-mib`` (16) MiB, grouped into at most
``--archive-transfers`` (1) transfers of at most ``--archive-files`` (8, the manifest counted)
files and ``--archive-transfer-mib`` (64) MiB (``archive``; with several, one ``transfer-NN/``
folder each, brought back by one call each: ``parts``). It returns 0 when no cell failed and
everything fitted (cells left for the next slot are listed, not failures), 1 when a cell failed
or something did not fit the archives (named on stderr), 128 + signum when stopped by a signal
(after archiving), 2 on bad input. ``--carry-over`` also starts cells that cannot end before
the deadline while 5 minutes are left (they continue from their checkpoint in the next slot); a
block's ``carry_over: false`` or ``true`` wins over it for the block's cells, and with ``--archive-to``
a cell whose checkpoint (its own, else ``footprint.checkpoint_bytes`` of its settings) the archive's
transfers cannot hold does not carry over (a line says how many transfers would). A running
cell that cannot carry over is stopped as soon as its pace (its ``progress.json`` at each
validation: the last two minutes of its own clock, once five have been seen) says it will end
after the deadline, and its GPU takes the next cell that fits.
Cell output goes to ``<output_dir>/grid_logs/ARM__TASK__seedS.log``, except when the cells run
one at a time on this process's device (no ``--gpus``), where it is this process's output.
``--claim-dir D`` shares the queue with other grid processes on a shared file system.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from ..invocation import invoked_as
from ..records import commit_variable_problem
from .cells import DEFAULT_RUNNER, GridError, comma_list, command, load_grid, output_dir, put_first, select_columns

USAGE = """\
{prog} GRID.yaml [options] [-- overrides for every cell]
       {prog} ledger GRID.yaml [--records DIR ...] [--plan-file F] [--progress DIR ...] [--out F]
       {prog} unpack FOLDER --into DIR
       {prog} stage FOLDER --budget-mib M --checkout-mib C [--data-mib D] [--to DIR]
       {prog} assemble FOLDER [FOLDER ...] --into DIR"""

COMMANDS = """\
Run, plan and account a grid of (arm, task, seed) cells on GPU machines lent in short slots: each
cell is one run of experiments/run.py; a cell whose record is complete is skipped, an unfinished
one resumes from its checkpoint.

commands:
  GRID.yaml [options]   run the cells left (the options below); --plan: GPU-minutes per cell from
                        timing probes; --dry-run: print each cell's command, run nothing
  ledger GRID.yaml      write the grid's LEDGER.md: cells done, GPU-minutes spent and left
                        ({prog} ledger --help)
  unpack FOLDER         unpack a slot's archives (--archive-to) into an output folder
                        ({prog} unpack --help)
  stage FOLDER          which of a slot's parts go in which call to the next machine
                        ({prog} stage --help)
  assemble FOLDER       on that machine: check every part, write the set --resume-from takes
                        ({prog} assemble --help)"""

EXAMPLES = """\
Examples:
  {prog} experiments/grids/v0.2-lra.yaml --dry-run
  {prog} experiments/grids/v0.2-lra.yaml --plan --probe-steps 300 -- data_dir=data
  {prog} experiments/grids/v0.2-lra.yaml --gpus all --per-gpu 3 --deadline-minutes 24 \\
      --plan-file experiments/grids/v0.2-lra/plan.csv --archive-to slot1 -- data_dir=data
  {prog} unpack slot1 --into outputs
  {prog} ledger experiments/grids/v0.2-lra.yaml --records outputs

After '--': settings every cell's run takes (experiments/run.py's, e.g. data_dir=, output_dir=)."""


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        usage=USAGE.format(prog=prog),
        description=COMMANDS.format(prog=prog),
        epilog=EXAMPLES.format(prog=prog),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("grid", type=Path, help="the grid file (YAML)")
    run = parser.add_argument_group("running")
    run.add_argument("--gpus", default=None, help="'all' or comma-separated GPU ids; none: this process's device")
    run.add_argument("--per-gpu", type=int, default=1, help="cells at once on each GPU (a block's per_gpu wins)")
    run.add_argument(
        "--pack-slowdown",
        type=float,
        default=None,
        help="how many times longer a cell runs on a full GPU than alone (default: the packing limit)",
    )
    run.add_argument(
        "--deadline-minutes",
        type=float,
        default=None,
        help="stop, checkpointing the running cells, this long after the start",
    )
    run.add_argument("--stop-at", default=None, help="stop at this UTC time (HH:MM or ISO 8601)")
    run.add_argument("--stop-grace-seconds", type=float, default=120.0, help="time a stopped cell has to checkpoint")
    run.add_argument(
        "--carry-over",
        action="store_true",
        help="also start cells that cannot end before the deadline (a block's carry_over wins)",
    )
    run.add_argument("--plan-file", type=Path, default=None, help="GPU-minutes per cell from --plan (for the deadline)")
    run.add_argument("--archive-to", type=Path, default=None, help="write the archives and manifest here at the end")
    run.add_argument("--archive-files", type=int, default=8, help="at most this many files, the manifest counted")
    run.add_argument("--archive-mib", type=float, default=16.0, help="at most this many MiB per file")
    run.add_argument(
        "--archive-transfers",
        type=int,
        default=1,
        help="spread the parts over at most this many transfers (folders transfer-NN/, one call each to bring back)",
    )
    run.add_argument(
        "--archive-transfer-mib", type=float, default=64.0, help="at most this many MiB per transfer, all files"
    )
    run.add_argument("--resume-from", type=Path, default=None, help="unpack a slot's archives into output_dir first")
    run.add_argument("--claim-dir", type=Path, default=None, help="share the queue with other grid processes")
    run.add_argument("--runner", type=Path, default=DEFAULT_RUNNER, help="the script each cell runs")
    run.add_argument(
        "--dry-run", action="store_true", help="print the commands, run nothing (cells done in --records as comments)"
    )
    run.add_argument(
        "--first",
        default=None,
        help="comma-separated arms whose cells start first within each task and seed, in this order (the slowest, so "
        "that they have a GPU from the slot's start)",
    )
    run.add_argument(
        "--columns",
        default=None,
        help="comma-separated columns to run, in this order: TASK (every seed) or TASK:SEED, e.g. text:1,listops:2 "
        "(the tasks whose data this machine holds; a long column's cells first)",
    )
    run.add_argument("--include-optional", action="store_true", help="also the cells of blocks marked optional")
    run.add_argument(
        "--records",
        type=Path,
        action="append",
        default=None,
        help="another folder (output folder or bundle) whose complete records count: their cells are skipped, "
        "and --plan reads their costs (repeatable; added to the folders the grid file's records patterns match)",
    )
    plan = parser.add_argument_group("planning (--plan)")
    plan.add_argument("--plan", action="store_true", help="print GPU-minutes per cell, write the plan file")
    plan.add_argument("--slot-minutes", type=float, default=30.0, help="flag cells longer than this")
    plan.add_argument(
        "--probe-steps",
        type=int,
        default=300,
        help="training steps of a timing probe (an even number validates halfway and at the end, so the "
        "first validation's one-off compilation is told apart from a validation pass)",
    )
    plan.add_argument("--probe-all", action="store_true", help="probe every (arm, task), even with records")
    plan.add_argument(
        "--plan-out",
        type=Path,
        default=None,
        help="plan file (default <output_dir>/grid_plan.csv), rewritten as each probe ends",
    )
    return parser


def _ledger_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{prog} ledger",
        description="Write the grid's LEDGER.md: cells done, "
        "GPU-minutes spent, cells left, GPU-minutes estimated left.",
    )
    parser.add_argument("grid", type=Path)
    parser.add_argument(
        "--records",
        type=Path,
        action="append",
        default=None,
        help="a folder holding runs/ (an output folder or a bundle; its runs/ folder stands for it); repeatable: a "
        "cell is done when any holds it (added to the folders the grid file's records patterns match)",
    )
    parser.add_argument("--plan-file", type=Path, default=None, help="the estimates of --plan")
    parser.add_argument(
        "--grid-log",
        type=Path,
        action="append",
        default=None,
        help="a grid_log.csv to count besides each records folder's grid_log.csv or extra/grid_log.csv (repeatable: "
        "the logs of slots that completed no record)",
    )
    parser.add_argument(
        "--progress",
        type=Path,
        action="append",
        default=None,
        help="a folder holding runs in progress (a slot's output folder, or where lra-grid unpack wrote its files); "
        "repeatable: each cell not done shows its checkpoint's epoch and best validation accuracy, as progress",
    )
    parser.add_argument("--out", type=Path, default=None, help="default: <grid folder>/<grid name>/LEDGER.md")
    return parser


def _unpack_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{prog} unpack",
        description="Unpack a slot's archives (--archive-to) "
        "into an output folder, as --resume-from does, and run nothing.",
    )
    parser.add_argument("folder", type=Path, help="the folder holding grid-manifest.json and the archives")
    parser.add_argument("--into", type=Path, required=True, help="the output folder (runs/, grid_log.csv)")
    return parser


def _stage_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{prog} stage",
        description="Say which of a slot's parts go in which call to the next machine: each call carries the "
        "checkout and a copy of the manifest beside its parts, the first also the data, within --budget-mib.",
    )
    parser.add_argument("folder", type=Path, nargs="+", help="the slot's parts (a folder or its transfer-NN/ folders)")
    parser.add_argument("--budget-mib", type=float, required=True, help="what one call carries in, all told")
    parser.add_argument("--checkout-mib", type=float, required=True, help="what every call carries beside the parts")
    parser.add_argument("--data-mib", type=float, default=0.0, help="what the first call carries too (the data)")
    parser.add_argument("--to", type=Path, default=None, help="copy each call's parts into DIR/inbound-NN/")
    return parser


def _assemble_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{prog} assemble",
        description="Check every part of a slot's archives against its manifest and write the complete set into a "
        "new folder, for --resume-from; a part missing or damaged is refused by name and nothing is written.",
    )
    parser.add_argument("folder", type=Path, nargs="+", help="folders holding the parts (or their inbound-NN/)")
    parser.add_argument("--into", type=Path, required=True, help="a new folder for the complete set")
    return parser


def _parts_command(command: str, args) -> int:
    from .parts import assemble, stage

    for folder in args.folder:
        if not folder.is_dir():
            raise GridError(f"{folder}: no such folder")
    if command == "assemble":
        print(f"[grid] {assemble(args.folder, args.into)}")
        return 0
    for value, name in ((args.budget_mib, "--budget-mib"), (args.checkout_mib, "--checkout-mib")):
        if value < 0 or (name == "--budget-mib" and value == 0):
            raise GridError(f"{name} {value:g}: give a positive number of MiB")
    if args.data_mib < 0:
        raise GridError(f"--data-mib {args.data_mib:g}: give 0 or more MiB")
    for line in stage(args.folder, args.budget_mib, args.checkout_mib, args.data_mib, args.to):
        print(f"[grid] {line}")
    return 0


def _unpack_command(args) -> int:
    from .unpack import unpack

    if not args.folder.is_dir():
        raise GridError(f"{args.folder}: no such folder")
    for line in unpack(args.folder, args.into):
        print(f"[grid] {line}")
    return 0


def _check(args) -> None:
    if args.per_gpu < 1:
        raise GridError(f"--per-gpu {args.per_gpu}: give 1 or more")
    if args.pack_slowdown is not None and args.pack_slowdown <= 0:
        raise GridError(f"--pack-slowdown {args.pack_slowdown}: give a positive factor")
    if args.archive_mib <= 0 or args.archive_files < 2:
        raise GridError("--archive-mib must be positive and --archive-files at least 2 (an archive and the manifest)")
    if args.archive_transfers < 1 or args.archive_transfer_mib <= 0.25:
        raise GridError("--archive-transfers must be 1 or more and --archive-transfer-mib more than 0.25")
    if args.probe_steps < 1:
        raise GridError(f"--probe-steps {args.probe_steps}: give 1 or more")
    if not args.dry_run and not args.runner.exists():
        raise GridError(f"--runner {args.runner}: no such script; run from a checkout or pass --runner")
    if args.resume_from is not None and not args.resume_from.is_dir():
        raise GridError(f"--resume-from {args.resume_from}: no such folder")
    problem = None if args.dry_run else commit_variable_problem()
    if problem:  # every cell's record would carry it: refuse before any cell
        raise GridError(problem)


def records_folders(given: list[Path] | None) -> list[Path] | None:
    """The ``--records`` folders, each the folder holding ``runs/``: a ``runs/`` folder itself stands for the folder
    above it; a folder that is not there, or holds no ``runs/``, is refused by name."""
    found = []
    for folder in given or []:
        if folder.name == "runs" and folder.is_dir() and not (folder / "runs").is_dir():
            folder = folder.parent
        if not folder.is_dir():
            raise GridError(f"--records {folder}: no such folder (an output folder or bundle holding runs/)")
        if not (folder / "runs").is_dir():
            raise GridError(
                f"--records {folder}: holds no runs/ folder; give the output folder or bundle that holds runs/ "
                "(e.g. outputs, results/v0.2-lra)"
            )
        found.append(folder)
    return found if given is not None else None


def _main(argv: list[str], started: float) -> int:
    prog = invoked_as("lra-grid")
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    if argv[:1] == ["ledger"]:
        from .ledger import ledger_command

        args = _ledger_parser(prog).parse_args(argv[1:])
        args.records = records_folders(args.records)
        return ledger_command(args, extra)
    if argv[:1] == ["unpack"]:
        return _unpack_command(_unpack_parser(prog).parse_args(argv[1:]))
    if argv[:1] in (["stage"], ["assemble"]):
        parser = _stage_parser if argv[0] == "stage" else _assemble_parser
        return _parts_command(argv[0], parser(prog).parse_args(argv[1:]))
    args = _parser(prog).parse_args(argv)
    args.records = records_folders(args.records)
    _check(args)
    grid = load_grid(args.grid, args.include_optional)
    args.records = grid.records_folders(args.records)
    if args.columns is not None:
        grid = select_columns(grid, comma_list(args.columns))
    if args.first:
        grid = put_first(grid, comma_list(args.first))
    if args.dry_run:
        return _dry_run(args, grid, extra)
    from .driver import plan_grid, run_grid

    output_dir([*grid.common, *extra]).mkdir(parents=True, exist_ok=True)
    return (plan_grid if args.plan else run_grid)(args, grid, extra, args.runner, started)


def _dry_run(args, grid, extra: list[str]) -> int:
    """Print each cell's command; a cell with a complete record of its settings in a ``--records`` folder
    (which a run would skip) is printed as a comment naming that folder."""
    from .runs import locate

    found = locate(grid.cells, grid.common, extra, args.records or [], str(grid.path))
    folders = [folder for _, folder in found] if found else [None] * len(grid.cells)
    for cell, folder in zip(grid.cells, folders, strict=True):
        line = shlex.join(["python", *command(args.runner, cell, grid.common, extra)[1:]])
        print(line if folder is None else f"# done in {folder}: {line}")
    return 0


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    try:
        return _main(list(sys.argv[1:] if argv is None else argv), started)
    except GridError as err:
        print(err, file=sys.stderr)
        return 2


def entry() -> None:
    """The ``lra-grid`` console script."""
    sys.exit(main())

"""The help pages of ``lra-run`` and ``lra-bench`` (and of experiments/run.py and experiments/bench.py), printed
before torch or Hydra is imported, so that ``--help`` answers at once. Standard library only.

Hydra's own help page (the configuration dump) stays reachable as ``--hydra-help`` and ``--cfg job``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

HELP_FLAGS = ("-h", "--help")

RUN = """\
usage: {prog} [-m] [--cfg run] [KEY=VALUE ...]

Train an arm (a model with its training settings) on an LRA task and write its record to
outputs/runs/<arm>/<task>/<profile>/seed<k>/ (config.yaml, history.csv, predictions.csv,
metrics.json). With task= left out, the arm runs every task it defines, one record each.

Profiles (profile=NAME):
  smoke    CPU, seconds: tiny widths and data, for a first look and the tests; numbers mean nothing
  budget   one GPU, capped by wall-clock minutes (budget.minutes, default 5) or by a share of the
           protocol's training examples (budget.fraction, budget.examples); the full data and model
  paper    the papers' protocol: each task's epochs, batch, learning rate and weight decay

Common settings:
  arm=NAME task=NAME    what to train, on what (the lists below)
  seed=K                model seed: initialisation, data order, dropout, augmentation (default 0)
  device=cpu|cuda|auto  where to train (default: the profile's; smoke: cpu)
  data_dir=DIR          the official LRA files (text, retrieval, image); ListOps and Pathfinder are generated
  output_dir=DIR        where records and checkpoints go (default outputs)
  force=true            rerun a run whose record is complete (an unfinished run resumes by itself)
  budget.minutes=M      profile=budget: the wall-clock cap in minutes (null: none)
  budget.fraction=F     profile=budget: train this share of the protocol's examples instead
  techniques=NAME       the follow-up study's training techniques: followup or none (default: the arm's)

{groups}

The + rule: settings under train. and model. start empty in the configuration and take the
arm's, the task's and the profile's values when the run resolves, so they are typed with a
leading +, as last-word overrides: +train.lr=0.0005, +model.depth=4, +train.stop_at_step=N.
++ sets a key whether or not an earlier override set it. Without the +, the run names the fix.

Commands:
  {prog} KEY=VALUE ...
      train (the default)
  {prog} --cfg run KEY=VALUE ...
      print the run's resolved settings, as its config.yaml will hold them, and its parameter
      count; trains nothing, writes nothing
  {prog} -m KEY=A,B ...
      a sweep: each combination of the comma-separated values in turn, one record each

Examples:
  {prog} arm=locality_k61 task=listops profile=smoke
  {prog} arm=locality_k61 task=listops profile=budget budget.minutes=10 seed=1
  {prog} arm=lra_bigbird task=text profile=paper data_dir=data +train.lr=0.0005
  {prog} arm=s4 task=listops techniques=followup profile=smoke
  {prog} arm=lra_transformer task=listops profile=paper --cfg run
  {prog} -m arm=locality_k5,locality_k61 task=listops seed=0,1 profile=smoke

Every setting is checked before any work; a mistake is one line naming the key and the fix,
exit status 2. Exit 3: the task's data is missing. Full reference: docs/running.md.
Hydra's own options: {prog} --hydra-help; the composed configuration before it resolves:
{prog} --cfg job.
"""

BENCH = """\
usage: {prog} [KEY=VALUE ...]

Speed and memory of every arm in the LRA text configuration on this machine's GPU (Tay et al.
2021, Table 2 and Figure 3): for each model and length, training and inference steps per
second, peak GPU memory, FLOPs per step and the share of the matmul peak. An out-of-memory is a
row marked OOM, never a crash. Writes <out_dir>/<date>_<device>_<mode>/ with bench.json,
bench.csv, table.md and figure.png; exits 1 (after writing) when a row failed otherwise.

Common settings (experiments/conf/bench.yaml holds them all, each with its source):
  models=[A,B]         arms or variants to measure (default: every arm with a text block, and the variants)
  lengths=[1024,4096]  bytes per text (default 1K-4K, as LRA Table 2)
  mode=MODE            train, infer or both: what to time (default both); followup: the follow-up
                       arms' training steps at their protocols, with reference rows (docs/benchmark.md)
  batch=N depth=N      batch size (default 32, LRA Table 2); every model's number of layers (default: its own)
  attention_dropout=P  every arm's attention dropout set to P (default lra: each arm's own)
  device=NAME          auto, cuda, cuda:N or cpu: where to measure (default auto)
  out_dir=DIR          where the benchmark record goes (default results/bench)

Examples:
  {prog} models=[lra_transformer,locality_k61] lengths=[1024,4096] mode=train
  {prog} depth=1 batch=8 mode=train lengths=[1024,2048,4096]
  {prog} attention_dropout=0 mode=train lengths=[4096]

Hydra's own options: {prog} --hydra-help; every setting: {prog} --cfg job.
"""


def wants_help(argv: list[str]) -> bool:
    """Whether the command line asks for the help page (``-h`` or ``--help`` anywhere before ``--``)."""
    head = argv[: argv.index("--")] if "--" in argv else argv
    return any(arg in HELP_FLAGS for arg in head)


def group_lines(conf: Path) -> str:
    """The arms and tasks ``conf`` (the checkout's experiments/conf) holds, a wrapped line each."""
    lines = []
    for group, title in (("arm", "Arms"), ("task", "Tasks")):
        names = ", ".join(sorted(p.stem for p in (conf / group).glob("*.yaml")))
        where = f"{title} (experiments/conf/{group}/): "
        lines += textwrap.wrap(where + names, width=96, subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(lines)


def page(text: str, prog: str, conf: Path | None = None) -> str:
    """``text`` for the command ``prog``; the run's page lists the arms and tasks of ``conf``."""
    return text.format(prog=prog, groups=group_lines(conf) if conf is not None else "")

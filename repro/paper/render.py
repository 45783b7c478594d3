"""Tables as Markdown and LaTeX, deterministic: fixed number formats, no dates, "—" for cells not run.

Used by ``repro.paper``. A :class:`Table` counts its missing cells (those of our runs
shown as "—") so the reader sees how much of it was not run, never a silently
shorter table. Reference rows (``reference_rows``: the trivial baselines) are printed
under the rows and not counted.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MISSING = "—"
SEED_COUNT = re.compile(r"\(n=(\d+)\)")  # how a cell of ours shows its seeds: "37.25 ± 0.56 (n=3)"


def fmt_number(value, digits: int = 2) -> str:
    """A finite number with fixed decimals, else the missing mark."""
    if value is None or isinstance(value, str):
        return value if isinstance(value, str) and value else MISSING
    value = float(value)
    return MISSING if not math.isfinite(value) else f"{value:.{digits}f}"


def fmt_p(value) -> str:
    """A p-value: three decimals, ``<0.001`` below that, "—" when the test did not run."""
    if value is None or not math.isfinite(float(value)):
        return MISSING
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def fmt_seeds(values) -> str:
    """Seeds' mean +/- sample sd with their count, e.g. ``52.73 ± 0.41 (n=3)``; n=1 has no sd."""
    values = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if values.size == 0:
        return MISSING
    if values.size == 1:
        return f"{values[0]:.2f} (n=1)"
    return f"{values.mean():.2f} ± {values.std(ddof=1):.2f} (n={values.size})"


def fmt_ci(low, high, digits: int = 2) -> str:
    if low is None or not (math.isfinite(low) and math.isfinite(high)):
        return MISSING
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


@dataclass
class Table:
    """One paper table: header, rows of strings, the columns that hold our numbers, notes."""

    name: str
    title: str
    columns: list[str]
    rows: list[list[str]]
    ours_columns: list[int]  # indices of columns whose cells come from our records
    notes: list[str] = field(default_factory=list)
    reference_rows: list[list[str]] = field(default_factory=list)  # printed after the rows, never counted

    def our_cells(self) -> list[str]:
        """The cells whose numbers come from our records, row by row."""
        return [row[i] for row in self.rows for i in self.ours_columns]

    def missing(self) -> tuple[int, int]:
        """(cells of ours shown as not run, cells of ours in total)."""
        cells = self.our_cells()
        return sum(c == MISSING for c in cells), len(cells)

    def seed_counts(self) -> list[int]:
        """The seed count ``n`` of every cell of ours that shows one (``(n=3)``), in order."""
        return [int(found) for cell in self.our_cells() for found in SEED_COUNT.findall(cell)]

    def footer(self) -> str:
        missing, total = self.missing()
        line = f"Missing cells (not run, marked {MISSING}): {missing} of {total}."
        counts = self.seed_counts()
        most = max(counts, default=0)
        fewer = sum(n < most for n in counts)
        if fewer:
            line += f" Cells with fewer seeds than the table's most (n={most}): {fewer}."
        return line

    def markdown(self) -> str:
        lines = [
            f"### {self.title}",
            "",
            "| " + " | ".join(self.columns) + " |",
            "| " + " | ".join("---" for _ in self.columns) + " |",
        ]
        lines += [
            "| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
            for row in self.rows + self.reference_rows
        ]
        lines += ["", self.footer()]
        for note in self.notes:  # a paragraph each
            lines += ["", note]
        return "\n".join(lines) + "\n"

    def latex(self) -> str:
        spec = "l" * min(2, len(self.columns)) + "r" * max(0, len(self.columns) - 2)
        lines = [
            "\\begin{table}[ht]",
            "\\centering",
            "\\scriptsize",
            f"\\caption{{{latex_escape(self.title)}}}",
            f"\\label{{tab:{self.name}}}",
            f"\\begin{{tabular}}{{{spec}}}",
            "\\toprule",
            " & ".join(latex_escape(c) for c in self.columns) + " \\\\",
            "\\midrule",
        ]
        lines += [" & ".join(latex_escape(cell) for cell in row) + " \\\\" for row in self.rows]
        if self.reference_rows:
            lines += ["\\midrule"]
            lines += [" & ".join(latex_escape(cell) for cell in row) + " \\\\" for row in self.reference_rows]
        lines += ["\\bottomrule", "\\end{tabular}", "", f"{latex_escape(self.footer())}"]
        lines += [f"{latex_escape(note)}" for note in self.notes]
        lines += ["\\end{table}"]
        return "\n".join(lines) + "\n"

    def write(self, folder: Path) -> list[Path]:
        folder.mkdir(parents=True, exist_ok=True)
        md, tex = folder / f"{self.name}.md", folder / f"{self.name}.tex"
        md.write_text(self.markdown(), encoding="utf-8")
        tex.write_text(self.latex(), encoding="utf-8")
        return [md, tex]


_LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "—": "---",
    "≈": r"$\approx$",
    "Δ": r"$\Delta$",
    "−": r"$-$",
    "<": r"$<$",
    ">": r"$>$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "×": r"$\times$",
    "`": "",
    "†": r"$^\dagger$",
    "‡": r"$^\ddagger$",
    "→": r"$\to$",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX.get(ch, ch) for ch in str(text))

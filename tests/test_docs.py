"""The repository's Markdown stays readable: no paragraph over 150 words, a README of at most 150 lines
whose results come near the top, and relative links that lead somewhere."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MOST_WORDS = 150
README_LINES = 150
RESULTS_BY_LINE = 60

FENCE = re.compile(r"^\s*(```|~~~)")
LIST_ITEM = re.compile(r"^ {0,3}([-*+]|\d+[.)])\s")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each Markdown paragraph: a block of lines between blank lines, a
    heading or a list item starting a block of its own; fenced code blocks and table rows are no paragraph."""
    found: list[tuple[int, str]] = []
    block: list[str] = []
    start = 0
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence:
            fence = None if stripped.startswith(fence) else fence
            continue
        opened = FENCE.match(line)
        starts_own = not stripped or stripped.startswith(("|", "#")) or opened or LIST_ITEM.match(line)
        if starts_own and block:
            found.append((start, " ".join(block)))
            block = []
        if opened:
            fence = opened.group(1)
        elif stripped and not stripped.startswith(("|", "#")):
            if not block:
                start = number
            block.append(stripped)
    if block:
        found.append((start, " ".join(block)))
    return found


def markdown_files() -> list[str]:
    """Every Markdown file git tracks or would track (new files included), outside results/."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    return sorted({name for name in listed if name and not name.startswith("results/") and (ROOT / name).exists()})


def test_the_paragraph_splitter_skips_code_and_tables_and_splits_list_items():
    long_line = " ".join(["word"] * 200)
    text = "\n".join(
        [
            "# A heading",
            "one two",
            "three",
            "",
            "```bash",
            long_line,
            "",
            "```",
            "| a | b |",
            f"| {long_line} | x |",
            "- first item",
            "  continued",
            "- second item",
            "",
            "1. numbered",
            "~~~",
            long_line,
            "~~~",
            "last",
        ]
    )
    assert paragraphs(text) == [
        (2, "one two three"),
        (11, "- first item continued"),
        (13, "- second item"),
        (15, "1. numbered"),
        (19, "last"),
    ]


def test_no_markdown_paragraph_outside_results_is_over_150_words():
    files = markdown_files()
    assert "README.md" in files and "paper/findings.md" in files
    too_long = []
    for name in files:
        for line, paragraph in paragraphs((ROOT / name).read_text(encoding="utf-8")):
            words = len(paragraph.split())
            if words <= MOST_WORDS:
                continue
            too_long.append(f"{name}:{line}: a paragraph of {words} words (at most {MOST_WORDS}; split it)")
    assert too_long == []


def test_the_readme_is_one_screen_and_a_half_with_its_results_near_the_top():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines (at most {README_LINES})"
    results = [number for number, line in enumerate(lines, 1) if re.fullmatch(r"#+ Results", line)]
    assert results and results[0] < RESULTS_BY_LINE, f"README.md: a Results heading above line {RESULTS_BY_LINE}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    fence = None
    for line in path.read_text(encoding="utf-8").splitlines():
        opened = FENCE.match(line)
        if fence or opened:
            fence = None if fence and line.strip().startswith(fence) else (fence or opened.group(1))
            continue
        if heading := re.match(r"#+\s+(.*)", line):
            base = slug(heading.group(1).replace("`", ""))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def test_the_slug_of_a_heading_is_github_s():
    assert slug("Pathfinder drawn as the LRA release drew it (render release)") == (
        "pathfinder-drawn-as-the-lra-release-drew-it-render-release"
    )
    assert slug("The follow-up study's claims at a 3-minute budget (bundle v0.1.1-budget): not tested") == (
        "the-follow-up-studys-claims-at-a-3-minute-budget-bundle-v011-budget-not-tested"
    )


@pytest.mark.parametrize("name", markdown_files())
def test_relative_links_lead_to_a_file_and_heading(name):
    broken = []
    for target in LINK.findall((ROOT / name).read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (ROOT / name).parent / file if file else ROOT / name
        if not path.exists():
            broken.append(f"{name}: {target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{name}: {target}: no heading with that anchor")
    assert broken == []

"""Print the first two ```bash blocks of a Markdown file, one line each: README.md's main job and tests.

CI runs exactly these, so the README's commands are the ones that are tested on a fresh machine."""

import sys
from pathlib import Path

path = Path(sys.argv[1])
blocks, current = [], None
for line in path.read_text().splitlines():
    if current is None and line.strip() == "```bash":
        current = []
    elif current is not None and line.strip() == "```":
        blocks.append(" ".join(part.strip() for part in current if part.strip()))
        current = None
    elif current is not None:
        current.append(line.rstrip("\\"))
if len(blocks) < 2:
    sys.exit(f"{path}: needs two ```bash blocks (the main job, then the tests); found {len(blocks)}")
print(blocks[0])
print(blocks[1])

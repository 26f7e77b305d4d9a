"""Print the first ```bash block after the README line that starts with the given words."""

import sys
from pathlib import Path

lines = (Path(__file__).resolve().parent.parent / "README.md").read_text().splitlines()
start = next(i for i, line in enumerate(lines) if line.startswith(sys.argv[1]))
first = next(i for i in range(start, len(lines)) if lines[i] == "```bash") + 1
print("\n".join(lines[first : lines.index("```", first)]))

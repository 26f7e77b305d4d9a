"""Print convexp's requirements (its dependencies and its `test` extra's) for CI's newest-releases
step: the packages whose releases most often break convexp lose their version bounds, so pip takes
their newest releases even past the bounds pyproject.toml declares; the others keep theirs."""

import re
import sys
import tomllib
from pathlib import Path

NEWEST = {"pytorch-lightning", "torchmetrics", "hydra-core", "datasets", "tokenizers", "wandb"}


def requirements(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    extras = project["optional-dependencies"]
    reqs = [*project["dependencies"]]
    for req in extras["test"]:
        if req.startswith(project["name"] + "["):  # the project's own extras
            names = req[len(project["name"]) + 1 : -1].split(",")
            reqs += [r for name in names for r in extras[name.strip()]]
        else:
            reqs.append(req)
    out = []
    for req in reqs:
        name = re.match(r"[A-Za-z0-9_.\-]+", req).group(0)
        out.append(name if name.lower() in NEWEST else req)
    return out


if __name__ == "__main__":
    print("\n".join(requirements(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("pyproject.toml"))))

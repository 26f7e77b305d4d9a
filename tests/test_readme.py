"""README.md tells the truth about how CI tests the project."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    tests = readme[readme.index("## Tests") :]
    command = tests[tests.index("```bash\n") + 8 :].split("\n", 1)[0]
    assert command.startswith("pytest") and command in ci

"""README.md tells the truth about how CI tests the project."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    command = ci[-1]
    assert command.startswith("pytest")
    assert f"```bash\n{command}\n```" in readme

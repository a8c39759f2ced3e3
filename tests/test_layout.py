"""The house rules that a reader relies on: imports point down the pipeline, no circles, small modules."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["benchmarks", "experiments", "tuners", "trial", "searchspace", "tests"]
MAX_LINES = 300


def test_imports_keep_the_contracts_in_pyproject():
    """benchmarks -> experiments -> tuners -> trial -> searchspace, and no circle inside a package.

    In a child process: import-linter reconfigures logging in the process it runs in.
    """
    lint = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                           f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}))"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_no_module_is_over_300_lines():
    long = {str(p.relative_to(ROOT)): n for package in PACKAGES for p in (ROOT / package).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long

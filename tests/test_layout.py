"""The house rules that a reader relies on: imports point down the pipeline, no circles, small modules."""
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["benchmarks", "experiments", "tuners", "trial", "searchspace", "tests"]
MAX_LINES = 300


def test_imports_keep_the_contracts_in_pyproject():
    """benchmarks -> experiments -> tuners -> trial -> searchspace, and no circle inside a package."""
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml")) == 0


def test_no_module_is_over_300_lines():
    long = {str(p.relative_to(ROOT)): n for package in PACKAGES for p in (ROOT / package).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long

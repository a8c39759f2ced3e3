"""The README is a front door and docs/ holds the manual: this checks the door's size and first commands,
that every link between the pages lands on a file and heading that exist, that the make targets the
pages name are the Makefile's, and that the tuners' classArgs the docs list are the ones they take."""
import inspect
import re
from importlib import import_module
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MOST_README_LINES = 150

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
COMMENT = re.compile(r"<!--.*?-->", re.S)
SPAN = re.compile(r"`[^`\n]+`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
MAKE = re.compile(r"(?<![\w-])make\s+(?:-C\s+\S+\s+)?([a-z][\w-]*)")


def prose(text: str) -> str:
    """The text a reader sees as prose: no code blocks, code spans or HTML comments."""
    return SPAN.sub("", FENCE.sub("", COMMENT.sub("", text)))


def code(text: str) -> list[str]:
    """The code blocks and code spans of a page (not those inside HTML comments)."""
    text = COMMENT.sub("", text)
    blocks = FENCE.findall(text)
    return blocks + SPAN.findall(FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, seen = set(), {}
    for line in FENCE.sub("", page.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(prose(page.read_text())) if not re.match(r"[a-z]+:", t)]


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= MOST_README_LINES, f"README.md has {len(lines)} lines; the manual belongs in docs/"


def test_readme_starts_with_the_two_commands():
    text = README.read_text()
    first = FENCE.search(text)
    assert first, "README.md has no code block"
    before = [line for line in text[:first.start()].splitlines() if line.strip()]
    assert len(before) == 1 and before[0].startswith("# "), f"README.md: the title, then the commands; got {before}"
    commands = [line.split("#")[0].strip() for line in first.group(0).splitlines()[1:-1]]
    assert commands == ["make tune", "make test"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_land(page):
    links = relative_links(page)
    assert page != README or links, "README.md links no page"
    for target in links:
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.is_file(), f"{page.name}: link to {target}: no such file"
        if anchor:
            assert anchor in anchors(dest), f"{page.name}: link to {target}: {dest.name} has no such heading"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in relative_links(README)}
    unlinked = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_make_targets_exist(page):
    named = {t for snippet in code(page.read_text()) for t in MAKE.findall(snippet)}
    missing = named - makefile_targets()
    assert not missing, f"{page.name} names make targets the Makefile lacks: {sorted(missing)}"


def _tuners_section() -> str:
    text = (ROOT / "docs" / "tuning.md").read_text()
    m = re.search(r"^## Tuners\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, "docs/tuning.md has no Tuners section"
    return m.group(1)


def test_tuners_table_lists_each_tuners_classargs():
    rows = re.findall(r"^\|[^|]*\| `(tuners\.[\w.]+)` \| (.*) \|$", _tuners_section(), re.M)
    assert len(rows) >= 3, "the Tuners table lists no tuner classes"
    for dotted, args in rows:
        module, _, name = dotted.rpartition(".")
        params = inspect.signature(getattr(import_module(module), name).__init__).parameters.values()
        takes = {p.name for p in params if p.name != "self" and p.kind is not p.VAR_KEYWORD}
        assert set(re.findall(r"`(\w+)`", args)) == takes, dotted


def test_common_classargs_are_documented():
    from tuners.classargs import CommonArgs

    section = _tuners_section()
    for name in inspect.signature(CommonArgs.parse).parameters:
        assert f"`{name}`" in section, f"docs/tuning.md, Tuners: the common classArg {name} is not described"

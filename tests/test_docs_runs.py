"""Every benchmark run the docs cite in the tree is there: `bench/runs/` keeps only the runs that the docs' current
figures rest on (bench/README.md), and a run removed from it is cited by a commit that held it, `git show
COMMIT:bench/runs/...`, which this test leaves out."""

import re

from conftest import TESTS

REPO = TESTS.parent
PAGES = [REPO / "README.md", REPO / "bench" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# a path in the tree, not after "COMMIT:"; `{a,b}` and `*` are the shell's, a trailing dot or comma the sentence's
RUN_PATH = re.compile(r"(?<![:\w/])bench/runs/[\w.{},*/-]*")


def cited_runs(text: str) -> list[str]:
    """The bench/runs paths a page names, `{a,b}` spelled out."""
    paths = []
    for path in RUN_PATH.findall(text):
        path = path.rstrip(".,")
        paths.extend(expand_braces(path))
    return paths


def expand_braces(path: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    return [p for choice in match.group(1).split(",")
            for p in expand_braces(path[:match.start()] + choice + path[match.end():])]


def exists(path: str) -> bool:
    return any(REPO.glob(path)) if "*" in path else (REPO / path).exists()


def test_cited_runs_exist():
    missing = [f"{page.relative_to(REPO)}: {path}" for page in PAGES for path in cited_runs(page.read_text())
               if not exists(path)]
    assert not missing, "cited runs not in bench/runs/ (cite a removed one as `git show COMMIT:bench/runs/...`):\n" + \
        "\n".join(missing)


def test_a_removed_run_is_told_apart():
    text = ("kept `bench/runs/a-run/x.log`, removed `git show dbf1d95:bench/runs/old/y.log`, "
            "both `bench/runs/b.{json,log}`.")
    assert cited_runs(text) == ["bench/runs/a-run/x.log", "bench/runs/b.json", "bench/runs/b.log"]

"""The user-facing docs (README.md, CONTRIBUTING.md, docs/*.md) describe the repository as it is.

They must not cite issue numbers (`#30`, "issue 30": a reader outside the tracker cannot follow
them, and the reason belongs in the text), and every relative link, image or path they name
must resolve to a file inside the repository: a link that leaves the repository (`../shared/…`)
breaks in every clone, and a link to a moved file breaks silently. Links to a heading of a page
(`page.md#heading`) must name a heading that page has.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO_ROOT / "README.md", REPO_ROOT / "CONTRIBUTING.md",
               *(REPO_ROOT / "docs").glob("*.md")])

# `#30`, `#7` (not a Markdown anchor `#some-heading`, not an HTML entity `&#39;`, not a
# colour `#fff`) and "issue 30" / "issues #30 and #31".
ISSUE_REF = re.compile(r"(?<![\w&/#])#\d+\b|\bissues?\s+#?\d+", re.IGNORECASE)
# [text](target) and ![alt](target); the target up to whitespace or the closing parenthesis.
INLINE_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
# A code span that is exactly a path into one of the repository's top-level folders.
TOP_LEVEL = ("agentrl_jax", "benchmarks", "configs", "docs", "environments", "examples", "launch",
             "notebooks", "scripts", "tests")
_TOP = "|".join(TOP_LEVEL)
CODE_PATH = re.compile(rf"`((?:{_TOP})/[\w./-]*\.(?:py|md|json|sh|txt|ipynb|png|toml))`")
# Paths the docs name that are not in the tree on purpose: what a walk-through has the reader
# write, and what a run writes.
WRITTEN_BY_THE_READER = (
    "environments/arithmetic/",  # docs/adding_a_task.md's worked example
    "tests/environments/arithmetic/",
    "benchmarks/results/oracle_arithmetic.json",
    "benchmarks/results/gpu_suite.json",  # written by the GPU suite on an accelerator
)
PLACEHOLDER = re.compile(r"(?:^|[/_.])(?!README\b)[A-Z]{3,}(?=[/_.]|$)")  # NAME, TASK, OUTDIR
# `python -m benchmarks.probes.copy_prior`, `-m launch.local`
MODULE = re.compile(rf"-m\s+((?:{_TOP})(?:\.\w+)+)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:


def _doc_id(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


def _strip_fenced_code(text: str) -> str:
    """The text with fenced code blocks blanked (line numbers kept): links are prose."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return "\n".join(out)


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated heading suffixed -1, -2, …"""
    anchors: set[str] = set()
    counts: dict[str, int] = {}
    for line in _strip_fenced_code(markdown).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))  # links: their text
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_no_issue_references(doc: Path) -> None:
    text = doc.read_text()
    found = [f"{_doc_id(doc)}:{_line_of(text, m.start())}: {m.group(0)!r}"
             for m in ISSUE_REF.finditer(text)]
    assert not found, "issue references (say what and why instead):\n" + "\n".join(found)


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_relative_links_stay_in_the_repository_and_resolve(doc: Path) -> None:
    text = _strip_fenced_code(doc.read_text())
    targets = [(m.start(), m.group(1)) for m in INLINE_LINK.finditer(text)]
    targets += [(m.start(), m.group(1)) for m in REFERENCE_LINK.finditer(text)]
    problems = []
    for offset, target in targets:
        where = f"{_doc_id(doc)}:{_line_of(text, offset)}: {target}"
        if EXTERNAL.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (doc.parent / path_part).resolve() if path_part else doc
        if not resolved.is_relative_to(REPO_ROOT):
            problems.append(f"{where} leaves the repository")
        elif not resolved.exists():
            problems.append(f"{where} does not exist")
        elif anchor and resolved.suffix == ".md" and anchor not in github_anchors(
                resolved.read_text()):
            problems.append(f"{where}: {_doc_id(resolved)} has no heading #{anchor}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_named_repository_paths_and_modules_exist(doc: Path) -> None:
    """A path in a code span (`benchmarks/probes/copy_prior.py`) or a module run with
    `python -m` names a file that is there."""
    text = doc.read_text()
    problems = []
    for m in CODE_PATH.finditer(text):
        path = m.group(1)
        if PLACEHOLDER.search(path) or path.startswith(WRITTEN_BY_THE_READER):
            continue
        if not (REPO_ROOT / path).exists():
            problems.append(f"{_doc_id(doc)}:{_line_of(text, m.start())}: {m.group(1)}")
    for m in MODULE.finditer(text):
        if PLACEHOLDER.search(m.group(1)):
            continue
        parts = m.group(1).split(".")
        as_file = REPO_ROOT.joinpath(*parts).with_suffix(".py")
        as_package = REPO_ROOT.joinpath(*parts, "__main__.py")
        if not (as_file.exists() or as_package.exists()):
            problems.append(f"{_doc_id(doc)}:{_line_of(text, m.start())}: -m {m.group(1)}")
    assert not problems, "missing files:\n" + "\n".join(problems)


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    assert ISSUE_REF.search("fixed in #30.") and ISSUE_REF.search("see issue 12")
    assert not ISSUE_REF.search("[x](#section-2) &#39; `#tour_name` v5p:2x2x1")
    links = [m.group(1) for m in INLINE_LINK.finditer("a [b](../shared/x.md) ![c](d.png \"t\")")]
    assert links == ["../shared/x.md", "d.png"]
    assert PLACEHOLDER.search("benchmarks/results/oracle_NAME.json")
    assert not PLACEHOLDER.search("docs/README.md")
    assert github_anchors("# The `bf16` step: 1.45x\n## A\n## A\n") == {
        "the-bf16-step-145x", "a", "a-1"}

"""The README, BENCHMARKS.md and the pages under docs/ link to files that exist, and to headings that exist
where a link names one (fast tier). CI also builds the pages as a site with `mkdocs build
--strict`, which fails on the same broken links; this test finds them in a second, without
mkdocs. A docs page links only inside docs/ (a link out of it breaks the site: name a code path
as inline code, `experiments/config.py`), and the README never points outside the repository."""

import glob
import os
import re
import unicodedata

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(REPO, "docs")
PAGES = ([os.path.join(REPO, "README.md"), os.path.join(REPO, "BENCHMARKS.md")]
         + sorted(glob.glob(os.path.join(DOCS, "*.md"))))

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)   # http:, https:, mailto:, ...


def _prose(text: str) -> str:
    """The text a reader sees as prose: code blocks and inline code taken out."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _slugs(heading: str) -> set[str]:
    """The anchors a heading gets: mkdocs' (Python-Markdown's toc) and GitHub's."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    mkdocs = re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", ascii_text).strip().lower())
    github = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
    return {mkdocs, github}


def anchors(path: str) -> set[str]:
    with open(path, encoding="utf-8") as f:
        text = FENCE.sub("", f.read())
    return set().union(*(_slugs(h) for h in HEADING.findall(text)))


def broken_links(path: str, root: str = REPO, docs: str = DOCS) -> list[str]:
    """Every link of the markdown file `path` that points nowhere, with why."""
    with open(path, encoding="utf-8") as f:
        text = _prose(f.read())
    in_docs = os.path.dirname(os.path.abspath(path)) == os.path.abspath(docs)
    problems = []
    for target in LINK.findall(text):
        if EXTERNAL.match(target):
            if os.path.basename(path) == "README.md" and not in_docs:
                problems.append(f"{target}: the README points outside the repository")
            continue
        file, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not os.path.exists(resolved):
            problems.append(f"{target}: no such file")
            continue
        outside = os.path.relpath(resolved, docs if in_docs else root).startswith("..")
        if outside:
            problems.append(f"{target}: outside {'docs/ (name a code path as `inline code`)' if in_docs else 'the repository'}")
            continue
        if anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
            problems.append(f"{target}: no heading #{anchor} in {os.path.relpath(resolved, root)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[os.path.relpath(p, REPO) for p in PAGES])
def test_every_link_points_at_a_file_and_heading_that_exist(page):
    assert broken_links(page) == []


def test_a_broken_link_is_found(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A page\n\n## Its part\n")
    page = docs / "b.md"
    page.write_text("# B\n\n[fine](a.md) [fine too](a.md#its-part) [site](https://example.org)\n"
                    "[gone](missing.md) [no heading](a.md#nowhere) [out of docs](../code.py)\n"
                    "```\n[in a code block](ignored.md)\n```\n`[inline code](ignored.md)`\n")
    (tmp_path / "code.py").write_text("")
    readme = tmp_path / "README.md"
    readme.write_text("[a page](docs/a.md#its-part) [code](code.py) [away](https://example.org)\n")
    found = broken_links(str(page), root=str(tmp_path), docs=str(docs))
    assert [p.split(":")[0] for p in found] == ["missing.md", "a.md#nowhere", "../code.py"], found
    assert broken_links(str(readme), root=str(tmp_path), docs=str(docs)) == [
        "https://example.org: the README points outside the repository"]


def test_the_site_lists_every_page():
    """mkdocs.yml's nav names every page under docs/ (a page left out of it is a warning, and
    strict mode fails on it)."""
    with open(os.path.join(REPO, "mkdocs.yml"), encoding="utf-8") as f:
        listed = set(re.findall(r":\s*(\S+\.md)\s*$", f.read(), re.M))
    pages = {os.path.basename(p) for p in glob.glob(os.path.join(DOCS, "*.md"))}
    assert pages - listed == set(), "pages missing from mkdocs.yml's nav"
    assert listed - pages == set(), "mkdocs.yml names pages that do not exist"

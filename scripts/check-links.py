#!/usr/bin/env python3
"""Checks the links of the README and the book in docs/ (run by `make test`).

Every relative link must name a file or directory of the repository, and every `#anchor` must be a
heading of the page it points to (GitHub's and mdBook's heading ids: lower case, punctuation dropped,
spaces to hyphens) or an `<a id="…"></a>` anchor there. Every page under docs/src must be listed in SUMMARY.md, and every SUMMARY entry
must exist. External links (http, https, mailto) are not fetched. Exit status 1 lists every broken
link.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r'<a id="([^"]+)"></a>')


def strip_code(text):
    """The text without fenced code blocks and inline code spans (links there are not links)."""
    out, fence = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
            out.append("")
            continue
        out.append("" if fence else re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def slug(title):
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link in a heading keeps its text
    title = title.strip().lower().replace("`", "")
    title = re.sub(r"[^\w\- ]", "", title)
    return title.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found, seen, fence = set(), {}, False
        for line in path.read_text(encoding="utf-8").split("\n"):
            if line.lstrip().startswith("```"):
                fence = not fence
            m = None if fence else HEADING.match(line)
            if not fence:
                found.update(HTML_ANCHOR.findall(line))
            if m:
                s = slug(m.group(2))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else f"{s}-{n}")
        cache[path] = found
    return cache[path]


def check(page, errors):
    text = strip_code(page.read_text(encoding="utf-8"))
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        where = f"{page.relative_to(ROOT)}: ({target})"
        if not dest.exists():
            errors.append(f"{where}: no such file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif not dest.is_relative_to(ROOT):
            errors.append(f"{where}: points outside the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            errors.append(f"{where}: no heading `#{anchor}` in {dest.relative_to(ROOT)}")


def main():
    errors = []
    src = ROOT / "docs" / "src"
    pages = [ROOT / "README.md", *sorted(src.rglob("*.md"))]
    for page in pages:
        check(page, errors)
    summary = strip_code((src / "SUMMARY.md").read_text(encoding="utf-8"))
    listed = {(src / t).resolve() for t in re.findall(r"\]\(([^)#]+)\)", summary)}
    for page in src.rglob("*.md"):
        if page.name != "SUMMARY.md" and page.resolve() not in listed:
            errors.append(f"{page.relative_to(ROOT)}: not listed in SUMMARY.md (mdBook would not build it)")
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"{len(errors)} broken link(s)", file=sys.stderr)
        return 1
    print(f"links ok: {len(pages)} pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())

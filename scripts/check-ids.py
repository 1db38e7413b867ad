#!/usr/bin/env python3
"""Checks that every contract id the code, tests and book cite is defined in the book (run by
`make test`, next to check-links.py).

The behavioural contract lives in docs/src/contract/: its sections are headings `## §N Title` (or
`### §N.M Title`), its items list entries `- <a id="x6"></a>**X6.** ...`. Cited are:

- `contract §N`, `contract X6` (also lists: `contract §6, §22`, `contract V22/V26`) in any source,
  test, script or page;
- test functions and conformance cases named after an item (`fn v22_expired_run_ids_fail`,
  `tests/conformance/cases/x6_*.js`).

Anything else that points outside the repository is refused too: a `SPEC` or `DESIGN` reference
(documents a user does not have) or an issue number (say the reason instead). Exit status 1 lists
every offender with its file and line.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "src" / "contract"
SECTION = re.compile(r"^#{2,3}\s+§(\d+(?:\.\d+)?)\b")
ITEM = re.compile(r'<a id="([a-z]+\d+)"></a>\*\*([A-Z]+\d+)\.\*\*')
ONE = r"(?:§\d+(?:\.\d+)?|[A-Z]\d{1,2})"
CITE = re.compile(rf"\bcontract ({ONE}(?:(?:, | and | or |/|–){ONE})*)")
TEST_FN = re.compile(r"\bfn ([a-z]\d{1,2})_[a-z0-9_]+\s*\(")
CASE_FILE = re.compile(r"^([a-z]\d{1,2})_")
OUTSIDE = [
    (re.compile(r"\bSPEC\b"), "a SPEC reference: cite the contract (docs/src/contract/) instead"),
    (re.compile(r"\bDESIGN §"), "a DESIGN reference: point at the book page that explains it instead"),
    (re.compile(r"\b[Ii]ssue \d+"), "an issue number: say the reason itself instead"),
]
SUFFIXES = {".rs", ".py", ".js", ".mjs", ".cjs", ".ts", ".md", ".toml", ".sh", ".c", ".h", ".json5"}
SKIP_DIRS = {"node_modules", "target", ".git", ".venv", "book", "__pycache__"}


def defined():
    sections, items = set(), set()
    for page in sorted(CONTRACT.glob("*.md")):
        for line in page.read_text(encoding="utf-8").split("\n"):
            m = SECTION.match(line)
            if m:
                sections.add(m.group(1))
            for a, b in ITEM.findall(line):
                if a != b.lower():
                    sys.exit(f"{page.relative_to(ROOT)}: anchor `{a}` does not match item `{b}`")
                items.add(b)
    return sections, items


def sources():
    roots = [ROOT / d for d in ("crates", "tests", "scripts", "docs", "fuzz", "bench", "benches", "examples")]
    files = [ROOT / "README.md", ROOT / "Makefile"]
    for r in roots:
        if not r.exists():
            continue
        for p in r.rglob("*"):
            if p.is_file() and p.suffix in SUFFIXES and not SKIP_DIRS.intersection(p.relative_to(ROOT).parts):
                files.append(p)
    return files


def main():
    sections, items = defined()
    if not sections or not items:
        print("no contract pages under docs/src/contract/", file=sys.stderr)
        return 1
    me = Path(__file__).resolve()
    errors, cited = [], 0
    for path in sources():
        rel = path.relative_to(ROOT)
        m = CASE_FILE.match(path.name)
        if m and "conformance" in rel.parts and m.group(1).upper() not in items:
            errors.append(f"{rel}: names contract item {m.group(1).upper()}, which no contract page defines")
        if path == me:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        lines = text.split("\n")
        for n, line in enumerate(lines, 1):
            for m in CITE.finditer(line):
                for ref in re.findall(ONE, m.group(1)):
                    cited += 1
                    ok = ref[1:] in sections if ref.startswith("§") else ref in items
                    if not ok:
                        errors.append(f"{rel}:{n}: cites contract {ref}, which no contract page defines")
            # A test function's name (its attribute on one of the lines above).
            if path.suffix == ".rs" and any("test" in l for l in lines[max(0, n - 4) : n - 1] if "#[" in l):
                for fn in TEST_FN.findall(line):
                    if fn.upper() not in items:
                        errors.append(f"{rel}:{n}: `{fn}_…` names contract item {fn.upper()}, which no page defines")
            if CONTRACT in path.parents:
                continue
            for pattern, why in OUTSIDE:
                if pattern.search(line):
                    errors.append(f"{rel}:{n}: {why}")
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"{len(errors)} unresolved reference(s)", file=sys.stderr)
        return 1
    print(f"contract ids ok: {len(sections)} sections, {len(items)} items, {cited} citations")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""docs/DESIGN.md cannot fall behind the code silently.

* Every invariant number cited in the code, the tests and the ADRs (``I9`` in a comment or
  docstring, ``test_I4_I5_…`` or ``I03_…`` in a test name) has an entry in the design document.
* Each of I1-I15 states its rule, where it is enforced, its tests and its known gaps.
* Every module, test file and ``file::name`` the document names still exists, so a rename or a
  split shows up here instead of leaving the document pointing at nothing.
* The README links the document.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "DESIGN.md"

#: An invariant citation: ``I`` and a number, not glued to a word (``TestI3`` and ``I2C`` are not
#: citations; ``test_I4_I5`` and ``I03_…`` are: ``_`` separates words in names).
CITATION = re.compile(r"(?<![A-Za-z0-9])I0?(\d{1,2})(?![0-9A-Za-z])")

#: A definition in the document: a heading ``### I5 …`` or a list entry ``- **I16 …``.
DEFINITION = re.compile(r"^(?:###\s+|-\s+\*\*)I(\d{1,2})\b", re.MULTILINE)

_TEXT_TOKENS = {tokenize.COMMENT, tokenize.STRING, tokenize.NAME} | {
    getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)  # Python ≥ 3.12 splits f-strings
}


def _python_text(path: Path) -> Iterator[tuple[int, str]]:
    """Comments, strings (docstrings included) and identifiers (test names) of one file."""
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if tok.type in _TEXT_TOKENS:
            yield tok.start[0], tok.string


def cited_invariants() -> dict[int, list[str]]:
    """Invariant number → where it is cited (``path:line``) in reconciler/, api/, sdk/, tests/, adr/."""
    cited: dict[int, list[str]] = {}
    for folder in ("reconciler", "api", "sdk", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == Path(__file__).resolve():
                continue  # this checker's patterns and examples are not citations
            for line, text in _python_text(path):
                for m in CITATION.finditer(text):
                    cited.setdefault(int(m.group(1)), []).append(f"{path.relative_to(ROOT)}:{line}")
    for path in sorted((ROOT / "adr").glob("*.md")):
        for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for m in CITATION.finditer(text):
                cited.setdefault(int(m.group(1)), []).append(f"{path.relative_to(ROOT)}:{line}")
    return cited


def defined_invariants(text: str) -> set[int]:
    return {int(n) for n in DEFINITION.findall(text)}


def test_every_cited_invariant_is_defined_in_the_design_doc() -> None:
    defined = defined_invariants(DESIGN.read_text(encoding="utf-8"))
    cited = cited_invariants()
    assert cited, "the scan found no citations at all: the scanner is broken"
    missing = {f"I{n}": where[:3] for n, where in sorted(cited.items()) if n not in defined}
    assert not missing, f"cited but not defined in docs/DESIGN.md: {missing}"


def test_the_scanner_sees_comments_docstrings_and_test_names_but_not_glued_words() -> None:
    assert [int(n) for n in CITATION.findall("test_I4_I5_publish, I03_revisions, (I12), I14.")] == [4, 5, 3, 12, 14]
    assert CITATION.findall("TestI3I4 I2C API1 HI5") == []
    assert defined_invariants("### I7 Waiters\n- **I16 Grants** — being built\nI8 in prose\n") == {7, 16}


def test_each_implemented_invariant_has_rule_enforcement_tests_and_gaps() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    heads = [
        (m.group(0), int(m.group(1)), m.start()) for m in re.finditer(r"^###\s+I(\d{1,2})\b.*$", text, re.MULTILINE)
    ]
    assert len([h for h in heads if "being built" in h[0]]) <= 1, heads  # at most one "I…: being built" heading
    implemented = [n for title, n, _ in heads if "being built" not in title]
    # I1-I15 first, in order; an invariant built later (I16-I20) gets its own section after them.
    assert implemented[:15] == list(range(1, 16)) and implemented == sorted(set(implemented)), implemented
    ends = [start for _, _, start in heads[1:]] + [text.find("\n## ", heads[-1][2])]
    for (title, n, start), end in zip(heads, ends, strict=True):
        if "being built" in title:
            continue
        section = text[start:end]
        for part in ("**Rule.**", "**Enforced.**", "**Tests.**", "**Known gaps.**"):
            assert part in section, f"I{n} has no {part} paragraph"
    for n in range(16, 21):
        if n not in implemented:
            assert re.search(rf"^-\s+\*\*I{n}\b.*being built \(issue \d+", text, re.MULTILINE), f"I{n} entry"


#: Paths as the document writes them: repository modules (``reconciler/runtime.py``) and test
#: files relative to ``tests/`` (``unit/test_runtime.py``), optionally ``::name`` or ``::A.b``.
_PATH_REF = re.compile(
    r"`((?:tests/)?(?:reconciler|api|sdk|unit|integration|e2e|chaos|property|support|relay|cluster)/[\w/.-]+\.(?:py|json))"
    r"(?:::([\w.]+))?`"
)


_TEST_DIRS = ("unit", "integration", "e2e", "chaos", "property", "support", "relay", "cluster")


def _resolve(ref: str) -> Path:
    """``unit/test_x.py`` and ``api/test_x.py`` / ``api/conftest.py`` live under ``tests/``;
    ``api/control.py`` is the repository's ``api/``."""
    if ref.startswith("tests/"):
        return ROOT / ref
    top = ref.partition("/")[0]
    name = ref.rsplit("/", 1)[-1]
    if top in _TEST_DIRS or name.startswith("test_") or name == "conftest.py":
        return ROOT / "tests" / ref
    return ROOT / ref


def test_every_module_and_test_the_design_doc_names_exists() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    refs = _PATH_REF.findall(text)
    assert len(refs) > 50, "the document names modules and tests; the pattern found too few"
    problems: list[str] = []
    for ref, qualname in refs:
        path = _resolve(ref)
        if not path.is_file():
            problems.append(f"{ref}: no such file ({path.relative_to(ROOT)})")
            continue
        if qualname:
            source = path.read_text(encoding="utf-8")
            for part in qualname.split("."):
                if not re.search(rf"^\s*(?:async\s+def|def|class)\s+{re.escape(part)}\b", source, re.MULTILINE):
                    problems.append(f"{ref}::{qualname}: no def/class {part!r}")
    for link in re.findall(r"\]\(\.\./(adr/[^)]+)\)", text):
        if not (ROOT / link).is_file():
            problems.append(f"{link}: no such ADR")
    assert not problems, "docs/DESIGN.md names things that do not exist:\n" + "\n".join(problems)


def test_every_adr_is_in_the_design_docs_index() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    missing = [p.name for p in sorted((ROOT / "adr").glob("*.md")) if f"../adr/{p.name}" not in text]
    assert not missing, f"ADRs missing from the index in docs/DESIGN.md: {missing}"


def test_the_readme_links_the_design_doc() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/DESIGN.md" in readme
    assert "../shared/" not in readme, "the README points outside the repository"

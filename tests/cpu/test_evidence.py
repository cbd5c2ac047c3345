"""docs/evidence.tsv (one line per run result) is valid, and docs/evidence.md is the table generated from it.

Release-independent: the release table, the fix list and the test tree are the same on every release.
"""

import os

import pytest
from conftest import ROOT

from sglang_specv2_fixes.testing import evidence

pytestmark = pytest.mark.release_independent


def test_evidence_md_is_the_generated_one():
    with open(os.path.join(ROOT, "docs", "evidence.md"), encoding="utf-8") as f:
        text = f.read()
    assert text == evidence.markdown(), (
        "regenerate: python -m sglang_specv2_fixes.testing.evidence markdown > docs/evidence.md")


def test_data_file_lines_are_valid():
    lines = evidence.load()
    assert lines, "docs/evidence.tsv has no result lines"
    assert evidence.problems(lines) == []
    assert {ln.result for ln in lines} >= {"A/B met", "CPU-proven"}


@pytest.mark.parametrize("field, value, why", [
    ("release", "0.5.10", "not in the release table"),
    ("fix", "no-such-fix", "not a fix name"),
    ("result", "passed", "is not one of"),
    ("date", "29.11.2026", "not YYYY-MM-DD"),
    ("backend", "cuda", "is not one of"),
    ("row", "tests/registered/test_no_such_row.py", "no such file"),
    ("row", "tests/registered/test_verify_handoff.py::TestNoSuchClass", "no class"),
    ("row", "docs/proof.md", "is not tests/registered"),
])
def test_a_wrong_field_is_named(field, value, why):
    good = evidence.Line("2026-11-29", "H200", "0.5.11", "triton", "verify-handoff",
                         "tests/registered/test_verify_handoff.py", "A/B met", "")
    assert evidence.problems([good]) == []
    bad = evidence.problems([good._replace(**{field: value})])
    assert len(bad) >= 1 and any(why in b for b in bad), bad


def test_result_kind_matches_device_and_release():
    cpu = evidence.Line("2026-11-29", "CPU", "0.5.23", "-", "min-tokens-per-position",
                        "tests/cpu/test_fix_min_tokens_per_position.py", "CPU-proven", "")
    assert evidence.problems([cpu]) == []
    # a GPU result on a release whose torch the GPU image does not have; CPU proof of a fix that is upstream there
    assert any("torch" in p for p in evidence.problems([cpu._replace(
        device="H200", backend="triton", row="tests/registered/test_min_tokens_per_position.py", result="A/B met")]))
    assert any("not patched" in p for p in evidence.problems([cpu._replace(
        fix="verify-handoff", row="tests/cpu/test_fix_verify_handoff.py")]))


def test_table_takes_the_newest_ab_and_joins_two_half_runs():
    row = "tests/registered/test_min_tokens_per_position.py"
    base = evidence.Line("2026-11-28", "H200", "0.5.12", "triton", "min-tokens-per-position", row, "plugin passes", "")
    lines = [base, base._replace(date="2026-11-27", result="stock fails")]
    md = evidence.markdown(lines)
    assert ("| `min-tokens-per-position` | 0.5.12 | GPU A/B | 2026-11-28 | H200 | triton | "
            "`test_min_tokens_per_position.py` (sides in two runs: stock 2026-11-27, plugin 2026-11-28) |") in md
    md = evidence.markdown([base])  # one side only: not an A/B
    assert "| `min-tokens-per-position` | 0.5.12 | GPU, plugin side | 2026-11-28 |" in md
    assert "| `min-tokens-per-position` | 0.5.11 | none |" in md


def test_append_checks_then_writes(tmp_path):
    path = str(tmp_path / "evidence.tsv")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\t".join(evidence.COLUMNS) + "\n")
    ln = evidence.append("H200", "0.5.11", "triton", "verify-handoff", "tests/registered/test_verify_handoff.py",
                         "A/B met", date="2026-12-01", path=path)
    with pytest.raises(ValueError, match="not a fix name"):
        evidence.append("H200", "0.5.11", "triton", "nope", "tests/registered/test_verify_handoff.py", "A/B met",
                        path=path)
    assert evidence.load(path) == [ln]

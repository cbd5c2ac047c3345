import pytest

from sglang_specv2_fixes import selection
from sglang_specv2_fixes.fixes import ALL_FIXES


def parse(v):
    return selection.parse(v, ALL_FIXES)


@pytest.mark.parametrize("value", [None, "", "auto", "AUTO", " auto "])
def test_auto(value):
    sel = parse(value)
    assert sel.mode == "auto"
    assert all(sel.wants(f.name) for f in ALL_FIXES)


@pytest.mark.parametrize("value", ["off", "none", "OFF"])
def test_off(value):
    sel = parse(value)
    assert sel.mode == "off"
    assert not any(sel.wants(f.name) for f in ALL_FIXES)


@pytest.mark.parametrize("value", ["skip-stale-overlap-updates", "#23456", "23456", " 23456 ,#23456"])
def test_explicit_by_name_or_pr(value):
    sel = parse(value)
    assert sel.explicit and sel.names == {"skip-stale-overlap-updates"}
    assert sel.wants("skip-stale-overlap-updates") and not sel.wants("bonus-slot-accounting")


@pytest.mark.parametrize("value", ["bogus", "23456,bogus", "23456,,", "auto,23456", "#99999"])
def test_invalid_lists_valid_names(value):
    with pytest.raises(selection.SelectionError) as e:
        parse(value)
    msg = str(e.value)
    for f in ALL_FIXES:
        assert f.name in msg and f.pr in msg
    assert "SGLANG_SPECV2_FIXES" in msg and "--specv2-fixes" in msg


def test_unknown_names_are_named():
    with pytest.raises(selection.SelectionError, match="unknown fix name.*bogus"):
        parse("23456,bogus")

import pytest

from sglang_specv2_fixes import selection
from sglang_specv2_fixes.fixes import ALL_FIXES

pytestmark = pytest.mark.release_independent  # ci/run_cpu_tests.sh: on the first anchor release only


def parse(v):
    return selection.parse(v, ALL_FIXES)


@pytest.mark.parametrize("value", [None, "", "auto", "AUTO", " auto "])
def test_auto(value):
    sel = parse(value)
    assert sel.mode == "auto" and sel.canonical == "auto" and not sel.explicit
    assert all(sel.wants(f.name) for f in ALL_FIXES)


@pytest.mark.parametrize("value", ["off", "none", "OFF"])
def test_off(value):
    sel = parse(value)
    assert sel.mode == "off" and sel.canonical == "off"
    assert not any(sel.wants(f.name) for f in ALL_FIXES)


@pytest.mark.parametrize("value", ["skip-stale-overlap-updates", "#23456", "23456", " 23456 ,#23456"])
def test_explicit_by_name_or_pr(value):
    sel = parse(value)
    assert sel.explicit and sel.names == {"skip-stale-overlap-updates"}
    assert sel.wants("skip-stale-overlap-updates") and not sel.wants("bonus-slot-accounting")
    assert sel.canonical == "skip-stale-overlap-updates"


@pytest.mark.parametrize("value", ["bogus", "23456,bogus", "23456,,", "auto,23456", "#99999"])
def test_invalid_lists_valid_names(value):
    with pytest.raises(selection.SelectionError) as e:
        parse(value)
    msg = str(e.value)
    for f in ALL_FIXES:
        assert f.name in msg and all(pr in msg for pr in f.upstream)
    assert "skip-stale-overlap-updates (#23456)" in msg
    assert "SGLANG_SPECV2_FIXES" in msg and "--specv2-fixes" in msg


def test_unknown_names_are_named():
    with pytest.raises(selection.SelectionError, match="unknown fix name.*bogus"):
        parse("23456,bogus")


def test_selections_compare_by_meaning():
    assert parse("26866") == parse("tree-drafting") == parse("#26866") == parse("Tree-Drafting ")
    assert hash(parse("26866")) == hash(parse("tree-drafting"))
    both = parse("tree-drafting,23456")
    assert both == parse("#23456, 26866") == parse("skip-stale-overlap-updates,tree-drafting,26866")
    assert both.canonical == "skip-stale-overlap-updates,tree-drafting"  # sorted fix names
    assert parse("26866").raw == "26866" and parse("tree-drafting").raw == "tree-drafting"  # as written
    assert parse("auto") == parse(None) == parse("default") and parse("off") == parse("none")
    assert parse("auto") != parse("off") and parse("26866") != parse("23456")
    # explicit names that happen to be every fix still mean 'exactly these', not 'auto'
    assert parse(",".join(f.name for f in ALL_FIXES)) != parse("auto")


def test_a_fix_beyond_upstream_is_selected_by_name_only():
    (live,) = [f for f in ALL_FIXES if f.name == "live-accept-metrics"]
    assert live.upstream == () and live.aliases == ("live-accept-metrics",)
    sel = parse("live-accept-metrics")
    assert sel.explicit and sel.names == {"live-accept-metrics"} and sel.canonical == "live-accept-metrics"
    assert parse("LIVE-ACCEPT-METRICS,26866").names == {"live-accept-metrics", "tree-drafting"}
    for spelling in ("#23456-followup", "23456-followup"):
        with pytest.raises(selection.SelectionError, match="unknown fix name"):
            parse(spelling)
    with pytest.raises(selection.SelectionError) as e:
        parse("bogus")
    assert "live-accept-metrics," in str(e.value) or str(e.value).rstrip(".").endswith("live-accept-metrics")
    assert "live-accept-metrics ()" not in str(e.value)


def test_from_env(monkeypatch):
    monkeypatch.setenv("SGLANG_SPECV2_FIXES", "26866")
    assert selection.from_env(ALL_FIXES) == parse("tree-drafting")
    monkeypatch.delenv("SGLANG_SPECV2_FIXES")
    assert selection.from_env(ALL_FIXES).mode == "auto"


@pytest.mark.parametrize("value", ["auto,-tree-drafting", "-26866", " AUTO , -#26866 ", "default,-tree-drafting"])
def test_auto_without_some_fixes(value):
    sel = parse(value)
    assert sel.mode == "auto" and not sel.explicit and sel.without == {"tree-drafting"}
    assert sel.canonical == "auto,-tree-drafting" and parse(sel.canonical) == sel  # what the schedulers inherit
    assert not sel.wants("tree-drafting")
    assert [f.name for f in ALL_FIXES if not sel.wants(f.name)] == ["tree-drafting"]
    assert sel != parse("auto") and parse("auto,-23456,-26866").canonical == (
        "auto,-skip-stale-overlap-updates,-tree-drafting")


@pytest.mark.parametrize("value", ["23456,-26866", "-26866,23456", "auto,-", "-bogus", "off,-26866", "-auto"])
def test_auto_without_rejects_mixes_and_unknown_names(value):
    with pytest.raises(selection.SelectionError) as e:
        parse(value)
    assert "auto,-NAME" in str(e.value) and "tree-drafting (#26866)" in str(e.value)

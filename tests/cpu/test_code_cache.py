"""The code cache is an accelerator, never a source of truth (issue 56, finding 1), and register() is safe when called
from several threads at once (finding 5): on the release under test's real source, patch files and compiled functions.

* a ``.code`` entry whose function was replaced (its stored fingerprint kept) is not run: it is compiled again;
* a spans entry with a forged fingerprint does not turn an edited (refused) function into ready;
* an entry written by a ``python -O`` process (asserts compiled out) is not used by a normal process;
* a folder with group/other permission bits or another owner is not used (one warning); the plugin makes its own
  folder with mode 0700;
* 8 threads calling plugin.register() at once hook every target exactly once.
"""

import json
import logging
import marshal
import os
import stat
import sys

import pytest
from conftest import LINE, ROOT, VERSION, requires_sglang, run_py

from sglang_specv2_fixes import core, fingerprint, installed, patchfile, releases, selection
from sglang_specv2_fixes.catalog import READY, REFUSED, Patched
from sglang_specv2_fixes.core import STATE
from sglang_specv2_fixes.fixes import ALL_FIXES
from sglang_specv2_fixes.testing import standins

pytestmark = [requires_sglang, pytest.mark.release_scoped]
CACHE_ENV = "SGLANG_SPECV2_FIXES_CODE_CACHE"
AUTO = selection.parse("auto", ALL_FIXES)
PATCHED_HERE = [f.name for f in ALL_FIXES if LINE and isinstance(releases.entry(f.name, LINE), Patched)]


def _new_process():
    """What a new process starts with: the spans this one found written (as at the end of register), every in-process
    cache and the folder checks forgotten."""
    getattr(fingerprint, "flush", lambda: None)()
    fingerprint._SPANS.clear()
    getattr(fingerprint, "_KEYS", {}).clear()
    fingerprint._DIGESTS.clear()
    for f in (fingerprint.function_source, fingerprint._read, fingerprint._lines, fingerprint.plain_lines,
              fingerprint._defs, fingerprint._starts, fingerprint._leaves):
        f.cache_clear()
    STATE.reset()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache" / "code"
    monkeypatch.setenv(CACHE_ENV, str(d))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    _new_process()
    yield d
    _new_process()


@pytest.fixture
def compiled(monkeypatch):
    """Sources the plugin compiled (not taken from the cache)."""
    import builtins

    seen = []
    real = builtins.compile
    monkeypatch.setattr(patchfile, "compile", lambda *a, **k: seen.append(a[1]) or real(*a, **k), raising=False)
    return seen


def _ready_fixes():
    report = core.plan(AUTO)
    names = [st.name for st in report.fixes if st.state == READY]
    assert names, f"nothing ready on sglang {VERSION}: the cache would never be used"
    return names


def _payload_offset(data: bytes, parse) -> int:
    """Where an entry's payload starts, whatever the entry's layout: the first offset ``parse`` accepts (the tampering
    below keeps every byte before it, as an attacker who cannot compute the entry's seal would). The seal's own length
    is tried first: unmarshalling garbage at a wrong offset can ask for gigabytes (a length read from random bytes)."""
    first = getattr(fingerprint, "_MAC_BYTES", None)
    for off in ([first] if first else []) + list(range(0, min(len(data), 256))):
        try:
            if parse(data[off:]):
                return off
        except Exception:
            pass
    raise AssertionError("no payload found in the entry")


def test_the_plugin_makes_its_folder_and_key_private(cache):
    core.build_fixes(_ready_fixes())
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(cache / "key").st_mode) == 0o600
    assert list(cache.glob("*.code"))


def test_a_replaced_code_entry_is_not_run(cache, compiled):
    """Every ``.code`` entry replaced by another function (its stored fingerprint kept): the next build compiles the
    patched functions again and none of them is the replacement."""
    names = _ready_fixes()
    first = core.build_fixes(names)
    entries = sorted(cache.glob("*.code"))
    assert entries and len(compiled) == len(first)

    def is_entry(b):
        got = marshal.loads(b)
        return isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], type(first_code))

    first_code = next(iter(first.values())).__code__
    for entry in entries:
        data = entry.read_bytes()
        off = _payload_offset(data, is_entry)
        fp, code = marshal.loads(data[off:])
        fn_name = next(c.co_name for c in code.co_consts if isinstance(c, type(code)))
        evil = compile(f"def {fn_name}(*a, **k):\n    return 'replaced-by-a-test'\n", code.co_filename, "exec")
        entry.write_bytes(data[:off] + marshal.dumps((fp, evil)))
    _new_process()
    compiled.clear()
    again = core.build_fixes(names)
    assert len(compiled) == len(again)  # every one compiled again, none taken from a replaced entry
    for target, fn in again.items():
        assert "replaced-by-a-test" not in fn.__code__.co_consts, target
        assert fn.__code__ == first[target].__code__, target
    _new_process()  # and the entries now hold the real functions again
    compiled.clear()
    assert core.build_fixes(names).keys() == first.keys() and not compiled


def _edited_copy(tmp_path, monkeypatch):
    """A READY fix's first target edited (a comment line added inside the function) in a copy of its installed module,
    which plan() then reads as the installed file: (fix name, target, edited text)."""
    for name in _ready_fixes():
        pf = core._patch_file(core.plan(AUTO).get(name))
        t = pf.targets[0]
        path = installed.module_file(t.module)
        text = fingerprint.read_source(path)
        _, first, _ = fingerprint.function_source(text, t.qualname)
        lines = text.splitlines(keepends=True)
        lines.insert(first, "# edited where the plugin was not written against it\n")
        edited = "".join(lines)
        copy = tmp_path / "edited" / os.path.basename(path)
        copy.parent.mkdir(exist_ok=True)
        copy.write_text(edited, encoding="utf-8")
        real = installed.module_file
        monkeypatch.setattr(installed, "module_file", lambda m: str(copy) if m == t.module else real(m))
        return name, t, edited
    raise AssertionError("no ready fix")


def test_a_forged_fingerprint_in_a_spans_entry_does_not_make_an_edited_function_ready(cache, tmp_path, monkeypatch):
    name, t, edited = _edited_copy(tmp_path, monkeypatch)
    _new_process()
    st = core.plan(AUTO).get(name)
    assert st.state == REFUSED and t.dotted in st.reason  # the edit is seen
    _new_process()
    (entry,) = cache.glob(fingerprint._digest(edited) + ".spans*")
    data = entry.read_bytes()
    off = _payload_offset(data, lambda b: t.qualname in json.loads(b))
    spans = json.loads(data[off:])
    assert len(spans[t.qualname]) == 3 and spans[t.qualname][2] != t.before
    spans[t.qualname][2] = t.before  # what the patch file expects
    entry.write_bytes(data[:off] + json.dumps(spans).encode())
    _new_process()
    st = core.plan(AUTO).get(name)
    assert st.state == REFUSED, st.reason
    check = next(c for c in st.targets if c.target == t.dotted)
    assert not check.ok and check.installed == fingerprint.fingerprint_source(
        fingerprint.function_source(edited, t.qualname)[0])


def _has_assert(code) -> bool:
    import dis

    return any(i.opname == "LOAD_ASSERTION_ERROR" for i in dis.get_instructions(code)) or any(
        _has_assert(c) for c in code.co_consts if isinstance(c, type(code)))


def test_a_cache_filled_by_python_O_is_not_used_by_a_normal_process(cache, monkeypatch):
    """Issue 56: a cache filled by ``python -O`` served functions without their asserts to a normal process."""
    names = _ready_fixes()
    monkeypatch.setenv(CACHE_ENV, "0")
    reference = core.build_fixes(names)  # compiled here, no cache
    with_asserts = [t for t, fn in reference.items() if _has_assert(fn.__code__)]
    if not with_asserts:
        pytest.skip(f"no patched function with an assert on sglang {VERSION}: -O compiles the same code")
    monkeypatch.setenv(CACHE_ENV, str(cache))
    code = ("import sys\nassert sys.flags.optimize == 1\nfrom sglang_specv2_fixes import core, selection\n"
            "from sglang_specv2_fixes.fixes import ALL_FIXES\n"
            f"core.build_fixes({names!r})\n")
    # the child writes the code cache (not while PYTHONDONTWRITEBYTECODE), and its own bytecode files go to this test's
    # folder, not beside the installed sources
    env = standins.child_env(names=("sgl_kernel",), PYTHONPYCACHEPREFIX=str(cache.parent / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    import subprocess

    p = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert list(cache.glob("*.code")), "the -O process wrote no entry: nothing to test"
    _new_process()
    got = core.build_fixes(names)
    for target in reference:
        assert got[target].__code__ == reference[target].__code__, target
    assert all(_has_assert(got[t].__code__) for t in with_asserts)


def _chown_or_pretend(path, monkeypatch):
    """Make ``path`` another user's: chown where this test runs as root, else this process takes another uid."""
    if os.getuid() == 0:
        os.chown(path, 65534, -1)
    else:
        uid = os.getuid() + 1
        monkeypatch.setattr(fingerprint.os, "getuid", lambda: uid)


@pytest.mark.parametrize("case", ["0755", "0770", "0711", "other-owner"])
def test_an_untrusted_folder_is_not_used(cache, compiled, monkeypatch, caplog, case):
    names = _ready_fixes()
    first = core.build_fixes(names)
    assert compiled and len(list(cache.glob("*.code"))) == len(first)
    _new_process()
    compiled.clear()
    core.build_fixes(names)
    assert not compiled  # the folder as the plugin made it: used
    before = sorted((p.name, p.stat().st_mtime_ns) for p in cache.iterdir())
    with monkeypatch.context() as m:
        if case == "other-owner":
            _chown_or_pretend(cache, m)
        else:
            os.chmod(cache, int(case, 8))
        _new_process()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="sglang_specv2_fixes"):
            core.build_fixes(names)
            core.build_fixes(names)
        assert len(compiled) == 2 * len(first)  # nothing taken from it
        warned = [r.getMessage() for r in caplog.records if str(cache) in r.getMessage()]
        assert len(warned) == 1 and "mode 0700" in warned[0], warned  # one clear warning
        _new_process()
        assert sorted((p.name, p.stat().st_mtime_ns) for p in cache.iterdir()) == before  # nor written into
    os.chmod(cache, 0o700)
    if case == "other-owner" and os.getuid() == 0:
        os.chown(cache, 0, -1)


REGISTER_FROM_THREADS = """
import json, logging, sys, threading
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from sglang.srt.plugins.hook_registry import HookRegistry, HookSource, _current_plugin_source
from sglang_specv2_fixes import plugin
barrier = threading.Barrier(8)
errors = []

def run():
    _current_plugin_source.set(HookSource("specv2_fixes", "sglang-specv2-fixes"))
    barrier.wait()
    try:
        plugin.register()
    except BaseException as e:
        errors.append(repr(e))

threads = [threading.Thread(target=run) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
HookRegistry.apply_hooks()
ours = {t: len([h for h in hs if h[2] and h[2].plugin_name == 'specv2_fixes']) for t, hs in HookRegistry._hooks.items()}
print('RESULT ' + json.dumps(dict(hooks=ours, errors=errors)))
"""


def test_register_from_eight_threads_at_once_hooks_every_target_once():
    p = run_py(REGISTER_FROM_THREADS, SGLANG_SPECV2_FIXES_CODE_CACHE="0")
    assert p.returncode == 0, p.stderr[-4000:]
    r = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1][len("RESULT "):])
    assert not r["errors"], r["errors"]
    assert len(r["hooks"]) > 8, r["hooks"]  # the fixes' targets and the reporting hooks
    assert all(n == 1 for n in r["hooks"].values()), {t: n for t, n in r["hooks"].items() if n != 1}
    assert "Multiple REPLACE hooks" not in p.stderr

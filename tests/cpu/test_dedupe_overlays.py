"""ci/dedupe_overlays.py, which ci/setup_cpu_env.sh runs after the release overlays install (stop 37's CI ran out of
disk in setup): only byte-identical files at the same path inside their overlays become one file; a file that differs
in content, in path or is small stays its own, and a second run changes nothing."""

import importlib.util
import os

import pytest

from conftest import ROOT

pytestmark = pytest.mark.release_independent  # ci/run_cpu_tests.sh: on the first anchor release only


def load():
    spec = importlib.util.spec_from_file_location("dedupe_under_test", os.path.join(ROOT, "ci", "dedupe_overlays.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write(root, rel, data):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


def test_only_identical_files_at_the_same_path_are_linked(tmp_path, capsys):
    big = os.urandom(64 * 1024)
    a = write(tmp_path, "0.5.11/sglang/x.py", big)
    b = write(tmp_path, "0.5.12/sglang/x.py", big)  # same path, same bytes: linked
    c = write(tmp_path, "0.5.13/sglang/x.py", big[:-1] + bytes([big[-1] ^ 1]))  # same size, one byte differs
    d = write(tmp_path, "0.5.13/sglang/y.py", big)  # same bytes, another path
    e1 = write(tmp_path, "0.5.11/small.txt", b"same")
    e2 = write(tmp_path, "0.5.12/small.txt", b"same")  # under MIN_SIZE
    load().main(str(tmp_path))
    assert os.path.samefile(a, b)
    assert a.read_bytes() == big and b.read_bytes() == big
    for other in (c, d, e2):
        assert not os.path.samefile(a if other is not e2 else e1, other)
    assert c.read_bytes() != big
    assert "1 files hard-linked" in capsys.readouterr().out
    assert not list(tmp_path.rglob("*.dedupe-tmp"))

    load().main(str(tmp_path))  # a re-run: nothing left to link
    assert "0 files hard-linked" in capsys.readouterr().out

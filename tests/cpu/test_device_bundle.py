"""The device bundle layout (ci/gpu/make_combined_bundle.sh + ci/gpu/env.sh) on synthetic release bundles: a
combined carry with an overlay release must unpack on the device to exactly what that release's own
bundle holds, and ``importlib.metadata`` must read its version (on the GPU, a leftover empty dist-info of the
base release once made 0.5.12 read as version None, so the plugin declared it unsupported)."""

import filecmp
import os
import subprocess
import sys
import tarfile

import pytest

from conftest import ROOT

if subprocess.run(["bash", "-c", "command -v xz"], capture_output=True).returncode:
    pytest.skip("xz not installed", allow_module_level=True)


def make_release(root, version, extra):
    """A site tree like make_bundle.sh's: sglang package + dist-info, a shared dependency, FlashInfer part."""
    site = {f"sglang-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n",
            f"sglang-{version}.dist-info/licenses/LICENSE": "Apache-2.0\n",
            "sglang/__init__.py": "", "sglang/_version.py": f"__version__ = version = '{version}'\n",
            "sglang/srt/common.py": "X = 1\n", "dep/__init__.py": "DEP = 1\n"}
    site.update(extra)
    d = root / ".device-bundle" / version
    d.mkdir(parents=True)
    for name, files in (("site", site), ("fi", {"flashinfer/__init__.py": "FI = 1\n"})):
        src = root / f"src-{version}-{name}"
        for rel, text in files.items():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_text(text)
        with tarfile.open(d / f"{name}.tar.xz", "w:xz") as t:
            for rel in sorted(files):
                t.add(src / rel, arcname=rel)
    return site


def unpack(root, version, bundle):
    env = {**os.environ, "SPECV2_UNPACK_ONLY": "1", "SPECV2_UNPACK_ROOT": str(root / "unpacked"), "PYTHONPATH": ""}
    (root / "unpacked").mkdir(exist_ok=True)
    p = subprocess.run(["bash", "-c", f"source {ROOT}/ci/gpu/env.sh {version} {bundle} && echo PP=$PYTHONPATH"],
                       cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return root / "unpacked" / f"sglang-{version}"


def test_overlay_release_unpacks_to_its_own_bundle(tmp_path):
    make_release(tmp_path, "9.1.0", {"sglang/srt/only_a.py": "A = 1\n"})
    make_release(tmp_path, "9.2.0.post1", {"sglang/srt/changed.py": "V = 'post1'\n", "sglang/srt/gone.py": ""})
    make_release(tmp_path, "9.2.0", {"sglang/srt/changed.py": "V = 'base'\n", "sglang/srt/new.py": "N = 1\n"})
    p = subprocess.run(["bash", os.path.join(ROOT, "ci", "gpu", "make_combined_bundle.sh"), "9.1.0", "9.2.0.post1",
                        "9.2.0=9.2.0.post1"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    both = tmp_path / ".device-bundle" / "both"
    assert (both / "9.2.0.base").read_text().strip() == "9.2.0.post1"
    assert not (both / "9.2.0.tar.xz").exists() and not (both / "fi-9.2.0.tar.xz").exists()  # overlay + base's FI
    for version in ("9.1.0", "9.2.0.post1", "9.2.0"):
        got = unpack(tmp_path, version, ".device-bundle/both")
        ref = tmp_path / f"ref-{version}"
        ref.mkdir()
        for part in ("site", "fi"):
            with tarfile.open(tmp_path / ".device-bundle" / version / f"{part}.tar.xz") as t:
                t.extractall(ref)
        cmp = filecmp.dircmp(ref, got, ignore=[".ready"])

        def differences(c):
            out = c.left_only + c.right_only + c.diff_files
            for sub in c.subdirs.values():
                out += differences(sub)
            return out

        assert differences(cmp) == [], (version, differences(cmp))
        v = subprocess.run([sys.executable, "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
                           env={**os.environ, "PYTHONPATH": str(got)}, capture_output=True, text=True, cwd=tmp_path)
        assert v.stdout.strip() == version, v.stdout + v.stderr


@pytest.mark.parametrize("ngpu,releases,expected", [
    (4, "a b", {"a": "0,2", "b": "1,3"}),
    (4, "a b c", {"a": "0,3", "b": "1", "c": "2"}),
    (2, "a b c", {"a": "0", "b": "1", "c": "0"}),
    (1, "a b", {"a": "0", "b": "0"}),
])
def test_gpu_matrix_deals_gpus_round_robin(tmp_path, ngpu, releases, expected):
    """ci/gpu/lease.sh matrix runs its own ``run`` step once per release, each on its GPUs and port range (the release
    environment and the runner stubbed: a python3 on PATH that prints its arguments)."""
    import shutil

    (tmp_path / "ci" / "gpu").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    shutil.copy(os.path.join(ROOT, "ci", "gpu", "lease.sh"), tmp_path / "ci" / "gpu")
    (tmp_path / "ci" / "gpu" / "prepare.sh").write_text(":\n")
    fake = tmp_path / "bin" / "python3"
    fake.write_text('#!/bin/sh\necho "PY $*"\n')
    fake.chmod(0o755)
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + "".join(f"echo 'GPU {i}: H200'\n" for i in range(ngpu)))
    smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "BENCH_ROOT": str(tmp_path)}
    env.pop("OUT", None)
    env.pop("SPECV2_COMMIT", None)  # run and matrix record nothing of their own
    p = subprocess.run(["bash", "ci/gpu/lease.sh", "matrix", releases, "--jobs", "7"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got, bases = {}, set()
    for line in p.stdout.splitlines():
        words = line.split()  # [REL] PY ci/run_registered.py --out ROOT/specv2-runs/REL --gpus G --port-base P --jobs 7
        if words[1:3] != ["PY", "ci/run_registered.py"]:
            assert words[1:] == ["PY", "-m", "sglang_specv2_fixes", "status"], line
            continue
        rel = words[0].strip("[]")
        assert words[words.index("--out") + 1] == str(tmp_path / "specv2-runs" / rel)
        got[rel] = words[words.index("--gpus") + 1]
        bases.add(words[words.index("--port-base") + 1])
        assert words[-2:] == ["--jobs", "7"]
    assert got == expected
    assert len(bases) == len(expected)  # a port range of its own per release


@pytest.mark.parametrize("overlay, rel", [("xgrammar", "xgrammar/__init__.py"),
                                          ("flashmla", "sgl_kernel/flashmla_ops.abi3.so")])
def test_overlay_unpacks_into_a_tree_without_it(tmp_path, overlay, rel):
    """An in-tree overlay beside a bundle that lacks it (ci/gpu/make_xgrammar_overlay.sh: a make_bundle.sh bundle
    without xgrammar; ci/gpu/make_flashmla_overlay.sh: every bundle, none has FlashMLA): ci/gpu/env.sh puts it into
    the release's tree (once; a tree that has the file, e.g. a slim bundle's xgrammar, is left alone)."""
    make_release(tmp_path, "9.3.0", {})
    d = tmp_path / ".device-bundle" / f"9.3.0-{overlay}"
    d.mkdir()
    src = tmp_path / f"src-{overlay}" / rel
    src.parent.mkdir(parents=True)
    src.write_text("overlay\n")
    with tarfile.open(d / "site.tar.xz", "w:xz") as t:
        t.add(src, arcname=rel)
    got = unpack(tmp_path, "9.3.0", ".device-bundle/9.3.0")
    assert (got / rel).read_text() == "overlay\n"
    assert (got / "sglang" / "_version.py").exists()
    # a tree that already has it keeps its own
    (got / rel).write_text("bundle\n")
    again = unpack(tmp_path, "9.3.0", ".device-bundle/9.3.0")
    assert (again / rel).read_text() == "bundle\n"


DATASETS_STAND_IN = os.path.join(ROOT, "sglang_specv2_fixes", "testing", "shims")


def _env_sh_path(root, version):
    """PYTHONPATH after ``source ci/gpu/env.sh VERSION`` in ``root`` (unpack only, nothing else on the path)."""
    env = {**os.environ, "SPECV2_UNPACK_ONLY": "1", "SPECV2_UNPACK_ROOT": str(root / "unpacked"), "PYTHONPATH": ""}
    (root / "unpacked").mkdir(exist_ok=True)
    p = subprocess.run(["bash", "-c", f"source {ROOT}/ci/gpu/env.sh {version} .device-bundle/{version} && "
                        "echo PP=$PYTHONPATH"], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return [ln[3:] for ln in p.stdout.splitlines() if ln.startswith("PP=")][-1].split(":")


def test_outlines_overlay_goes_after_the_tree_with_the_datasets_stand_in(tmp_path):
    """ci/gpu/make_outlines_overlay.sh's output beside a bundle: ci/gpu/env.sh unpacks it into a folder of its own right
    after the release's tree on PYTHONPATH (a package both have resolves to the tree's), and puts the datasets
    stand-in last where python3 finds no datasets (outlines hashes its tokenizer with datasets.fingerprint.Hasher);
    a release carried without the overlay gets neither."""
    make_release(tmp_path, "9.4.0", {"shared_dep/__init__.py": "WHO = 'tree'\n"})
    make_release(tmp_path, "9.5.0", {})
    ol = tmp_path / ".device-bundle" / "9.4.0-outlines"
    ol.mkdir()
    src = tmp_path / "src-ol"
    files = {"outlines/__init__.py": "OL = 'overlay'\n", "shared_dep/__init__.py": "WHO = 'overlay'\n"}
    with tarfile.open(ol / "site.tar.xz", "w:xz") as t:
        for rel, text in files.items():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_text(text)
            t.add(src / rel, arcname=rel)
    tree, overlay = tmp_path / "unpacked" / "sglang-9.4.0", tmp_path / "unpacked" / "sglang-9.4.0-outlines"
    no_datasets = subprocess.run(
        ["python3", "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('datasets') is not None)"],
        env={**os.environ, "PYTHONPATH": f"{tree}:{overlay}"}, capture_output=True).returncode == 0
    path = _env_sh_path(tmp_path, "9.4.0")
    assert path == [str(tree), str(overlay)] + ([DATASETS_STAND_IN] if no_datasets else []), path
    assert (overlay / ".ready").exists() and not (tree / "outlines").exists()
    code = ("import outlines, shared_dep; from datasets.fingerprint import Hasher; "
            "print(outlines.OL, shared_dep.WHO, Hasher.hash({'a': 1}) == Hasher.hash({'a': 1}) != Hasher.hash([1]))")
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": ":".join(path)},
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.stdout.split() == ["overlay", "tree", "True"], p.stdout + p.stderr
    assert _env_sh_path(tmp_path, "9.4.0") == path  # unpacked once; the next source gives the same path
    assert _env_sh_path(tmp_path, "9.5.0") == [str(tmp_path / "unpacked" / "sglang-9.5.0")]


def test_datasets_stand_in_hashes_alike_across_processes():
    """The stand-in's Hasher (outlines keys its caches by the tokenizer's hash): equal objects hash alike in two
    processes, different ones differ."""
    code = ("from datasets.fingerprint import Hasher; import datasets, sys; "
            "assert datasets.__file__.startswith(sys.argv[1]), datasets.__file__; "
            "print(Hasher.hash({'vocab': ['t7', 't8'], 'eos': 2}), Hasher.hash({'vocab': ['t7', 't9'], 'eos': 2}))")
    env = {**os.environ, "PYTHONPATH": DATASETS_STAND_IN}
    runs = [subprocess.run([sys.executable, "-c", code, DATASETS_STAND_IN], env=env, capture_output=True, text=True,
                           cwd=ROOT) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    (a1, b1), (a2, b2) = (r.stdout.split() for r in runs)
    assert a1 == a2 and b1 == b2 and a1 != b1


SHIMS = os.path.join(ROOT, "ci", "gpu", "bundle_shims")
FAKE_BACKENDS = {  # module -> source: what 0.5.15.post1+ import while capturing spec-v2 draft graphs
    "dsa_backend": "class Defined:\n    pass\nimport cutlass.cute\n",
    "deepseek_v4_backend": "import some_other_missing_package\n",
}


def _shim_run(tmp_path, code, with_shim=True):
    """``code`` in a fresh interpreter with a fake sglang attention package (and the shim folder) on the path."""
    pkg = tmp_path / "sglang" / "srt" / "layers" / "attention"
    pkg.mkdir(parents=True, exist_ok=True)
    for d in (pkg, pkg.parent, pkg.parent.parent, pkg.parent.parent.parent):
        (d / "__init__.py").touch()
    for name, src in FAKE_BACKENDS.items():
        (pkg / f"{name}.py").write_text(src)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(([SHIMS] if with_shim else []) + [str(tmp_path)])}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)


def test_bundle_shim_gives_placeholders_only_for_the_absent_kernel_packages(tmp_path):
    code = ("from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend, Defined\n"
            "import sglang.srt.layers.attention.dsa_backend as m\n"
            "assert m.__specv2_placeholder__ == 'cutlass', m.__specv2_placeholder__\n"
            "assert isinstance(Defined(), Defined) and not isinstance(object(), DeepseekSparseAttnBackend)\n"
            "assert m.DeepseekSparseAttnBackend is DeepseekSparseAttnBackend\n"
            "try:\n    import sglang.srt.layers.attention.deepseek_v4_backend\n"
            "except ModuleNotFoundError as e:\n    print('propagated', e.name)\n")
    p = _shim_run(tmp_path, code)
    assert p.returncode == 0, p.stderr
    assert "propagated some_other_missing_package" in p.stdout  # other import errors stay errors
    assert "dsa_backend: cutlass is not in the device bundle" in p.stderr
    # without the shim the same import fails: the shim is what makes the difference
    p = _shim_run(tmp_path, "import sglang.srt.layers.attention.dsa_backend", with_shim=False)
    assert p.returncode != 0 and "No module named 'cutlass'" in p.stderr


def test_bundle_shim_leaves_importable_modules_alone(tmp_path):
    FAKE = {"dsa_backend": "class DeepseekSparseAttnBackend:\n    pass\n"}
    pkg = tmp_path / "sglang" / "srt" / "layers" / "attention"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent, pkg.parent.parent.parent):
        (d / "__init__.py").touch()
    (pkg / "dsa_backend.py").write_text(FAKE["dsa_backend"])
    code = ("import sglang.srt.layers.attention.dsa_backend as m\n"
            "assert not hasattr(m, '__specv2_placeholder__')\n"
            "assert m.DeepseekSparseAttnBackend.__module__ == m.__name__\n"
            "try:\n    m.Missing\nexcept AttributeError:\n    print('no placeholders')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SHIMS, str(tmp_path)])}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0 and "no placeholders" in p.stdout, p.stderr
    assert "specv2 bundle shim" not in p.stderr


def test_gpu_prepare_puts_the_bundle_shim_on_the_path():
    src = open(os.path.join(ROOT, "ci", "gpu", "prepare.sh")).read()
    assert '$PWD/ci/gpu/bundle_shims' in src and os.path.exists(os.path.join(SHIMS, "sitecustomize.py"))

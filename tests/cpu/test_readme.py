"""The README and docs/ stay true, and the wheel is the runtime package only.

* README.md: at most 200 lines of at most 120 columns (the generated compatibility table's rows excepted), its
  table equal to ``sglang-specv2-fixes matrix --markdown``, every repository path it names in backticks present;
* README.md and the user/maintainer docs it links: every relative link and image points to an existing file, and
  every ``#anchor`` to a heading of that file (GitHub's heading ids);
* the README's performance table equal to the parity data it cites (docs/bench/upstream-parity.json);
* one version in pyproject.toml, ``__version__``, the newest CHANGELOG.md entry and ci/gpu/prepare.sh;
* the wheel (``pip wheel``, built from a copy of the tracked package files) holds the plugin and its patch files
  but not ``sglang_specv2_fixes/testing/``; an editable install of the same tree still imports the test helpers.

Release-independent: nothing here depends on the SGLang release on PYTHONPATH.
"""

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT

from sglang_specv2_fixes import cli

README = os.path.join(ROOT, "README.md")
# the docs the README links as its moved sections
DOCS = ["usage.md", "evidence.md", "maintaining.md", "how-it-works.md", "packagers.md", "known-bugs.md"]
MAX_LINES, MAX_COLUMNS = 200, 120
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
REPO_DIRS = (".ci/", "bench/", "ci/", "docs/", "patches/", "sglang_specv2_fixes/", "tests/")


def _lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def _prose(lines):
    """(line number, text) outside fenced code blocks, inline code removed."""
    fenced = False
    for i, ln in enumerate(lines, 1):
        if ln.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield i, re.sub(r"`[^`]*`", "", ln)


def _table_span(lines):
    """[start, end) of the compatibility table (the block that starts with '| fix | ')."""
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| fix | "))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return start, end


def slug(heading):
    """GitHub's id of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*", "", heading.strip().lstrip("#").strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    for _, ln in _prose_headings(path):
        s = slug(ln)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def _prose_headings(path):
    fenced = False
    for i, ln in enumerate(_lines(path), 1):
        if ln.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", ln):
            yield i, ln


def test_readme_is_short_and_narrow():
    lines = _lines(README)
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines (at most {MAX_LINES}): move detail to docs/"
    start, end = _table_span(lines)
    wide = [(i + 1, len(ln)) for i, ln in enumerate(lines) if len(ln) > MAX_COLUMNS and not start <= i < end]
    assert not wide, f"README.md lines wider than {MAX_COLUMNS} columns (line, width): {wide}"


def test_readme_table_is_the_generated_one():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["matrix", "--markdown"]) == 0
    lines = _lines(README)
    start, end = _table_span(lines)
    assert lines[start:end] == out.getvalue().strip().splitlines(), (
        "README compatibility table is stale: paste `sglang-specv2-fixes matrix --markdown`")


@pytest.mark.parametrize("name", ["README.md"] + [f"docs/{d}" for d in DOCS])
def test_relative_links_resolve(name):
    path = os.path.join(ROOT, name)
    bad = []
    for i, text in _prose(_lines(path)):
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # http(s):, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(dest):
                bad.append(f"{name}:{i}: {target} (no such file)")
            elif anchor and (not dest.endswith(".md") or anchor not in anchors(dest)):
                bad.append(f"{name}:{i}: {target} (no heading with that id)")
    assert not bad, "\n".join(bad)


def test_readme_links_every_moved_doc():
    text = open(README, encoding="utf-8").read()
    missing = [d for d in DOCS if f"(docs/{d}" not in text]
    assert not missing, f"docs not linked from README.md: {missing}"


def test_readme_paths_exist():
    """Repository paths the README names in backticks (`ci/run_cpu_tests.sh`) exist; placeholders (<v>) skipped."""
    text = open(README, encoding="utf-8").read()
    paths = {p for p in re.findall(r"`([^`\s]+)`", text) if p.startswith(REPO_DIRS) and not re.search(r"[<>*]", p)}
    assert paths, "expected the README to name some repository paths"
    missing = sorted(p for p in paths if not os.path.exists(os.path.join(ROOT, p)))
    assert not missing, f"README.md names paths that do not exist: {missing}"


def test_readme_performance_table_is_the_parity_data():
    """Every ratio in the README's performance table is a point of docs/bench/upstream-parity.json (plugin over
    upstream, c = 1 / 8 / 32) of the row's invocation (``user invocation`` in the label, else the harness's flags),
    and every row names points the data has."""
    import json

    with open(os.path.join(ROOT, "docs", "bench", "upstream-parity.json"), encoding="utf-8") as f:
        points = json.load(f)["points"]
    ratio = {(p["release"], p["tp"], p["backend"], p.get("invocation", "harness"), p["config"], p["concurrency"]):
             p["plugin_over_upstream"] for p in points}
    lines = _lines(README)
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| release, TP, GPU |"))
    configs = ["chain", "tree-topk4", "tree-topk8"]
    checked = 0
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        label, *cells = [c.strip() for c in ln.strip("|").split("|")]
        rels = re.findall(r"0\.5\.\d+(?:\.post\d+)?", label.split(",")[0])
        tp = int(re.search(r"TP (\d)", label).group(1))
        default = "default invocation" in label
        backend = "fa3" if default else "flashinfer" if "flashinfer" in label else "triton"
        for config, cell in zip(configs, cells):
            triples = re.findall(r"(\d\.\d{3}) / (\d\.\d{3}) / (\d\.\d{3})", cell.replace("**", ""))
            if cell == "-":
                continue
            assert len(triples) == len(rels), (ln, cell)
            for rel, triple in zip(rels, triples):
                cfg = "default" if default else config
                invocation = "user" if "user invocation" in label else "harness"
                got = tuple(ratio.get((rel, tp, backend, invocation, cfg, c)) for c in (1, 8, 32))
                assert got == tuple(float(x) for x in triple), (rel, tp, backend, cfg, got, triple)
                checked += 1
    assert checked >= 10, checked


def test_version_is_the_same_everywhere():
    """pyproject.toml's version is the package's ``__version__``, the newest CHANGELOG.md entry and the entry-point
    record ci/gpu/prepare.sh writes on the GPU machine."""
    from sglang_specv2_fixes import __version__

    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        (project,) = re.findall(r'^version = "([^"]+)"$', f.read(), re.M)
    with open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8") as f:
        changelog = re.findall(r"^## \[([^\]]+)\]", f.read(), re.M)
    with open(os.path.join(ROOT, "ci", "gpu", "prepare.sh"), encoding="utf-8") as f:
        records = set(re.findall(r"sglang_specv2_fixes-([0-9][^/]*?)\.dist-info", f.read()))
    assert project == __version__ == changelog[0], (project, __version__, changelog[:1])
    assert records == {project}, records


def _package_copy(dst):
    """The files a build reads, copied with the patches symlink kept (no build/ or *.egg-info of the checkout)."""
    os.makedirs(dst)
    for f in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(os.path.join(ROOT, f), dst)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(os.path.join(ROOT, "patches"), os.path.join(dst, "patches"), ignore=ignore)
    shutil.copytree(os.path.join(ROOT, "sglang_specv2_fixes"), os.path.join(dst, "sglang_specv2_fixes"),
                    symlinks=True, ignore=ignore)
    return dst


def _build(tmp_path, *hook):
    """pip wheel (no network: --no-build-isolation, the installed setuptools) of a copy of the package."""
    src = _package_copy(str(tmp_path / "src"))
    out = str(tmp_path / "out")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir",
           "--disable-pip-version-check", "-q", "-w", out, src] if not hook else [
        sys.executable, "-c", f"import setuptools.build_meta as b; print(b.{hook[0]}({out!r}))"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=src, timeout=300)
    assert p.returncode == 0, f"building failed (setuptools >= 77 needed):\n{p.stdout}\n{p.stderr}"
    (whl,) = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".whl")]
    return src, whl


def test_wheel_is_the_runtime_package(tmp_path):
    _, whl = _build(tmp_path)
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        entry_points = next(z.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
        metadata = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    # the repository in the metadata, by the name the README's Install section gives it (no placeholder, no host)
    (url,) = re.findall(r"^Project-URL: Repository, (.+)$", metadata, re.M)
    install = open(README, encoding="utf-8").read().split("## Install", 1)[1].split("\n## ", 1)[0]
    assert f"`{url.strip()}` repository" in install and "<" not in install.split("```")[0], url
    assert not [n for n in names if n.startswith("sglang_specv2_fixes/testing")], "the wheel ships the test helpers"
    for mod in ("__init__", "plugin", "core", "cli", "probe", "releases", "patchfile", "fixes/__init__"):
        assert f"sglang_specv2_fixes/{mod}.py" in names, mod
    shipped = {n[len("sglang_specv2_fixes/patches/"):] for n in names if n.startswith("sglang_specv2_fixes/patches/")}
    on_disk = {os.path.relpath(os.path.join(d, f), os.path.join(ROOT, "patches"))
               for d, _, fs in os.walk(os.path.join(ROOT, "patches")) for f in fs}
    assert shipped == on_disk, f"patch files not in the wheel: {sorted(on_disk - shipped)}"
    assert "specv2_fixes = sglang_specv2_fixes.plugin:register" in entry_points
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_editable_install_keeps_the_test_helpers(tmp_path):
    """The PEP 660 wheel pip builds for `pip install -e .`, put on a bare interpreter's path: the test helpers
    import from the source tree."""
    src, whl = _build(tmp_path, "build_editable")
    site = str(tmp_path / "site")
    with zipfile.ZipFile(whl) as z:
        z.extractall(site)
    code = ("import site, sys; site.addsitedir(sys.argv[1]); import sglang_specv2_fixes.testing.config as c; "
            "print(c.__file__)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-S", "-c", code, site], capture_output=True, text=True, cwd=str(tmp_path),
                       env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == os.path.join(src, "sglang_specv2_fixes", "testing", "config.py")

"""ci/gpu/bg.py, the background row dispatcher of the GPU sessions: every slot's ports stay inside what SGLang
accepts (session 9: slots past 8 got a gRPC port over 65535 and their rows died at startup on both sides), apart
from every other slot's and the benchmark's ports and their gRPC images, below the ephemeral range (session 30: a row
at 35000 and a benchmark server at 52600 lost their ports to it), and a row queued again is reported from its new
run, not from the earlier one's files."""

import importlib.util
import json
import os
import re

import pytest

from conftest import ROOT

pytestmark = pytest.mark.release_independent  # ci/run_cpu_tests.sh: on the first anchor release only


@pytest.fixture()
def gpu_bg(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECV2_BG_DIR", str(tmp_path / "bg"))
    spec = importlib.util.spec_from_file_location("gpu_bg_under_test", os.path.join(ROOT, "ci", "gpu", "bg.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_slot_fits_sglangs_port_limits(gpu_bg):
    assert gpu_bg.MAX_SLOTS >= 10  # session 8 ran 10 rows at once
    bases = [gpu_bg.port_base(s) for s in range(gpu_bg.MAX_SLOTS)]
    taken = set()
    for s in range(gpu_bg.MAX_SLOTS):
        ports = gpu_bg.slot_ports(s)
        assert {bases[s], bases[s] + 1000, bases[s] + 500, bases[s] + 1520, bases[s] + 10000} <= ports
        assert not ports & taken, s  # no row binds another row's port or its gRPC image
        assert max(ports) < 32768  # gRPC images included: below Linux's default ephemeral range (and 65535)
        taken |= ports
    # the benchmark's parts (bench/gpu_real_size.sh: PORT0 + 400 * part, a part's servers on base .. base + 299,
    # gRPC + 10000) beside a full set of rows, eight parts (an 8-GPU machine)
    script = open(os.path.join(ROOT, "bench", "gpu_real_size.sh")).read()
    port0 = int(re.search(r"PORT0=\$\{REAL_SIZE_PORT0:-(\d+)\}", script).group(1))
    bench = {port0 + 400 * o + k + g for o in range(8) for k in range(300) for g in (0, 10000)}
    assert not bench & taken and max(bench) < 32768
    with pytest.raises(ValueError):
        gpu_bg.port_base(gpu_bg.MAX_SLOTS)
    cmd = gpu_bg.row_command("0.5.11", "test_swa.py", gpu_bg.MAX_SLOTS - 1, 460, "/tmp/x")
    assert re.search(rf"--port-base {bases[-1]}\b", cmd), cmd
    assert cmd.count("--mode-env") == 1  # check mode on the plugin side, nothing else by default
    cmd = gpu_bg.row_command("0.5.11", "test_tree_topk.py", 0, 460, "/tmp/x",
                             ["SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=1"])
    assert "--mode-env auto:SGLANG_SPECV2_FIXES_CHECK=1 --mode-env auto:SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=1" in cmd
    assert "--modes" not in cmd
    cmd = gpu_bg.row_command("0.5.13", "test_page_align_decode.py", 0, 460, "/tmp/x", ["off:CUDA_LAUNCH_BLOCKING=1"])
    assert "--mode-env off:CUDA_LAUNCH_BLOCKING=1" in cmd and "auto:off:" not in cmd  # a side named: that side's
    cmd = gpu_bg.row_command("0.5.13", "test_hybrid_mamba_serves.py", 0, 460, "/tmp/x", (), ["mamba-track-freed-rows"])
    assert cmd.count("--mode-env") == 1 and " --modes mamba-track-freed-rows;" in cmd
    assert " --gpus 0 " in cmd  # one GPU unless asked
    cmd = gpu_bg.row_command("0.5.16", "test_dp2_multi_layer_idle.py", 1, 460, "/tmp/x", gpus="0,1")
    assert " --gpus 0,1 " in cmd and f"--port-base {bases[1]}" in cmd
    assert "--tests" not in cmd
    cmd = gpu_bg.row_command("0.5.13", "test_fa3_draft_extend_graph.py", 0, 900, "/tmp/x",
                             tests=["TestFa3DraftExtendGraphTree"])
    assert " --tests TestFa3DraftExtendGraphTree;" in cmd


def test_a_row_with_its_own_modes_runs_beside_the_default_one(gpu_bg):
    plain = gpu_bg.fresh_run_dir("0.5.13", "test_hybrid_mamba_serves.py")
    alone = gpu_bg.fresh_run_dir("0.5.13", "test_hybrid_mamba_serves.py", ["mamba-track-freed-rows"])
    assert plain != alone and os.path.isdir(plain) and os.path.isdir(alone)  # neither moved the other aside
    assert sorted(r[1] for r in gpu_bg.rows()) == ["test_hybrid_mamba_serves.py",
                                                   "test_hybrid_mamba_serves@mamba-track-freed-rows.py"]


def test_a_row_queued_again_is_waited_for(gpu_bg, tmp_path):
    old = os.path.join(gpu_bg.RUNS, "0.5.15", "test_routed_experts_tree")
    os.makedirs(old)
    for name, text in (("rc", "0\n"), ("results.json", json.dumps({"results": []}))):
        open(os.path.join(old, name), "w").write(text)
    assert [r[:2] for r in gpu_bg.rows()] == [("0.5.15", "test_routed_experts_tree.py")]
    assert gpu_bg.rows()[0][2]  # finished
    assert gpu_bg.fresh_run_dir("0.5.15", "test_routed_experts_tree.py") == old  # dispatch() starts it again
    assert os.listdir(old) == [] and os.path.exists(os.path.join(old + ".run1", "rc"))
    rows = gpu_bg.rows()
    assert [r[:2] for r in rows] == [("0.5.15", "test_routed_experts_tree.py")]
    assert rows[0][2] is None  # still running: wait() keeps waiting


def test_multi_gpu_rows_beside_one_gpu_rows_are_called_out(gpu_bg):
    """A TP 2 row started beside one-GPU rows finds its GPUs' free memory unbalanced and SGLang refuses to start it
    (session 18): queued or running rows of both kinds are reported."""
    os.makedirs(gpu_bg.QUEUE, exist_ok=True)
    assert gpu_bg.mixed_gpus() == set()
    json.dump(dict(release="0.5.16", file="test_dp2_multi_layer_idle.py", gpus="0,1"),
              open(os.path.join(gpu_bg.QUEUE, "1-a"), "w"))
    assert gpu_bg.mixed_gpus() == set()  # multi-GPU rows alone
    run = gpu_bg.fresh_run_dir("0.5.16", "test_hybrid_mamba_serves.py")
    json.dump(dict(release="0.5.16", file="test_hybrid_mamba_serves.py", gpus="1"), open(os.path.join(run, "task.json"), "w"))
    assert gpu_bg.mixed_gpus() == {"0,1", "1"}
    open(os.path.join(run, "rc"), "w").write("0\n")  # finished: no longer beside it
    assert gpu_bg.mixed_gpus() == set()



def test_a_release_unpacked_before_skips_the_import_check(gpu_bg, monkeypatch):
    """Each start sources the release's environment; once it is unpacked, without gpu_env.sh's ~20 s import check."""
    import subprocess

    seen = []

    def fake_run(cmd, **kw):
        seen.append(kw["env"].get("SPECV2_UNPACK_ONLY"))
        ready["/tmp/sglang-0.5.14/.ready"] = True  # the bundle unpacked
        return subprocess.CompletedProcess(cmd, 0, "sglang 0.5.14 torch 2.11 gpu H200\n", "")

    ready = {"/tmp/sglang-0.5.14/.ready": False}
    monkeypatch.setattr(gpu_bg.subprocess, "run", fake_run)
    monkeypatch.setattr(gpu_bg.os.path, "exists", lambda p: ready.get(p, True))
    gpu_bg.unpack("0.5.14")  # the first time: the full check
    gpu_bg.unpack("0.5.14")
    assert seen == [None, "1"]

"""The real-size serving benchmark on CPU (issue "Tree drafting at real size: measure it right"): the plan of
``bench/serving.py --real-size`` (dummy-load flags, SGLANG_SIMULATE_ACC_LEN on both servers, configurations,
concurrency list, every server flag known to the release's parser), the 8B-shaped model writer
(``bench/real_size_models.py``), the harness end to end against fake servers in real-size mode (and the summary its
run gives). TP 2 (issue 16): ``--tp-size 2`` on both servers with the same simulated acceptance, the 70B shape and its
fit estimate, the GPU groups / waves of ``bench/gpu_real_size.sh`` (run in a copy of the repo with stubs and a fake
nvidia-smi) and the report they end with. The report writer on its own: test_real_size_report.py."""

import functools
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, child_env, requires_sglang
from real_size_runs import ENV, SCHEMA_POINT, SCHEMA_TOP, points, synthetic
from sglang_specv2_fixes import installed

BENCH = os.path.join(ROOT, "bench")
REAL = ("eagle3-topk1", "tree-topk4", "tree-topk8")
SPEC = {"eagle3-topk1": (3, 1, 4), "tree-topk4": (3, 4, 8), "tree-topk8": (3, 8, 16)}
# the flags of a user's invocation: the model, the speculative settings, the backend, dummy weights, the KV pool, the
# plugin's selection, and the harness's address / NCCL port (no benchmark-only switch)
USER_INVOCATION_FLAGS = {"--model-path", "--attention-backend", "--load-format", "--max-total-tokens",
                         "--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
                         "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--speculative-draft-load-format",
                         "--specv2-fixes", "--nccl-port", "--device", "--host", "--port"}


def bench_run(args, timeout=300, **env):
    e = child_env(**env)
    e["PYTHONPATH"] = os.pathsep.join(x for x in (ROOT, e.get("PYTHONPATH")) if x)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=e)


def dry_run(*extra):
    p = bench_run([os.path.join(BENCH, "serving.py"), "--real-size", "--dry-run", *extra])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def server_lines(out):
    """{config: {side: [argv of `sglang serve` with the env prefix]}} from the dry run."""
    res, cur = {}, None
    for ln in out.splitlines():
        m = re.match(r"\[dry-run\] (\S+): ", ln)
        if m and not ln.startswith(("[dry-run] out", "[dry-run] budget", "[dry-run] real-size", "[dry-run] rough")):
            cur = m.group(1)
        m = re.match(r"\s+(stock|plugin)\s+server: (.*)$", ln)
        if m:
            res.setdefault(cur, {})[m.group(1)] = m.group(2).split()
    return res


def flag(argv, name):
    return argv[argv.index(name) + 1]


SERVER_FLAGS = r"""
import argparse, json
from sglang.srt.server_args import ServerArgs
ap = argparse.ArgumentParser()
ServerArgs.add_cli_args(ap)
print(json.dumps(sorted(f for f in ap._option_string_actions if f.startswith("--"))))
"""


@functools.lru_cache(maxsize=None)  # one child per process
def release_server_flags():
    """Every --flag the ServerArgs parser of the release on PYTHONPATH defines (its own ``add_cli_args``: 0.5.17 builds
    most flags from its argument groups, not from add_argument calls in server_args.py)."""
    p = bench_run(["-c", SERVER_FLAGS])  # in a child: this process's modules stay as they were
    assert p.returncode == 0, p.stderr[-3000:]
    return frozenset(json.loads(p.stdout.strip().splitlines()[-1]))


# ------------------------------------------------------------------------------------------------ the plan
@requires_sglang
def test_plan_dummy_weights_simulated_acceptance_on_both_sides():
    out = dry_run()
    servers = server_lines(out)
    assert list(servers) == list(REAL), out
    known = release_server_flags() | {"--specv2-fixes"}  # the plugin's own flag
    for name, sides in servers.items():
        assert set(sides) == {"stock", "plugin"}
        for side, argv in sides.items():
            assert argv[0] == f"{ENV}=3.0" and argv[1:3] == ["sglang", "serve"], (name, side, argv[:4])
            assert flag(argv, "--load-format") == "dummy" and flag(argv, "--speculative-draft-load-format") == "dummy"
            assert flag(argv, "--model-path").endswith("/target")
            assert flag(argv, "--speculative-draft-model-path").endswith("/eagle3")
            assert flag(argv, "--speculative-algorithm") == "EAGLE3"
            steps, topk, tokens = SPEC[name]
            assert (int(flag(argv, "--speculative-num-steps")), int(flag(argv, "--speculative-eagle-topk")),
                    int(flag(argv, "--speculative-num-draft-tokens"))) == (steps, topk, tokens)
            assert flag(argv, "--specv2-fixes") == {"stock": "off", "plugin": "auto"}[side]
            assert 16384 <= int(flag(argv, "--max-total-tokens")) <= 65536
            assert flag(argv, "--attention-backend") == "triton"
            assert "--tp-size" not in argv, "TP 1 (default): SGLang's own default, no flag"
            # the user invocation (the default): no flag beyond what a user passes, so SGLang's defaults hold
            assert set(a for a in argv if a.startswith("--")) == USER_INVOCATION_FLAGS, (name, side, argv)
            unknown = [a for a in argv if a.startswith("--") and a not in known]
            assert not unknown, f"flags {installed.version()} does not define: {unknown}"
        assert flag(sides["stock"], "--port") != flag(sides["plugin"], "--port")
        strip = lambda v: [a for a in v if not a.isdigit() and a not in ("off", "auto")]  # noqa: E731
        assert strip(sides["stock"]) == strip(sides["plugin"]), "the two sides differ only in ports and the selection"
    for name in REAL:
        block = out.split(f"[dry-run] {name}: ", 1)[1].split("\n\n", 1)[0]
        assert "points: C=1: 3 pair(s), N=auto; C=8: 3 pair(s), N=auto; C=32: 3 pair(s), N=auto" in block, block
        assert "--random-input-len 200 --random-output-len 256" in block
        assert re.search(r"--tokenizer \S+/target ", block)
    assert "greedy identity check skipped" in out and "real-size mode" in out


@requires_sglang
def test_plan_harness_invocation_adds_the_tests_common_flags():
    """``--invocation harness``: the registered tests' COMMON flags resized for two servers on one GPU (benchmark-only
    switches such as --disable-piecewise-cuda-graph), the same on both sides."""
    servers = server_lines(dry_run("--invocation", "harness"))
    assert list(servers) == list(REAL)
    for name, sides in servers.items():
        for side, argv in sides.items():
            assert (flag(argv, "--page-size") == "1") if name.startswith("tree") else "--page-size" not in argv
            assert int(flag(argv, "--cuda-graph-max-bs")) >= 32 and "32" in argv[argv.index("--cuda-graph-bs") + 1:]
            assert argv.count("--cuda-graph-bs") == 1 and argv.count("--mem-fraction-static") == 1
            assert float(flag(argv, "--mem-fraction-static")) >= 0.6
            assert "--disable-piecewise-cuda-graph" in argv and flag(argv, "--attention-backend") == "triton"
            assert 16384 <= int(flag(argv, "--max-total-tokens")) <= 65536
            assert set(a for a in argv if a.startswith("--")) > USER_INVOCATION_FLAGS


@requires_sglang
def test_plan_default_invocation_leaves_draft_shape_and_backend_to_sglang():
    """``default`` (issue 30): the draft path and algorithm only, no step / topk / token flags and no attention
    backend; the rest as the other configurations; a ``--server-args`` backend is still passed."""
    servers = server_lines(dry_run("--configs", "default", "eagle3-topk1"))
    known = release_server_flags() | {"--specv2-fixes"}
    for side, argv in servers["default"].items():
        assert flag(argv, "--speculative-algorithm") == "EAGLE3" and flag(argv, "--load-format") == "dummy"
        assert flag(argv, "--speculative-draft-model-path").endswith("/eagle3")
        assert flag(argv, "--speculative-draft-load-format") == "dummy"
        shape = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")
        assert not [f for f in (*shape, "--attention-backend", "--page-size") if f in argv], (side, argv)
        assert not [a for a in argv if a.startswith("--") and a not in known]
        chain = servers["eagle3-topk1"][side]
        assert [a for a in chain if a.startswith("--") and a not in (*shape, "--attention-backend")] == \
            [a for a in argv if a.startswith("--")], "otherwise the same flags as a configured chain"
    fa3 = server_lines(dry_run("--configs", "default", "--server-args=--attention-backend=fa3"))
    assert all(argv.count("--attention-backend=fa3") == 1 and "--attention-backend" not in argv
               for argv in fa3["default"].values())


@requires_sglang
def test_plan_options_acc_len_subset_and_tiny_mode_unchanged():
    out = dry_run("--acc-len", "2.5", "--configs", "tree-topk8", "--concurrency", "8", "32", "--repeats", "4")
    servers = server_lines(out)
    assert list(servers) == ["tree-topk8"]
    assert all(argv[0] == f"{ENV}=2.5" for argv in servers["tree-topk8"].values())
    assert "points: C=8: 4 pair(s), N=auto; C=32: 4 pair(s), N=auto" in out
    tiny = bench_run([os.path.join(BENCH, "serving.py"), "--dry-run"])
    assert tiny.returncode == 0 and ENV not in tiny.stdout and "--load-format" not in tiny.stdout
    bad = bench_run([os.path.join(BENCH, "serving.py"), "--real-size", "--dry-run", "--configs", "tree-topk16"])
    assert bad.returncode != 0 and "unknown config" in (bad.stdout + bad.stderr)

    sys.path.insert(0, BENCH)
    try:
        import serving

        a = serving.parse_args(["--real-size"])
        assert a.configs == list(REAL) and a.concurrency == [1, 8, 32] and (a.input_len, a.output_len) == (200, 256)
        assert all(serving.parse_repeats(a.repeats, a.configs)(n, c) >= 3 for n in REAL for c in (1, 8, 32))
        assert serving.REAL_SIZE and set(serving.CONFIGS) >= set(REAL)
        a = serving.parse_args([])
        assert not serving.REAL_SIZE and serving.CONFIGS["tree-topk8"]["spec"] == (5, 8, 32) and "tree-topk4" not in a.configs
    finally:
        sys.path.remove(BENCH)


# ----------------------------------------------------------------------------------------------- the models
def written_models(tmp_path, shape, *args):
    """Run the model writer into tmp_path/m; check the target has ``shape`` and the EAGLE3 draft is its one-layer
    twin (no weights written). Returns (the writer's summary, target config, draft config)."""
    p = bench_run([os.path.join(BENCH, "real_size_models.py"), str(tmp_path / "m"), *args])
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    info = json.loads(p.stdout.strip().splitlines()[-1])
    tgt = json.load(open(tmp_path / "m" / "target" / "config.json"))
    drf = json.load(open(tmp_path / "m" / "eagle3" / "config.json"))
    assert {k: tgt[k] for k in shape} == shape and tgt["architectures"] == ["LlamaForCausalLM"]
    assert tgt["tie_word_embeddings"] is False and tgt["torch_dtype"] == "bfloat16"
    assert drf["architectures"] == ["LlamaForCausalLMEagle3"] and drf["num_hidden_layers"] == 1
    assert {k: drf[k] for k in shape if k != "num_hidden_layers"} == {k: v for k, v in shape.items() if k != "num_hidden_layers"}
    assert drf["draft_vocab_size"] == 32000
    assert not any(f.endswith((".safetensors", ".bin")) for d in ("target", "eagle3") for f in os.listdir(tmp_path / "m" / d))
    return info, tgt, drf


def test_model_writer_8b_shapes_and_full_vocab_tokenizer(tmp_path):
    info, tgt, drf = written_models(tmp_path, dict(
        hidden_size=4096, num_hidden_layers=32, intermediate_size=14336, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, vocab_size=128256))
    assert tgt["max_position_embeddings"] >= 200 + 256 + 64 and drf["max_position_embeddings"] == tgt["max_position_embeddings"]
    assert info["model"]["target_params_b"] == pytest.approx(8.03, abs=0.01)
    from tokenizers import Tokenizer

    for d in ("target", "eagle3"):
        tk = Tokenizer.from_file(str(tmp_path / "m" / d / "tokenizer.json"))
        assert tk.get_vocab_size() == 128256
        assert tk.encode("t10 t128255").ids == [1, 10, 128255]
        assert tk.decode([100, 128255]) == "t100 t128255"
        tc = json.load(open(tmp_path / "m" / d / "tokenizer_config.json"))
        assert tc["tokenizer_class"] == "PreTrainedTokenizerFast" and tc["model_max_length"] == tgt["max_position_embeddings"]
    # written once per stamp: a second build leaves the files alone
    before = os.path.getmtime(tmp_path / "m" / "target" / "tokenizer.json")
    p = bench_run([os.path.join(BENCH, "real_size_models.py"), str(tmp_path / "m")])
    assert p.returncode == 0 and os.path.getmtime(tmp_path / "m" / "target" / "tokenizer.json") == before


def test_model_config_is_an_8b_llama_for_transformers(tmp_path):
    """The configs read as what they claim (transformers' own Llama on the meta device: no memory used)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    p = bench_run([os.path.join(BENCH, "real_size_models.py"), str(tmp_path / "m")])
    assert p.returncode == 0, p.stderr[-3000:]
    cfg = transformers.AutoConfig.from_pretrained(str(tmp_path / "m" / "target"))
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    n = sum(x.numel() for x in model.parameters())
    assert 8.0e9 < n < 8.1e9, n
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "m" / "target"))
    assert len(tok) == 128256


# -------------------------------------------------------------------------------- the harness, fake servers
E2E = r"""
import json, os, sys
sys.path.insert(0, os.path.join(ROOT, "bench"))
import serving, serving_selftest as st, serving_server
from sglang_specv2_fixes.testing import standins
standins.use_datasets_shim()
st.install_fakes(D)
seen = []
fake = serving_server.launch_process
def launch(model, url, other_args, timeout, sink, env):
    seen.append(dict(env=env.get("SGLANG_SIMULATE_ACC_LEN"), args=list(other_args), model=model))
    return fake(model, url, other_args, timeout, sink, env)
serving_server.launch_process = launch
rc = serving.main(["--real-size", "--out", os.path.join(D, "run"), "--configs", "eagle3-topk1,tree-topk8",
                   "--concurrency", "1", "4", "--point-seconds", "0.5", "--output-len", "24", "--input-len", "16",
                   "--budget-s", "200", "--first-launch-s", "1", "--later-launch-s", "1", "--base-port", "29600",
                   "--acc-len", "2.5", "--no-plots"])
json.dump(dict(rc=rc, seen=seen, env_after=os.environ.get("SGLANG_SIMULATE_ACC_LEN")), open(os.path.join(D, "seen.json"), "w"))
"""


@requires_sglang
@pytest.mark.serial  # fake servers and run budgets: alone on the machine (ci/run_cpu_tests.sh)
def test_harness_real_size_mode_end_to_end_against_fake_servers(tmp_path):
    pytest.importorskip("aiohttp")
    code = f"ROOT = {ROOT!r}\nD = {str(tmp_path)!r}\n" + E2E
    p = bench_run(["-c", code], timeout=400)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    seen = json.load(open(tmp_path / "seen.json"))
    assert seen["rc"] == 0 and seen["env_after"] is None, "the harness leaves its own environment alone"
    assert len(seen["seen"]) == 4 and all(s["env"] == "2.5" for s in seen["seen"]), "SGLANG_SIMULATE_ACC_LEN on every server"
    assert all(s["args"][s["args"].index("--max-total-tokens") + 1] == "32768" for s in seen["seen"]), "same KV pool"
    assert all("--load-format" in s["args"] and "--speculative-draft-load-format" in s["args"] for s in seen["seen"])
    r = json.load(open(tmp_path / "run" / "results.json"))
    m = r["meta"]
    assert m["complete"] is True and m["points_failed"] == 0, m.get("stop_reason")
    assert m["real_size"]["acc_len"] == 2.5 and m["real_size"]["env"] == {ENV: "2.5"}
    assert m["real_size"]["model"]["hidden_size"] == 4096 and m["real_size"]["model"]["num_hidden_layers"] == 32
    assert m["real_size"]["tp"] == 1 and m["real_size"]["model"]["shape"] == "8b" and "--tp-size" not in m["common_server_args"]
    assert "--load-format" in m["common_server_args"]
    for name in ("eagle3-topk1", "tree-topk8"):
        cfg = r["configs"][name]
        assert cfg["greedy"]["identical"] is None and "dummy weights" in cfg["greedy"]["skipped"]
        assert len(cfg["points"]) == 2 * 3 * 2 and all(p["ok"] for p in cfg["points"])  # 3 pairs x 2 concurrencies
    assert "greedy identity check skipped" in open(tmp_path / "run" / "server.log").read()
    md = open(tmp_path / "run" / "results.md").read()
    assert "real-size" in md and "greedy check skipped" in md

    sys.path.insert(0, BENCH)
    try:
        import real_size_report

        summary, written = real_size_report.write(real_size_report.load([str(tmp_path / "run" / "results.json")]),
                                                  str(tmp_path / "report"), "real-size-latest")
    finally:
        sys.path.remove(BENCH)
    assert set(summary) == SCHEMA_TOP and summary["acc_len"] == 2.5
    assert {(p["config"], p["concurrency"]) for p in summary["points"]} == {(n, c) for n in ("eagle3-topk1", "tree-topk8")
                                                                            for c in (1, 4)}
    tree = [p for p in summary["points"] if p["config"] == "tree-topk8"]
    assert all(p["pairs"] == 3 and p["plugin_over_stock"] > 1.2 for p in tree), tree  # the fake plugin steps 2x faster


def test_gpu_driver_script():
    """bench/gpu_real_size.sh: valid bash, runs serving.py in real-size mode through gpu_bench.sh per release and GPU,
    the report into $OUT, within the call's budget."""
    path = os.path.join(BENCH, "gpu_real_size.sh")
    assert subprocess.run(["bash", "-n", path]).returncode == 0
    src = open(path).read()
    assert "bash bench/gpu_bench.sh \"$v\" \"${MODE[@]}\"" in src and "MODE=(--real-size)" in src
    assert "CUDA_VISIBLE_DEVICES=$gpus" in src
    assert "bench/real_size_report.py --out-dir \"$OUTROOT\"" in src and "bench/real_size_models.py" in src
    assert "BENCH_TOTAL_S=" in src and "REAL_SIZE_TOTAL_S:-560" in src


# ------------------------------------------------------------------------------------------- TP 2 (issue 16)
@requires_sglang
def test_plan_tp2_both_sides_get_tp_size_and_the_same_simulated_acceptance():
    out = dry_run("--real-size-tp", "2", "--configs", "eagle3-topk1,tree-topk4", "--acc-len", "2.5")
    servers = server_lines(out)
    assert list(servers) == ["eagle3-topk1", "tree-topk4"], out
    known = release_server_flags() | {"--specv2-fixes"}
    for name, sides in servers.items():
        assert set(sides) == {"stock", "plugin"}
        for side, argv in sides.items():
            assert argv.count("--tp-size") == 1 and flag(argv, "--tp-size") == "2", (name, side, argv)
            assert argv[0] == f"{ENV}=2.5" and argv[1:3] == ["sglang", "serve"], (name, side, argv[:3])
            assert flag(argv, "--load-format") == "dummy" and flag(argv, "--speculative-draft-load-format") == "dummy"
            assert not [a for a in argv if a.startswith("--") and a not in known]
        strip = lambda v: [a for a in v if not a.isdigit() and a not in ("off", "auto")]  # noqa: E731
        assert strip(sides["stock"]) == strip(sides["plugin"]), "the two sides differ only in ports and the selection"
        assert flag(sides["stock"], "--nccl-port") != flag(sides["plugin"], "--nccl-port")
    assert "TP 2" in out and "8b target at TP 2" in out and "fits an H200" in out
    # the 70B shape at TP 2 is estimated not to fit (two servers on the same 2 GPUs): the documented default is 8B
    big = dry_run("--real-size-tp", "2", "--real-size-model", "70b", "--configs", "tree-topk4")
    assert "70B-shaped target" in big and "-70b" in big
    m = re.search(r"~(\d+) GiB per GPU .*does NOT fit an H200", big)
    assert m and int(m.group(1)) > 139, big
    assert re.search(r"--model-path \S+-70b/target", big)

    sys.path.insert(0, BENCH)
    try:
        import real_size
        import serving

        a = serving.parse_args(["--real-size", "--real-size-tp", "2"])
        assert (a.real_size_tp, a.real_size_model) == (2, "8b") and real_size.TP == 2
        assert a.first_launch_s == 150 + real_size.TP_LAUNCH_S and a.later_launch_s == 110 + real_size.TP_LAUNCH_S
        assert real_size.meta(a)["tp"] == 2 and real_size.meta(a)["model"]["shape"] == "8b"
        assert real_size.memory(a)["per_gpu"] < 78  # 8B at TP 2 fits even an H100 pair
        a = serving.parse_args(["--real-size", "--real-size-model=70b", "--real-size-tp=2"])
        assert a.first_launch_s > 300 and real_size.models_dir().endswith("-70b")
        assert real_size.memory(a)["per_gpu"] > 139
        a = serving.parse_args(["--real-size"])
        assert a.real_size_tp == 1 and a.first_launch_s == 150 and "--tp-size" not in real_size.common([], a)
        assert real_size.meta(a)["tp"] == 1 and not real_size.models_dir().endswith("-70b")
    finally:
        sys.path.remove(BENCH)
    bad = bench_run([os.path.join(BENCH, "serving.py"), "--real-size", "--dry-run", "--real-size-tp", "3"])
    assert bad.returncode != 0 and "invalid choice" in bad.stderr


def test_model_writer_70b_shapes(tmp_path):
    info, tgt, drf = written_models(tmp_path, dict(
        hidden_size=8192, num_hidden_layers=80, intermediate_size=28672, num_attention_heads=64,
        num_key_value_heads=8, head_dim=128, vocab_size=128256), "--model", "70b")
    assert info["model"]["shape"] == "70b" and info["model"]["target_params_b"] == pytest.approx(70.55, abs=0.05)
    assert info["model"]["kv_bytes_per_token"] == 80 * 2 * 8 * 128 * 2
    from tokenizers import Tokenizer

    assert Tokenizer.from_file(str(tmp_path / "m" / "target" / "tokenizer.json")).get_vocab_size() == 128256
    # the default folder: one per shape (a stamp covers one shape), 8b keeps the folder earlier runs used
    p = bench_run([os.path.join(BENCH, "real_size_models.py"), "--model", "70b"],
                  SPECV2_REAL_SIZE_MODELS=str(tmp_path / "d"))
    assert p.returncode == 0 and json.loads(p.stdout.strip().splitlines()[-1])["target"] == str(tmp_path / "d-70b" / "target")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.from_pretrained(str(tmp_path / "m" / "target"))
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    assert 70.4e9 < sum(x.numel() for x in model.parameters()) < 70.7e9


# the driver script in a copy of the repo: the real gpu_real_size.sh, plot.py and real_size_report.py; stubs for the
# bundle preparation, the model writer and gpu_bench.sh (which records its GPUs, budget, args and times and writes a
# TP 2 results.json); a fake nvidia-smi with N GPUs on PATH
STUB_BENCH = r"""#!/usr/bin/env bash
V=$1; shift
echo "$V|$CUDA_VISIBLE_DEVICES|$BENCH_TOTAL_S|$(date +%s.%N)|start|$*" >> "$STUB_LOG"
sleep 1
mkdir -p "$OUT/bench-$V" && cp "$STUB_DIR/$V.json" "$OUT/bench-$V/results.json"
echo "$V|$CUDA_VISIBLE_DEVICES|$BENCH_TOTAL_S|$(date +%s.%N)|end|" >> "$STUB_LOG"
"""


def driver(tmp_path, ngpu, *args, releases="0.5.11 0.5.12.post1", script="gpu_real_size.sh", **extra_env):
    import shutil

    repo, fake, stub = tmp_path / "repo", tmp_path / "bin", tmp_path / "stub"
    if not repo.exists():
        for d in (repo / "bench", repo / "ci", fake, stub):
            d.mkdir(parents=True)
        for f in ("gpu_real_size.sh", "gpu_bench_all.sh", "plot.py", "real_size_report.py"):
            shutil.copy(os.path.join(BENCH, f), repo / "bench" / f)
        (repo / "ci" / "gpu").mkdir()
        (repo / "ci" / "gpu" / "prepare.sh").write_text(":\n")
        (repo / "bench" / "gpu_bench.sh").write_text(STUB_BENCH)
        (repo / "bench" / "real_size_models.py").write_text(
            "import os, sys\nopen(os.environ['STUB_LOG'], 'a').write('models|' + ' '.join(sys.argv[1:]) + '\\n')\n")
        (fake / "python3").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
        for rel in ("0.5.11", "0.5.12.post1"):
            json.dump(synthetic(rel, {"tree-topk4": points(8, 2, [1000.0, 1000.0], [1100.0, 1150.0])}, tp=2),
                      open(stub / f"{rel}.json", "w"))
    (fake / "nvidia-smi").write_text("#!/bin/sh\n" + "".join(f"echo 'GPU {i}: NVIDIA H200 (UUID: x{i})'\n"
                                                              for i in range(ngpu)))
    for f in fake.iterdir():
        f.chmod(0o755)
    log = tmp_path / f"log-{ngpu}-{len(list(tmp_path.iterdir()))}.txt"
    out = tmp_path / f"out-{log.stem}"
    env = child_env(PATH=f"{fake}{os.pathsep}{os.environ['PATH']}", STUB_LOG=str(log), STUB_DIR=str(stub),
                    OUT=str(out), REAL_SIZE_TOTAL_S="560", **extra_env)
    p = subprocess.run(["bash", f"bench/{script}", releases, *args], cwd=repo, env=env, capture_output=True,
                       text=True, timeout=120)
    calls = [ln.split("|") for ln in log.read_text().splitlines()] if log.exists() else []
    return p, calls, out


def test_gpu_driver_tp2_gpu_groups_waves_and_report(tmp_path):
    # two releases at TP 2 on 2 GPUs, --waves: one after the other on GPUs 0,1, each with its share of the budget;
    # --waves after serving.py's args is the script's own option still (session 31: it reached serving.py, refused)
    p, calls, out = driver(tmp_path, 2, "--real-size-tp", "2", "--configs", "tree-topk4", "--repeats", "2", "--waves")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert ["models", "--model 8b"] in calls
    starts = [c for c in calls if c[4:5] == ["start"]]
    ends = {c[0]: float(c[3]) for c in calls if c[4:5] == ["end"]}
    assert [(c[0], c[1]) for c in starts] == [("0.5.11", "0,1"), ("0.5.12.post1", "0,1")], calls
    assert float(starts[1][3]) >= ends["0.5.11"], "the second wave starts after the first ended"
    b1, b2 = int(starts[0][2]), int(starts[1][2])
    assert 200 < b1 <= (560 - 30) // 2 < b2 <= 560 - 30, (b1, b2)  # half of what is left, then all of it
    for c, port in zip(starts, ("12500", "12900")):
        argv = c[5].split()
        assert argv[:3] == ["--real-size", "--base-port", port], argv
        assert flag(argv, "--real-size-tp") == "2" and flag(argv, "--configs") == "tree-topk4"
        assert "--waves" not in argv
    assert "plan: 0.5.11 part0 (all) -> GPUs 0,1, wave 0" in p.stdout and "2 wave(s)" in p.stdout
    summary = json.load(open(out / "real-size-latest.json"))
    assert set(summary) == SCHEMA_TOP and len(summary["points"]) == 2
    assert all(pt["tp"] == 2 and pt["config"] == "tree-topk4" and set(pt) == SCHEMA_POINT | {"tp"}
               for pt in summary["points"])
    assert {pt["release"] for pt in summary["points"]} == {"0.5.11", "0.5.12.post1"}
    assert "| 0.5.11 | 2 | tree-topk4 | 8 | 2 |" in open(out / "real-size-latest.md").read()
    assert (out / "real-size-out.tar.gz").exists()

    # without --waves a release without 2 GPUs of its own is skipped, with a message
    p, calls, out = driver(tmp_path, 3, "--real-size-tp", "2")
    starts = [(c[0], c[1]) for c in calls if c[4:5] == ["start"]]
    assert starts == [("0.5.11", "0,1")], (calls, p.stdout)
    assert "no free GPUs for 0.5.12.post1 part 0 (needs 2 of its own, 3 present): skipped" in p.stdout
    # 4 GPUs: each release its own pair, side by side; with --split each part a pair of its own
    p, calls, out = driver(tmp_path, 4, "--real-size-tp", "2")
    assert sorted((c[0], c[1]) for c in calls if c[4:5] == ["start"]) == [("0.5.11", "0,1"), ("0.5.12.post1", "2,3")]
    p, calls, out = driver(tmp_path, 8, "--real-size-tp=2", "--split=tree-topk4 tree-topk8", releases="0.5.11")
    got = sorted((c[1], c[5].split()[2], flag(c[5].split(), "--configs")) for c in calls if c[4:5] == ["start"])
    assert got == [("0,1", "12500", "tree-topk4"), ("2,3", "12900", "tree-topk8")], calls
    # the stub's parts both return tree-topk4: the merge refuses a configuration in two parts, and the run says so
    # in its exit status (session 32's said rc 0 with no merged results)
    assert p.returncode == 1 and "0.5.11: merging its parts failed" in p.stdout, p.stdout[-2000:]
    assert "configuration(s) in more than one part: ['tree-topk4']" in p.stderr
    # --split with --configs: every part would get all of --configs (session 32): refused before anything starts
    p, calls, out = driver(tmp_path, 2, "--split", "tree-topk4 tree-topk8", "--configs", "tree-topk4", releases="0.5.11")
    assert p.returncode == 2 and not [c for c in calls if c[4:5] == ["start"]], (calls, p.stdout)
    assert "names each part's configurations: leave out --configs" in p.stderr
    # a first port whose parts' gRPC ports (+ 10000) pass 65535 stops before anything starts (session 30: every
    # server of such a run exited with code 1)
    p, calls, out = driver(tmp_path, 2, REAL_SIZE_PORT0="56000")
    assert p.returncode == 2 and not [c for c in calls if c[4:5] == ["start"]], (calls, p.stdout)
    assert "gRPC (+10000) past 65535" in p.stderr
    # TP 1 (default) keeps one GPU per part; a single GPU cannot hold a TP 2 part even with --waves
    p, calls, out = driver(tmp_path, 2, "--real-size-model", "70b")
    assert sorted((c[0], c[1]) for c in calls if c[4:5] == ["start"]) == [("0.5.11", "0"), ("0.5.12.post1", "1")]
    assert ["models", "--model 70b"] in calls
    p, calls, out = driver(tmp_path, 1, "--waves", "--real-size-tp", "2")
    assert not [c for c in calls if c[4:5] == ["start"]] and p.stdout.count("skipped (timings need GPUs") == 2
    # the tiny models (bench/gpu_bench_all.sh = gpu_real_size.sh --tiny): no models written, no --real-size, no
    # real-size report; each release's table and bench-out.tar.gz
    p, calls, out = driver(tmp_path, 2, "--split", "tree-topk4", script="gpu_bench_all.sh")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert sorted((c[0], c[1], " ".join(c[5].split()[:4])) for c in calls if c[4:5] == ["start"]) == [
        ("0.5.11", "0", "--base-port 12500 --configs tree-topk4"), ("0.5.12.post1", "1", "--base-port 12900 --configs tree-topk4")]
    assert not [c for c in calls if c[0] == "models"]
    assert sorted(os.listdir(out)) == ["0.5.11-bench.md", "0.5.12.post1-bench.md", "bench-out.tar.gz"]


# ------------------------------------------------------------------- the DeepSeek-V3-class shape (issue 58, speed)
DSV3 = dict(hidden_size=7168, num_hidden_layers=8, num_attention_heads=128, q_lora_rank=1536, kv_lora_rank=512,
            qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, n_routed_experts=16, num_experts_per_tok=8,
            n_shared_experts=1, moe_intermediate_size=2048, first_k_dense_replace=3, vocab_size=129280)
MODEL_CONFIG = r"""
import json, sys
from sglang.srt.configs.model_config import AttentionArch, ModelConfig
m = ModelConfig(sys.argv[1])
print(json.dumps(dict(mla=m.attention_arch == AttentionArch.MLA, arch=m.hf_config.architectures,
                      kv_lora_rank=m.kv_lora_rank, layers=m.num_hidden_layers, vocab=m.vocab_size)))
"""


@requires_sglang
def test_model_writer_dsv3_reduced_shapes(tmp_path):
    """``--model dsv3-reduced``: a DeepSeek-V3-shaped target only (its NextN layer is the draft), V3's widths, 8 layers
    and 16 routed experts; the parameter count the writer reports is transformers' own (meta device) and the release's
    ModelConfig reads it as MLA; the tokenizer covers V3's 129280 ids."""
    p = bench_run([os.path.join(BENCH, "real_size_models.py"), str(tmp_path / "m"), "--model", "dsv3-reduced"])
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    info = json.loads(p.stdout.strip().splitlines()[-1])
    assert set(info) == {"target", "model", "seconds"}
    assert [f for f in os.listdir(tmp_path / "m") if not f.startswith(".")] == ["target"]
    tgt = json.load(open(tmp_path / "m" / "target" / "config.json"))
    assert {k: tgt[k] for k in DSV3} == DSV3 and tgt["architectures"] == ["DeepseekV3ForCausalLM"]
    assert tgt["num_nextn_predict_layers"] == 1 and tgt["torch_dtype"] == "bfloat16"
    assert not any(f.endswith((".safetensors", ".bin")) for f in os.listdir(tmp_path / "m" / "target"))
    d = info["model"]
    assert d["shape"] == "dsv3-reduced" and "reduced" in d["name"] and "NextN" in d["draft"]
    assert d["kv_bytes_per_token"] == 8 * (512 + 64) * 2 and d["draft_kv_bytes_per_token"] == (512 + 64) * 2
    assert 0.9 < d["draft_params_b"] < 1.2, d
    from tokenizers import Tokenizer

    assert Tokenizer.from_file(str(tmp_path / "m" / "target" / "tokenizer.json")).get_vocab_size() == 129280
    q = bench_run(["-c", MODEL_CONFIG, str(tmp_path / "m" / "target")])
    assert q.returncode == 0, q.stderr[-3000:]
    mc = json.loads(q.stdout.strip().splitlines()[-1])
    assert mc["mla"] and mc["kv_lora_rank"] == 512 and mc["vocab"] == 129280 and mc["layers"] == 8, mc
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.from_pretrained(str(tmp_path / "m" / "target"))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    n = sum(x.numel() for x in model.parameters())
    assert abs(n / 1e9 - d["target_params_b"]) <= 0.005, (n, d["target_params_b"])
    assert len(model.model.layers) == 8 and type(model.model.layers[3].mlp).__name__.endswith("MoE")
    assert not type(model.model.layers[2].mlp).__name__.endswith("MoE")


@requires_sglang
def test_plan_dsv3_reduced_mtp_on_both_sides():
    """``--real-size-model dsv3-reduced``: ``mtp-chain`` by default, served as a DeepSeek user does (EAGLE with no
    draft path, SGLang's chain 3 / 1 / 4), the user invocation's flags only, every one known to the release; the
    Llama configurations are refused for it, and ``mtp-chain`` for the Llama shapes, each naming what fits."""
    out = dry_run("--real-size-model", "dsv3-reduced")
    servers = server_lines(out)
    assert list(servers) == ["mtp-chain"], out
    known = release_server_flags() | {"--specv2-fixes"}
    user = USER_INVOCATION_FLAGS - {"--speculative-draft-model-path"}
    assert set(servers["mtp-chain"]) == {"stock", "plugin"}, servers
    for side, argv in servers["mtp-chain"].items():
        assert argv[0] == f"{ENV}=3.0" and flag(argv, "--model-path").endswith("-dsv3-reduced/target")
        assert flag(argv, "--speculative-algorithm") == "EAGLE" and "--speculative-draft-model-path" not in argv
        assert (flag(argv, "--speculative-num-steps"), flag(argv, "--speculative-eagle-topk"),
                flag(argv, "--speculative-num-draft-tokens")) == ("3", "1", "4")
        assert flag(argv, "--load-format") == "dummy" and flag(argv, "--speculative-draft-load-format") == "dummy"
        assert set(a for a in argv if a.startswith("--")) == user, (side, argv)
        assert not [a for a in argv if a.startswith("--") and a not in known]
    assert "DeepSeek-V3-shaped, reduced" in out and "fits an H200" in out
    for args, word in ((["--real-size-model", "dsv3-reduced", "--configs", "tree-topk4"], "mtp-chain"),
                       (["--configs", "mtp-chain"], "eagle3-topk1")):
        bad = bench_run([os.path.join(BENCH, "serving.py"), "--real-size", "--dry-run", *args])
        assert bad.returncode != 0 and "cannot serve" in bad.stderr and word in bad.stderr, bad.stderr[-2000:]

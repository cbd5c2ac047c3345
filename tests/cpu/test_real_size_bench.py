"""The real-size serving benchmark on CPU (issue "Tree drafting at real size: measure it right"): the plan of
``bench/serving.py --real-size`` (dummy-load flags, SGLANG_SIMULATE_ACC_LEN on both servers, configurations,
concurrency list, every server flag known to the release's parser), the 8B-shaped model writer
(``bench/real_size_models.py``), the harness end to end against fake servers in real-size mode, and the report
writer (``bench/real_size_report.py``) on synthetic results: the schema of docs/bench/real-size-latest.json."""

import ast
import copy
import json
import os
import re
import statistics
import subprocess
import sys

import pytest

from conftest import ROOT, child_env, requires_sglang
from sglang_specv2_fixes import installed

BENCH = os.path.join(ROOT, "bench")
ENV = "SGLANG_SIMULATE_ACC_LEN"
REAL = ("eagle3-topk1", "tree-topk4", "tree-topk8")
SPEC = {"eagle3-topk1": (3, 1, 4), "tree-topk4": (3, 4, 8), "tree-topk8": (3, 8, 16)}
SCHEMA_TOP = {"device", "date", "commit", "model", "acc_len", "points"}
SCHEMA_POINT = {"release", "config", "concurrency", "plugin_over_stock", "pairs", "stock_tok_s", "plugin_tok_s"}


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


def release_server_flags():
    """Every --flag SGLang's ServerArgs parser of the release on PYTHONPATH defines (read from its source)."""
    src = open(os.path.join(installed.sglang_root(), "srt", "server_args.py")).read()
    flags = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    return flags


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
            assert (flag(argv, "--page-size") == "1") if name.startswith("tree") else "--page-size" not in argv
            assert int(flag(argv, "--cuda-graph-max-bs")) >= 32 and "32" in argv[argv.index("--cuda-graph-bs") + 1:]
            assert argv.count("--cuda-graph-bs") == 1 and argv.count("--mem-fraction-static") == 1
            assert float(flag(argv, "--mem-fraction-static")) >= 0.6
            assert 16384 <= int(flag(argv, "--max-total-tokens")) <= 65536
            assert flag(argv, "--attention-backend") == "triton"
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
def test_model_writer_8b_shapes_and_full_vocab_tokenizer(tmp_path):
    p = bench_run([os.path.join(BENCH, "real_size_models.py"), str(tmp_path / "m")])
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    info = json.loads(p.stdout.strip().splitlines()[-1])
    tgt = json.load(open(tmp_path / "m" / "target" / "config.json"))
    drf = json.load(open(tmp_path / "m" / "eagle3" / "config.json"))
    shape = dict(hidden_size=4096, num_hidden_layers=32, intermediate_size=14336, num_attention_heads=32,
                 num_key_value_heads=8, head_dim=128, vocab_size=128256)
    assert {k: tgt[k] for k in shape} == shape and tgt["architectures"] == ["LlamaForCausalLM"]
    assert tgt["tie_word_embeddings"] is False and tgt["torch_dtype"] == "bfloat16"
    assert drf["architectures"] == ["LlamaForCausalLMEagle3"] and drf["num_hidden_layers"] == 1
    assert {k: drf[k] for k in shape if k != "num_hidden_layers"} == {k: v for k, v in shape.items() if k != "num_hidden_layers"}
    assert drf["draft_vocab_size"] == 32000
    assert tgt["max_position_embeddings"] >= 200 + 256 + 64 and drf["max_position_embeddings"] == tgt["max_position_embeddings"]
    assert info["model"]["target_params_b"] == pytest.approx(8.03, abs=0.01)
    assert not any(f.endswith((".safetensors", ".bin")) for d in ("target", "eagle3") for f in os.listdir(tmp_path / "m" / d))
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
import serving, serving_selftest as st
from sglang_specv2_fixes.testing import standins
standins.use_datasets_shim()
st.install_fakes(D)
seen = []
fake = serving.launch_process
def launch(model, url, other_args, timeout, sink):
    seen.append(dict(env=os.environ.get("SGLANG_SIMULATE_ACC_LEN"), args=list(other_args), model=model))
    return fake(model, url, other_args, timeout, sink)
serving.launch_process = launch
rc = serving.main(["--real-size", "--out", os.path.join(D, "run"), "--configs", "eagle3-topk1,tree-topk8",
                   "--concurrency", "1", "4", "--point-seconds", "0.5", "--output-len", "24", "--input-len", "16",
                   "--budget-s", "200", "--first-launch-s", "1", "--later-launch-s", "1", "--base-port", "29600",
                   "--acc-len", "2.5", "--no-plots"])
json.dump(dict(rc=rc, seen=seen, env_after=os.environ.get("SGLANG_SIMULATE_ACC_LEN")), open(os.path.join(D, "seen.json"), "w"))
"""


@requires_sglang
def test_harness_real_size_mode_end_to_end_against_fake_servers(tmp_path):
    pytest.importorskip("aiohttp")
    code = f"ROOT = {ROOT!r}\nD = {str(tmp_path)!r}\n" + E2E
    p = bench_run(["-c", code], timeout=400)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    seen = json.load(open(tmp_path / "seen.json"))
    assert seen["rc"] == 0 and seen["env_after"] is None, "the harness restores its environment"
    assert len(seen["seen"]) == 4 and all(s["env"] == "2.5" for s in seen["seen"]), "SGLANG_SIMULATE_ACC_LEN on every server"
    assert all("--load-format" in s["args"] and "--speculative-draft-load-format" in s["args"] for s in seen["seen"])
    r = json.load(open(tmp_path / "run" / "results.json"))
    m = r["meta"]
    assert m["complete"] is True and m["points_failed"] == 0, m.get("stop_reason")
    assert m["real_size"]["acc_len"] == 2.5 and m["real_size"]["env"] == {ENV: "2.5"}
    assert m["real_size"]["model"]["hidden_size"] == 4096 and m["real_size"]["model"]["num_hidden_layers"] == 32
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


# ------------------------------------------------------------------------------------------------ the report
def _points(c, reps, stock, plugin, accept=3.0, fail=()):
    pts = []
    for rep in range(reps):
        order = ("stock", "plugin") if rep % 2 == 0 else ("plugin", "stock")
        for k, side in enumerate(order):
            tput = (stock if side == "stock" else plugin)[rep]
            ok = (side, rep) not in fail
            pts.append(dict(side=side, concurrency=c, rep=rep, order=k, num_prompts=8, ok=ok,
                            error=None if ok else "synthetic failure", output_throughput=tput if ok else None,
                            median_tpot_ms=1000.0 / tput, p99_tpot_ms=1.2e3 / tput, median_itl_ms=1000.0 / tput,
                            p99_itl_ms=1.5e3 / tput, median_ttft_ms=50.0, accept_length=accept))
    return pts


SIDES_TREE = {"stock": {"speculative": True, "overlap_schedule": False, "fixes": {}, "launch_s": 90},
              "plugin": {"speculative": True, "overlap_schedule": True, "fixes": {"tree-drafting": "applied"}, "launch_s": 95}}
SIDES_CHAIN = {s: {"speculative": True, "overlap_schedule": True, "fixes": {}, "launch_s": 80} for s in ("stock", "plugin")}


def synthetic(release, configs, date="2026-11-23 08:00 UTC", acc=3.0, commit="abc123def456", device="NVIDIA H200"):
    out = {"schema": "specv2-bench-serving/1", "configs": {},
           "meta": {"date": date, "device": device, "sglang": release, "torch": "2.9", "complete": True,
                    "stop_reason": None, "cuda_visible_devices": "0", "args": {"input_len": 200, "output_len": 256},
                    "common_server_args": ["--load-format", "dummy"],
                    "real_size": {"acc_len": acc, "env": {ENV: str(acc)}, "commit": commit,
                                  "model": {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 128256}}}}
    for name, pts in configs.items():
        out["configs"][name] = {"about": name, "points": pts, "greedy": {"skipped": "dummy weights", "identical": None},
                                "sides": copy.deepcopy(SIDES_TREE if name.startswith("tree") else SIDES_CHAIN)}
    return out


def test_report_schema_medians_and_merging(tmp_path):
    sys.path.insert(0, BENCH)
    try:
        import real_size_report
    finally:
        sys.path.remove(BENCH)
    s8, p8 = [100.0, 110.0, 90.0], [130.0, 120.0, 126.0]          # ratios 1.3, 1.0909, 1.4 -> median 1.3
    a = synthetic("0.5.11", {
        "tree-topk8": _points(1, 3, s8, p8) + _points(8, 3, [400.0] * 3, [380.0, 420.0, 400.0]),
        "eagle3-topk1": _points(1, 3, [100.0] * 3, [101.0, 99.0, 100.0]),
        # cut by the budget: one pair at c=32, a failed plugin point in rep 1
        "tree-topk4": _points(32, 2, [1000.0, 1000.0], [900.0, 950.0], fail={("plugin", 1)}),
    })
    b = synthetic("0.5.11", {"tree-topk4": _points(32, 3, [1000.0, 1010.0, 990.0], [1100.0, 1111.0, 1089.0])},
                  date="2026-11-23 09:00 UTC")  # the re-run of the cut configuration, alone
    c = synthetic("0.5.12.post1", {"tree-topk8": _points(1, 4, [100.0, 100.0, 100.0, 100.0], [120.0, 125.0, 130.0, 80.0],
                                                         accept=2.2)}, device="NVIDIA H100 80GB HBM3", commit=None)
    paths = []
    for k, r in enumerate((a, b, c)):
        paths.append(str(tmp_path / f"r{k}.json"))
        json.dump(r, open(paths[-1], "w"))
    rc = real_size_report.main(["--out-dir", str(tmp_path / "out"), *paths])
    assert rc == 0
    summary = json.load(open(tmp_path / "out" / "real-size-latest.json"))
    assert set(summary) == SCHEMA_TOP
    assert summary["model"] == {"hidden_size": 4096, "num_hidden_layers": 32} and summary["acc_len"] == 3.0
    assert summary["device"] == "NVIDIA H200 + NVIDIA H100 80GB HBM3" and summary["date"] == "2026-11-23 09:00 UTC"
    assert summary["commit"] == "abc123def456"
    for p in summary["points"]:
        assert set(p) == SCHEMA_POINT
        assert isinstance(p["pairs"], int) and p["pairs"] >= 1
        assert all(isinstance(p[k], float) for k in ("plugin_over_stock", "stock_tok_s", "plugin_tok_s"))
    pts = {(p["release"], p["config"], p["concurrency"]): p for p in summary["points"]}
    assert [k for k in pts] == [("0.5.11", "eagle3-topk1", 1), ("0.5.11", "tree-topk4", 32), ("0.5.11", "tree-topk8", 1),
                                ("0.5.11", "tree-topk8", 8), ("0.5.12.post1", "tree-topk8", 1)]
    assert {k[1] for k in pts if k[1].startswith("tree")} == {"tree-topk4", "tree-topk8"}
    t8 = pts[("0.5.11", "tree-topk8", 1)]
    assert t8["pairs"] == 3 and t8["plugin_over_stock"] == round(statistics.median(x / y for x, y in zip(p8, s8)), 3) == 1.3
    assert t8["stock_tok_s"] == 100.0 and t8["plugin_tok_s"] == 126.0
    t4 = pts[("0.5.11", "tree-topk4", 32)]
    assert t4["pairs"] == 3 and t4["plugin_over_stock"] == 1.1, "the re-run with more pairs replaces the cut run"
    assert pts[("0.5.12.post1", "tree-topk8", 1)]["pairs"] == 4
    assert pts[("0.5.12.post1", "tree-topk8", 1)]["plugin_over_stock"] == round(statistics.median([1.2, 1.25, 1.3, 0.8]), 3)
    md = open(tmp_path / "out" / "real-size-latest.md").read()
    assert "| 0.5.11 | tree-topk8 | 1 | 3 | 100.0 | 126.0 | **1.300** |" in md
    assert "mean accept length 2.20, not the simulated 3.0" in md  # the sanity check
    assert f"{ENV}=3.0" in md and "Tree drafting goal" in md
    png = tmp_path / "out" / "real-size-latest.png"
    try:
        import matplotlib  # noqa: F401
        assert png.exists() and png.stat().st_size > 10000
    except ImportError:
        assert not png.exists()

    # a run that took the wrong path is called out
    bad = copy.deepcopy(a)
    bad["configs"]["tree-topk8"]["sides"]["plugin"]["overlap_schedule"] = False
    json.dump(bad, open(tmp_path / "bad.json", "w"))
    real_size_report.main(["--out-dir", str(tmp_path / "bad"), str(tmp_path / "bad.json")])
    assert "tree-topk8 plugin: spec v1 (overlap off), expected spec v2 (overlap)" in open(tmp_path / "bad" / "real-size-latest.md").read()
    # refused: a tiny-model run, and runs with different simulated acceptance
    tiny = copy.deepcopy(a)
    del tiny["meta"]["real_size"]
    json.dump(tiny, open(tmp_path / "tiny.json", "w"))
    with pytest.raises(SystemExit, match="not a real-size run"):
        real_size_report.main(["--out-dir", str(tmp_path / "x"), str(tmp_path / "tiny.json")])
    json.dump(synthetic("0.5.12.post1", {"tree-topk4": _points(1, 3, [1.0] * 3, [1.0] * 3)}, acc=2.0),
              open(tmp_path / "acc2.json", "w"))
    with pytest.raises(SystemExit, match="acc_len"):
        real_size_report.main(["--out-dir", str(tmp_path / "x"), paths[0], str(tmp_path / "acc2.json")])
    # no recorded commit: --commit fills it in
    json.dump(c, open(tmp_path / "c.json", "w"))
    real_size_report.main(["--out-dir", str(tmp_path / "c"), "--commit", "feedbeef", str(tmp_path / "c.json")])
    assert json.load(open(tmp_path / "c" / "real-size-latest.json"))["commit"] == "feedbeef"


def test_gpu_driver_script():
    """bench/gpu_real_size.sh: valid bash, runs serving.py in real-size mode through gpu_bench.sh per release and GPU,
    the report into $OUT, within the call's budget."""
    path = os.path.join(BENCH, "gpu_real_size.sh")
    assert subprocess.run(["bash", "-n", path]).returncode == 0
    src = open(path).read()
    assert "bash bench/gpu_bench.sh \"$v\" --real-size" in src and "CUDA_VISIBLE_DEVICES=$g" in src
    assert "bench/real_size_report.py --out-dir \"$OUTROOT\"" in src and "bench/real_size_models.py" in src
    assert "BENCH_TOTAL_S=" in src and "REAL_SIZE_TOTAL_S:-560" in src

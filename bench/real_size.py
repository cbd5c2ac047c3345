"""``bench/serving.py --real-size``: the serving benchmark on real-size shapes with dummy weights.

What the mode changes (the rest is serving.py's: both sides up together, alternating a/b pairs, the budget, the
outputs): an 8B- (``--real-size-model 8b``, default) or 70B-shaped Llama target + a 1-layer EAGLE3 draft of
``bench/real_size_models.py`` (config + tokenizer) served with dummy weights, or (``dsv3-reduced``) a
DeepSeek-V3-shaped target reduced in layers and experts with its NextN layer as the MTP draft (configuration
``mtp-chain``); ``--real-size-tp N`` adds ``--tp-size N`` to both servers (sharing the same N GPUs);
``SGLANG_SIMULATE_ACC_LEN`` (``--acc-len``, default 3.0) in both
servers' environment, since dummy weights accept nothing; configurations ``eagle3-topk1``, ``tree-topk4``,
``tree-topk8`` (``nospec`` and ``default``, the invocation without spec-shape or backend flags, on request);
200 input / 256 output tokens, 3 pairs per point; no greedy identity check (the tiny real-weight runs keep it).

Server flags (``--invocation``): ``user`` (default) serves each side as a user would: the model, the speculative
settings, ``--attention-backend triton`` (left out by ``default``), dummy weights and the KV pool
(``--max-total-tokens``, equal on both sides) and nothing else, so SGLang's own defaults (piecewise CUDA graphs,
CUDA graph sizes, memory fraction, sampling and grammar backends) hold on both sides. ``harness`` adds the registered
tests' COMMON flags resized for two servers on one GPU (``--disable-piecewise-cuda-graph``, ``--cuda-graph-bs``,
``--mem-fraction-static``, ``--sampling-backend pytorch``, ``--grammar-backend none``, ``--sleep-on-idle``):
benchmark-only switches; such points are labelled ``harness`` in every summary.
Budget, memory and why the TP 2 point is the 8B shape: docs/bench/README.md. The TP 2 command (one call on
nvidia-h200-x2 with .device-bundle/both carried)::

    SPECV2_COMMIT=<hash> bash bench/gpu_real_size.sh "0.5.11 0.5.12.post1" --waves --real-size-tp 2 \
        --configs tree-topk4 --concurrency 1 8 32 --repeats 2 --point-seconds 3 --first-launch-s 120

then ``bench/real_size_report.py --out-dir docs/bench --previous PREVIOUS/real-size-latest.json RESULTS...`` with
the call's ``bench-RELEASE/results.json`` (in its real-size-out.tar.gz) keeps the TP 1 points beside the new TP 2 ones.
"""

from __future__ import annotations

import argparse
import os
import subprocess

import real_size_models  # bench/real_size_models.py (this script's folder)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

ENV_VAR = "SGLANG_SIMULATE_ACC_LEN"
DRAFT_DUMMY = ["--speculative-draft-load-format", "dummy"]
TREE = ["--page-size", "1"]  # the plugin's spec v2 tree path needs page size 1 (stock sends topk > 1 to spec v1)
INVOCATIONS = ("user", "harness")
# the user invocation: what a user passes besides the model and the speculative settings (the backend under test,
# dummy weights); the harness adds --max-total-tokens (both sides) and --tp-size N (TP > 1) to both invocations
USER_FLAGS = ["--attention-backend", "triton", "--load-format", "dummy"]

# name -> (speculative steps, topk, draft tokens) or None, extra server args (serving.CONFIGS' format)
CONFIGS = {
    "eagle3-topk1": dict(spec=(3, 1, 4), extra=list(DRAFT_DUMMY),
                         about="EAGLE3 chain, 3 steps / topk 1 / 4 tokens (control: both sides spec v2)"),
    "tree-topk4": dict(spec=(3, 4, 8), extra=DRAFT_DUMMY + TREE,
                       about="EAGLE3 tree, 3 steps / topk 4 / 8 tokens, page size 1 (stock: spec v1 fallback)"),
    "tree-topk8": dict(spec=(3, 8, 16), extra=DRAFT_DUMMY + TREE,
                       about="EAGLE3 tree, 3 steps / topk 8 / 16 tokens, page size 1 (stock: spec v1 fallback)"),
    "nospec": dict(spec=None, extra=[], about="no speculation (target only)"),
    # the DeepSeek-V3-class shape (--real-size-model dsv3-reduced): MTP, its NextN layer the draft (SGLang takes the
    # target's path for it), SGLang's chain default for these models
    "mtp-chain": dict(spec=(3, 1, 4), algorithm="EAGLE", mla=True, extra=list(DRAFT_DUMMY),
                      about="DeepSeek MTP (NextN draft from the target's checkpoint), chain 3 steps / topk 1 / "
                            "4 tokens"),
    # issue 30's default invocation: SGLang chooses the draft shape and the attention backend (fa3 for Llama on
    # Hopper: carry the fa3 kernels, ci/gpu/lease.sh add / inst); a side's --server-args backend still wins
    "default": dict(spec="default", drop=["--attention-backend"], extra=list(DRAFT_DUMMY),
                    about="EAGLE3 with the draft path only: no step / topk / token or attention-backend flags"),
}
DEFAULT_CONFIGS = ["eagle3-topk1", "tree-topk4", "tree-topk8"]
MLA_DEFAULT_CONFIGS = ["mtp-chain"]  # --real-size-model dsv3-reduced
DEFAULTS = dict(
    configs=DEFAULT_CONFIGS, concurrency=["1", "8", "32"], repeats="3", input_len=200, output_len=256,
    point_seconds=4.0, max_total_tokens="32768",
)
# planning only (the run measures): (first launch, later launches, launch timeout) per model shape. Weights are
# initialised on the GPU (no file read), CUDA graphs for 7 batch sizes x (target verify, draft, draft extend), both
# sides starting together. 8B takes one to two minutes on an H100; 70B: ~30 s fixed + 2.5x the layers' part.
# dsv3-reduced: an estimate (8 layers of MLA + MoE; the Triton MoE kernels compile at the first start)
LAUNCH_S = {"8b": (150.0, 110.0, 420.0), "70b": (320.0, 280.0, 540.0), "dsv3-reduced": (240.0, 180.0, 540.0)}
TP_LAUNCH_S = 15.0  # tp > 1: one scheduler per rank, NCCL and custom all-reduce set-up
TP_SIZES = (1, 2, 4, 8)  # divide the 8 KV heads of both shapes
MODEL, TP = "8b", 1  # of the last parse (set_defaults): models_dir() / paths() / models() / meta() follow them
# per-GPU memory estimate (dry run): per server, CUDA context + graphs + activations (vocab 128256 logits) + NCCL
OVERHEAD_GIB = 3.0
GPU_GIB = {"H100": 78.0, "H200": 139.0}  # usable per GPU on the lent machines
# server flags replacing COMMON's tiny-model sizing. Memory: SGLang sizes the KV pool as (free after loading the
# weights) - (free before) x (1 - mem fraction); with both servers loading at once, "free after" can already lack
# the other server's ~17 GB of weights and more, so the fraction is high and the pool is capped instead:
# 32768 tokens x 128 KiB (32 layers x 8 KV heads x 128 x K/V x bf16) = 4 GiB, for 32 requests x (200 + 256 +
# draft) tokens = ~15k tokens in use. Per server: ~16.1 GB target + ~0.9 GB draft + 4.3 GB KV + graphs /
# activations: about 23 GB, two servers fit an 80 GB H100.
MEM_FRACTION = "0.7"  # and --max-total-tokens 32768 (DEFAULTS)
GRAPH_BS = ["1", "2", "4", "8", "16", "24", "32"]  # SGLang's spec default up to 32 is 20 sizes: launch time
GREEDY_SKIPPED = dict(
    skipped="real-size mode: dummy weights, acceptance simulated (SGLANG_SIMULATE_ACC_LEN): greedy text is "
            "meaningless; greedy identity is checked by the tiny real-weight runs (bench/gpu_bench.sh)",
    identical=None, mismatches=None, error=None, n_prompts=0)


def add_args(ap):
    g = ap.add_argument_group("real-size mode (bench/real_size.py)")
    g.add_argument("--real-size", action="store_true",
                   help="8B- or 70B-shaped target + EAGLE3 draft with dummy weights and simulated acceptance; configs "
                        f"{', '.join(CONFIGS)} (default {' '.join(DEFAULT_CONFIGS)})")
    g.add_argument("--real-size-model", choices=list(LAUNCH_S), default="8b",
                   help="target shape (bench/real_size_models.py; default 8b)")
    g.add_argument("--real-size-tp", type=int, choices=TP_SIZES, default=1,
                   help="--tp-size of both servers (default 1); they share the same GPUs (CUDA_VISIBLE_DEVICES)")
    g.add_argument("--invocation", choices=INVOCATIONS, default="user",
                   help="user (default): the flags a user passes and the KV pool only; harness: plus the registered "
                        "tests' COMMON flags (benchmark-only switches such as --disable-piecewise-cuda-graph)")
    g.add_argument("--acc-len", type=float, default=3.0,
                   help=f"{ENV_VAR} of both servers in --real-size mode (default 3.0)")


def pre_parse(argv):
    """--real-size, --real-size-model and --real-size-tp, before the real parser is built (the mode decides the
    configurations, the model and TP size the launch estimates)."""
    ap = argparse.ArgumentParser(add_help=False)
    add_args(ap)
    return ap.parse_known_args(argv)[0]


def set_defaults(ap, argv=()):
    """The mode's defaults on ``ap``; the model shape and TP size of ``argv`` become MODEL and TP."""
    global MODEL, TP
    k = pre_parse(argv)
    MODEL, TP = k.real_size_model, k.real_size_tp
    first, later, timeout = LAUNCH_S[MODEL]
    extra = TP_LAUNCH_S if TP > 1 else 0.0
    ap.set_defaults(**DEFAULTS, first_launch_s=first + extra, later_launch_s=later + extra, launch_timeout=timeout)
    if real_size_models.is_mla(MODEL):
        ap.set_defaults(configs=list(MLA_DEFAULT_CONFIGS))


def wrong_family(configs, model=None):
    """The configurations of ``configs`` the model shape cannot serve (EAGLE3 ones need the Llama shapes' draft, MTP
    ones a DeepSeek-V3-class target); ``nospec`` serves both."""
    mla = real_size_models.is_mla(model or MODEL)
    return [c for c in configs if CONFIGS[c]["spec"] and bool(CONFIGS[c].get("mla")) != mla]


def models_dir():
    return real_size_models.default_dir(MODEL)


def paths():
    return {n: os.path.join(models_dir(), n) for n in real_size_models.model_names(MODEL)}


def models():
    return real_size_models.build(models_dir(), MODEL)


def replace(args, flag, values):
    """``args`` with ``flag`` and the values after it (up to the next ``--flag``) replaced by ``values``."""
    out, i = [], 0
    while i < len(args):
        if args[i] == flag:
            i += 1
            while i < len(args) and not str(args[i]).startswith("--"):
                i += 1
            continue
        out.append(args[i])
        i += 1
    return out + ([flag] + list(values) if values is not None else [])


def invocation(a):
    return getattr(a, "invocation", None) or "user"


def common(base, a):
    """Both sides' flags besides the model, the configuration's and the KV pool: ``--invocation user``, USER_FLAGS;
    ``harness``, the tests' COMMON flags resized for two real-size servers on the same GPU(s), with dummy weights; at
    TP N ``--tp-size N`` (the same on both sides)."""
    if invocation(a) == "user":
        return list(USER_FLAGS) + (["--tp-size", str(a.real_size_tp)] if int(a.real_size_tp) != 1 else [])
    out = replace(list(base), "--mem-fraction-static", [MEM_FRACTION])
    out = replace(out, "--cuda-graph-bs", GRAPH_BS)
    out = replace(out, "--cuda-graph-max-bs", [GRAPH_BS[-1]])
    out = replace(out, "--tp-size", [str(a.real_size_tp)] if int(a.real_size_tp) != 1 else None)
    return replace(out, "--load-format", ["dummy"])


def memory(a):
    """Estimated GiB per GPU with both servers up (weights, KV pool, overhead), split by tensor parallelism."""
    d = real_size_models.describe(a.real_size_model)
    tp = int(a.real_size_tp)
    draft_kv = d["draft_kv_bytes_per_token"]  # the draft's one layer
    weights = (d["target_params_b"] + d["draft_params_b"]) * 1e9 * 2 / tp / 2 ** 30
    kv = (d["kv_bytes_per_token"] + draft_kv) * int(a.max_total_tokens) / tp / 2 ** 30
    return dict(per_gpu=round(2 * (weights + kv + OVERHEAD_GIB), 1), weights=round(weights, 1), kv=round(kv, 1),
                overhead=OVERHEAD_GIB)


def fit_lines(a, total_s):
    """The dry run's verdict: does the plan fit the GPUs (memory) and the budget (time)?"""
    m = memory(a)
    mem = ", ".join(f"{'fits' if m['per_gpu'] <= cap else 'does NOT fit'} an {g} (~{cap:.0f} GiB)"
                    for g, cap in GPU_GIB.items())
    return [f"[dry-run] real-size fit: {a.real_size_model} target at TP {a.real_size_tp}, both servers on the same "
            f"{a.real_size_tp} GPU(s): ~{m['per_gpu']:.0f} GiB per GPU (per server {m['weights']:.1f} GiB weights + "
            f"{m['kv']:.1f} GiB KV pool + ~{m['overhead']:.0f} GiB context/graphs/activations): {mem}",
            f"[dry-run] real-size fit: ~{total_s:.0f}s planned for a {a.budget_s:.0f}s budget: "
            + ("fits" if total_s <= a.budget_s else "does NOT fit (the run stops cleanly at its budget: later "
                                                    "configurations / pairs are cut)")]


def env(a):
    return {ENV_VAR: repr(float(a.acc_len))}


def commit():
    """The commit the run measured: $SPECV2_COMMIT (the device copy has no .git), else git's (``-dirty``: changes to
    tracked files)."""
    try:
        return os.environ.get("SPECV2_COMMIT") or subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12", "--exclude=*"], cwd=ROOT, capture_output=True,
            text=True, timeout=20).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def meta(a):
    return dict(acc_len=float(a.acc_len), env=env(a), env_on="both servers (their launch environment)",
                invocation=invocation(a),
                model=real_size_models.describe(a.real_size_model), tp=int(a.real_size_tp),
                gpu_memory_estimate_gib=memory(a)["per_gpu"], models_dir=models_dir(), commit=commit(),
                load_format="dummy (target and draft)", greedy=GREEDY_SKIPPED["skipped"])

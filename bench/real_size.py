"""``bench/serving.py --real-size``: the serving benchmark on real-size model shapes with dummy weights.

What the mode changes (everything else is serving.py's machinery: both sides launched together, stock/plugin
pairs alternating, the budget, results.json / results.md / plots):

* models: an 8B-shaped Llama target + a 1-layer EAGLE3 draft of ``bench/real_size_models.py`` (config + tokenizer,
  no weights), served with ``--load-format dummy`` and ``--speculative-draft-load-format dummy``;
* acceptance: ``SGLANG_SIMULATE_ACC_LEN`` (``--acc-len``, default 3.0) in the environment of both servers (SGLang
  reads it at import, in the scheduler process): dummy weights accept nothing, so verification is replaced by
  SGLang's own simulation (``generate_simulated_accept_index``, method ``match-expected``) on both sides;
* configurations: ``eagle3-topk1`` (control), ``tree-topk4``, ``tree-topk8`` (``nospec`` on request);
* server flags: the tests' COMMON with a KV pool and static memory fraction for two 8B servers on one GPU (80 GB
  at worst), CUDA graphs up to batch 32;
* defaults: 200 input / 256 output tokens, concurrency 1 8 32, 3 pairs per point;
* the greedy identity check is skipped (dummy weights: the text is meaningless; ``--acc-len`` fixes what is
  accepted) and the results say so; the tiny real-weight runs (``bench/gpu_bench.sh``) keep checking it.

Budget (one device call: at most 600 s, ``bench/gpu_real_size.sh`` gives the parts 560 s less its preparation and
30 s for the report; estimates, the run measures and cuts cleanly at its budget): a launch of both 8B servers
together ~100-150 s (dummy weights are initialised on the GPU; 7 CUDA graph sizes; the first launch on a machine
also compiles the triton kernels), warm-up + calibration ~10 s, a point ``--point-seconds`` + ~3.5 s
(bench_serving's own warm-up request and cache flush), so one configuration with 3 pairs x 3 concurrencies is
~150 + 10 + 18 x 7.5 = ~300 s at ``--point-seconds 4``: one configuration per GPU fits one call, three do not
(~770 s, the dry run prints this estimate). Hence ``gpu_real_size.sh ... --split "eagle3-topk1 tree-topk4
tree-topk8"`` (3 GPUs per release, nvidia-h200-x8 for two releases, one call), or one configuration per call with
one GPU per release (nvidia-h200-x2, three calls) and ``bench/real_size_report.py`` over all the calls' results.
"""

from __future__ import annotations

import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

ENV_VAR = "SGLANG_SIMULATE_ACC_LEN"
DRAFT_DUMMY = ["--speculative-draft-load-format", "dummy"]
TREE = ["--page-size", "1"]  # the plugin's spec v2 tree path needs page size 1 (stock sends topk > 1 to spec v1)

# name -> (speculative steps, topk, draft tokens) or None, extra server args (serving.CONFIGS' format)
CONFIGS = {
    "eagle3-topk1": dict(spec=(3, 1, 4), extra=list(DRAFT_DUMMY),
                         about="EAGLE3 chain, 3 steps / topk 1 / 4 tokens (control: both sides spec v2)"),
    "tree-topk4": dict(spec=(3, 4, 8), extra=DRAFT_DUMMY + TREE,
                       about="EAGLE3 tree, 3 steps / topk 4 / 8 tokens, page size 1 (stock: spec v1 fallback)"),
    "tree-topk8": dict(spec=(3, 8, 16), extra=DRAFT_DUMMY + TREE,
                       about="EAGLE3 tree, 3 steps / topk 8 / 16 tokens, page size 1 (stock: spec v1 fallback)"),
    "nospec": dict(spec=None, extra=[], about="no speculation (target only)"),
}
DEFAULT_CONFIGS = ["eagle3-topk1", "tree-topk4", "tree-topk8"]
DEFAULTS = dict(
    configs=DEFAULT_CONFIGS, concurrency=["1", "8", "32"], repeats="3", input_len=200, output_len=256,
    point_seconds=4.0,
    # planning only (the run measures): weights are initialised on the GPU (no file read), CUDA graphs for 7 batch
    # sizes x (target verify, draft, draft extend) of an 8B model, both sides starting together
    first_launch_s=150.0, later_launch_s=110.0, launch_timeout=420.0,
)
# server flags replacing COMMON's tiny-model sizing. Memory: SGLang sizes the KV pool as (free after loading the
# weights) - (free before) x (1 - mem fraction); with both servers loading at once, "free after" can already lack
# the other server's ~17 GB of weights and more, so the fraction is high and the pool is capped instead:
# 32768 tokens x 128 KiB (32 layers x 8 KV heads x 128 x K/V x bf16) = 4 GiB, for 32 requests x (200 + 256 +
# draft) tokens = ~15k tokens in use. Per server: ~16.1 GB target + ~0.9 GB draft + 4.3 GB KV + graphs /
# activations: about 23 GB, two servers fit an 80 GB H100.
MEM_FRACTION = "0.7"
MAX_TOTAL_TOKENS = "32768"
GRAPH_BS = ["1", "2", "4", "8", "16", "24", "32"]  # SGLang's spec default up to 32 is 20 sizes: launch time
GREEDY_SKIPPED = dict(
    skipped="real-size mode: dummy weights, acceptance simulated (SGLANG_SIMULATE_ACC_LEN): greedy text is "
            "meaningless; greedy identity is checked by the tiny real-weight runs (bench/gpu_bench.sh)",
    identical=None, mismatches=None, error=None, n_prompts=0)


def add_args(ap):
    g = ap.add_argument_group("real-size mode (bench/real_size.py)")
    g.add_argument("--real-size", action="store_true",
                   help="8B-shaped target + EAGLE3 draft with dummy weights and simulated acceptance; configs "
                        f"{', '.join(CONFIGS)} (default {' '.join(DEFAULT_CONFIGS)})")
    g.add_argument("--acc-len", type=float, default=3.0,
                   help=f"{ENV_VAR} of both servers in --real-size mode (default 3.0)")
    g.add_argument("--real-size-mem-fraction", default=MEM_FRACTION, help=f"--mem-fraction-static (default {MEM_FRACTION})")
    g.add_argument("--real-size-max-total-tokens", default=MAX_TOTAL_TOKENS,
                   help=f"--max-total-tokens (default {MAX_TOTAL_TOKENS})")
    g.add_argument("--real-size-graph-bs", default=",".join(GRAPH_BS),
                   help=f"--cuda-graph-bs, comma separated (default {','.join(GRAPH_BS)}; its max is --cuda-graph-max-bs)")


def pre_parse(argv):
    """Only --real-size, before the real parser is built (the mode decides the configurations and defaults)."""
    import argparse

    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--real-size", action="store_true")
    return ap.parse_known_args(argv)[0].real_size


def set_defaults(ap):
    ap.set_defaults(**DEFAULTS)


def models_dir():
    import real_size_models

    return real_size_models.default_dir()


def paths():
    return {n: os.path.join(models_dir(), n) for n in ("target", "eagle3")}


def models():
    import real_size_models

    return real_size_models.build(models_dir())


def _replace(args, flag, values):
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


def common(base, a):
    """The tests' COMMON flags resized for two 8B servers on one GPU, with dummy weights."""
    bs = [x for x in str(a.real_size_graph_bs).split(",") if x.strip()]
    out = list(base)
    out = _replace(out, "--mem-fraction-static", [str(a.real_size_mem_fraction)])
    out = _replace(out, "--max-total-tokens", [str(a.real_size_max_total_tokens)])
    out = _replace(out, "--cuda-graph-bs", bs)
    out = _replace(out, "--cuda-graph-max-bs", [str(max(int(x) for x in bs))])
    return _replace(out, "--load-format", ["dummy"])


def env(a):
    return {ENV_VAR: repr(float(a.acc_len))}


def env_prefix(a):
    return " ".join(f"{k}={v}" for k, v in env(a).items()) + " "


def commit():
    """The commit the run measured: $SPECV2_COMMIT (the device copy has no .git), else git in the checkout."""
    c = os.environ.get("SPECV2_COMMIT")
    if c:
        return c
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=20)
        if head.returncode:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=20).stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except Exception:  # noqa: BLE001
        return None


def meta(a):
    import real_size_models

    return dict(acc_len=float(a.acc_len), env=env(a), env_on="both servers (inherited from the harness)",
                model=real_size_models.describe(), models_dir=models_dir(), commit=commit(),
                load_format="dummy (target and draft)", greedy=GREEDY_SKIPPED["skipped"])

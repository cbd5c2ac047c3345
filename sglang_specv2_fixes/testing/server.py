"""Launch the real ``sglang.launch_server`` with the tiny real-weight models for the registered GPU tests: A/B mode
from ``SPECV2_AB`` (off|auto), ports from ``SPECV2_PORT`` (the runner gives each run its own)."""

import os

from . import standins
from .config import COMMON, MODELS_DIR, nccl_args  # noqa: F401  (the launch flags, re-exported for the rows)

standins.use_datasets_shim()  # sglang.test.test_utils imports sglang.bench_serving, which imports datasets

from sglang.srt.utils import kill_process_tree  # noqa: E402
from sglang.test.test_utils import DEFAULT_URL_FOR_TEST, popen_launch_server  # noqa: E402

from .tiny_models import llama as tiny_models  # noqa: E402

# runs of one file in parallel (stock and plugin) use different ports: SPECV2_PORT from the runner
PORT = int(os.environ.get("SPECV2_PORT", DEFAULT_URL_FOR_TEST.rsplit(":", 1)[1]))
URL = f"http://127.0.0.1:{PORT}"
REF_URL = f"http://127.0.0.1:{PORT + 500}"  # target-only reference server
TIMEOUT = 90  # per HTTP request: a dead scheduler must fail the test, not hang it
AB = os.environ.get("SPECV2_AB", "auto")


def models():
    return tiny_models.build_all(MODELS_DIR)


def eagle3_args(steps=3, topk=1, tokens=4, algorithm="EAGLE3", draft="eagle3", draft_path=None):
    """The speculative flags: ``draft`` names one of the tiny models, ``draft_path`` gives a draft directory instead
    (e.g. a detector draft, ``tiny_models.detectors``); ``steps=None`` leaves the spec shape to SGLang."""
    args = ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", draft_path or models()[draft]]
    if steps is not None:
        args += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
                 "--speculative-num-draft-tokens", str(tokens)]
    return args


def mimo_multi_layer_args(path, max_running):
    """Multi-layer EAGLE v2 on the tiny MiMo-V2-Flash shape at ``path`` (``tiny_models.mimo_v2``): the checkpoint is
    target and MTP draft, dummy weights, EAGLE 3 steps / topk 1 / 4 tokens, fa3 (SGLang turns
    ``--enable-multi-layer-eagle`` on by itself for MiMo-V2 with EAGLE; flashinfer refuses its ``sinks=``)."""
    return eagle3_args(3, 1, 4, algorithm="EAGLE", draft_path=path) + [
        "--load-format", "dummy", "--speculative-draft-load-format", "dummy",
        "--max-running-requests", str(max_running), "--attention-backend", "fa3"]


def launch(extra_args, env=None, target=None, common=None, fixes=None, log=None):
    """Start the server under test (``target``: a model dir, default the tiny Llama target; ``common``: the
    shared flags, default COMMON; ``fixes``: the ``--specv2-fixes`` selection, default ``AB``; ``log``: a file the
    server's stdout and stderr are also written to, as they reach the test's own output)."""
    m = models()
    full_env = {"SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY": "1"}
    full_env.update(env or {})
    # the A/B switch goes through the plugin's own CLI flag on `sglang serve` (popen_launch_server's command)
    # --decode-log-interval 1: the scheduler's accept-length totals (behind /server_info) are only flushed at
    # log steps, so a short test would otherwise read none
    return popen_launch_server(target or m["target"], URL, timeout=600,
                               other_args=(COMMON if common is None else common) + nccl_args(URL, extra_args)
                               + ["--decode-log-interval", "1"] + list(extra_args)
                               + ["--specv2-fixes", fixes or AB],
                               env=full_env, return_stdout_stderr=(log, log) if log is not None else None)


def stop(process):
    if process is not None:
        kill_process_tree(process.pid)

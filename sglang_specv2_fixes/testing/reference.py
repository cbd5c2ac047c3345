"""The target-only reference of the registered GPU tests: what a server without speculation (``--specv2-fixes
off``, no draft) answers for the same prompts, launched in the background (``prefetch_reference``) and cached on
disk per machine and release (``reference_outputs``)."""

import concurrent.futures
import os

from .server import REF_URL, models, stop  # first: it puts the datasets shim in place for sglang.test.test_utils
from .client import output_ids, send
from .config import COMMON, MODELS_DIR, nccl_args

from sglang.test.test_utils import popen_launch_server  # noqa: E402

_REF_POOL = None
_REF_PENDING = {}


def _payload(p, max_new_tokens, request):
    """The /generate body ``client.generate(p, max_new_tokens, **request)`` sends."""
    body = {"input_ids": p, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}}
    body.update(request)
    return body


def _reference_key(payloads, target, extra_args, keep, common=None):
    import hashlib
    import json

    import sglang

    # per release: each release's rows compare against that release's own target-only output
    key_parts = [payloads, target, list(extra_args), sglang.__version__, keep.__qualname__]
    if common is not None:  # shared flags other than COMMON (the key of a COMMON reference is as it always was)
        key_parts.append(list(common))
    return hashlib.sha256(json.dumps(key_parts, sort_keys=True).encode()).hexdigest()[:16]


def prefetch_responses(payloads, target=None, extra_args=(), keep=output_ids, common=None):
    """Start ``reference_responses(...)`` (same arguments) in a background thread and return at once: called
    *before* launching the server under test, the target-only launch overlaps that server's start instead of
    following it. A later ``reference_responses`` with the same arguments waits for this one."""
    global _REF_POOL
    target = target or models()["target"]
    key = _reference_key(payloads, target, extra_args, keep, common)
    if key not in _REF_PENDING:
        if _REF_POOL is None:
            _REF_POOL = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="specv2-reference")  # one REF_URL
        _REF_PENDING[key] = _REF_POOL.submit(_reference, key, payloads, target, extra_args, keep, common)
    return _REF_PENDING[key]


def reference_responses(payloads, target=None, extra_args=(), keep=output_ids, common=None):
    """What a target-only server answers for the /generate bodies ``payloads``: ``keep(response)`` per body, by
    default the output ids. ``extra_args``: server flags; ``common``: the shared flags instead of COMMON (a row whose
    server drops one of them, e.g. ``config.common_with_piecewise_graph()``). Cached on disk per machine and release
    behind a file lock, so the stock and plugin runs (and the rows of one run) share a single target-only launch; a
    ``prefetch_responses`` of this process with the same arguments is waited for instead of launching again."""
    target = target or models()["target"]
    key = _reference_key(payloads, target, extra_args, keep, common)
    pending = _REF_PENDING.get(key)
    if pending is not None:
        return pending.result()
    return _reference(key, payloads, target, extra_args, keep, common)


def prefetch_reference(ps, max_new_tokens, target=None, extra_args=(), keep=output_ids, common=None, **request):
    """``prefetch_responses`` of the greedy bodies ``client.generate(p, max_new_tokens, **request)`` sends."""
    return prefetch_responses([_payload(p, max_new_tokens, request) for p in ps], target, extra_args, keep, common)


def reference_outputs(ps, max_new_tokens, target=None, extra_args=(), keep=output_ids, common=None, **request):
    """``reference_responses`` of the greedy bodies ``client.generate(p, max_new_tokens, **request)`` sends for
    prompts ``ps`` (``request``: extra /generate fields, e.g. ``return_routed_experts=True``)."""
    return reference_responses([_payload(p, max_new_tokens, request) for p in ps], target, extra_args, keep, common)


def _reference(key, payloads, target, extra_args, keep, common=None):
    import fcntl
    import json

    path = os.path.join(MODELS_DIR, f"reference-{key}.json")
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        proc = popen_launch_server(target, REF_URL, timeout=600,
                                   other_args=list(COMMON if common is None else common) + nccl_args(REF_URL)
                                   + list(extra_args) + ["--specv2-fixes", "off"])
        try:
            with concurrent.futures.ThreadPoolExecutor(16) as ex:
                outs = list(ex.map(lambda body: keep(send(body, url=REF_URL)), payloads))
        finally:
            stop(proc)
        with open(path + f".{os.getpid()}", "w") as f:
            json.dump(outs, f)
        os.replace(path + f".{os.getpid()}", path)
        return outs

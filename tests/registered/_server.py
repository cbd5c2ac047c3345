"""Shared helpers for the registered GPU tests: launch the real ``sglang.launch_server`` with the tiny
real-weight models, A/B mode from ``SPECV2_AB`` (off|auto), talk to it over HTTP."""

import concurrent.futures
import os
import sys

import requests

import importlib.util

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
if importlib.util.find_spec("datasets") is None:
    sys.path.append(os.path.join(HERE, "_shims"))

from sglang.srt.utils import kill_process_tree  # noqa: E402
from sglang.test.test_utils import DEFAULT_URL_FOR_TEST, popen_launch_server  # noqa: E402

import tiny_models  # noqa: E402

# runs of one file in parallel (stock and plugin) use different ports: SPECV2_PORT from the runner
PORT = int(os.environ.get("SPECV2_PORT", DEFAULT_URL_FOR_TEST.rsplit(":", 1)[1]))
URL = f"http://127.0.0.1:{PORT}"
REF_URL = f"http://127.0.0.1:{PORT + 500}"  # target-only reference server
TIMEOUT = 90  # per HTTP request: a dead scheduler must fail the test, not hang it
AB = os.environ.get("SPECV2_AB", "auto")
MODELS_DIR = os.environ.get("SPECV2_MODELS", "/tmp/specv2-tiny-models")
COMMON = [
    "--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
    "--mem-fraction-static", os.environ.get("SPECV2_MEM_FRACTION", "0.2"), "--log-level", "info",
    # many tiny-model servers share one GPU in a matrix run: the static fraction only has to leave slack for
    # other servers' allocations during profiling; the KV pool itself is capped (a few hundred MB) and the
    # piecewise CUDA graphs (~10 s and up to ~3 GB per server, no use for these tests) are off
    "--max-total-tokens", os.environ.get("SPECV2_MAX_TOTAL_TOKENS", "131072"), "--disable-piecewise-cuda-graph",
    # an idle scheduler otherwise spins a core at 100% (its own IdleSleeper docstring): with a dozen servers up
    # at once that starved every other process of the matrix run. It sleeps only when fully idle, after the
    # idle checks (strict memory check included) ran, and wakes on the next request: busy behaviour unchanged
    "--sleep-on-idle",
    # four graph sizes instead of eight (bs 3/5/6/7 pad to the next one): half the capture time per server
    "--cuda-graph-bs", "1", "2", "4", "8",
]


def nccl_args(url):
    """A fixed torch.distributed port per server (its HTTP port + 20, inside the runner's 40-port slot): left
    unset, SGLang takes ``get_free_port()``, which races with the other servers and clients of a matrix run
    (seen: EADDRINUSE in init_process_group with ~40 servers starting on one host)."""
    return ["--nccl-port", str(int(url.rsplit(":", 1)[1]) + 20)]


def models():
    return tiny_models.build_all(MODELS_DIR)


def eagle3_args(steps=3, topk=1, tokens=4, algorithm="EAGLE3", draft="eagle3"):
    m = models()
    args = ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", m[draft]]
    if steps is not None:
        args += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
                 "--speculative-num-draft-tokens", str(tokens)]
    return args


def launch(extra_args, env=None, target=None):
    """Start the server under test (``target``: a model dir, default the tiny Llama target)."""
    m = models()
    full_env = {"SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY": "1"}
    full_env.update(env or {})
    # the A/B switch goes through the plugin's own CLI flag on `sglang serve` (popen_launch_server's command)
    # --decode-log-interval 1: the scheduler's accept-length totals (behind /server_info) are only flushed at
    # log steps, so a short test would otherwise read none
    return popen_launch_server(target or m["target"], URL, timeout=600,
                               other_args=COMMON + nccl_args(URL) + ["--decode-log-interval", "1"] + extra_args
                               + ["--specv2-fixes", AB],
                               env=full_env)


def stop(process):
    if process is not None:
        kill_process_tree(process.pid)


def generate(input_ids, max_new_tokens, url=None, **kw):
    payload = {"input_ids": input_ids, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens,
                                                           "ignore_eos": True}}
    payload.update(kw)
    r = requests.post((url or URL) + "/generate", json=payload, timeout=TIMEOUT)
    r.raise_for_status()
    return r.json()


def prompts(n, seed=0, lo=8, hi=64, vocab=1000):
    import random

    rng = random.Random(seed)
    return [[rng.randrange(16, vocab) for _ in range(rng.randrange(lo, hi))] for _ in range(n)]


def concurrent_generate(n, max_new_tokens_fn, seed=0, workers=32):
    ps = prompts(n, seed)
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        futs = [ex.submit(generate, p, max_new_tokens_fn(i)) for i, p in enumerate(ps)]
        return [f.result() for f in futs]


def server_info():
    return requests.get(URL + "/server_info", timeout=TIMEOUT).json()


def health_ok():
    try:
        return requests.get(URL + "/health", timeout=60).status_code == 200
    except requests.RequestException:
        return False


def specv2_state(info):
    """The scheduler's own view (DP rank 0) published by the plugin."""
    return info["internal_states"][0]["specv2_fixes"]


def output_ids(response):
    return response["output_ids"]


_REF_POOL = None
_REF_PENDING = {}


def _reference_key(ps, max_new_tokens, target, extra_args, keep, request):
    import hashlib
    import json

    import sglang

    # per release: each release's rows compare against that release's own target-only output
    key_parts = [ps, max_new_tokens, target, list(extra_args), sglang.__version__]
    if request or keep is not output_ids:
        key_parts += [sorted(request.items()), keep.__qualname__]
    return hashlib.sha256(json.dumps(key_parts).encode()).hexdigest()[:16]


def prefetch_reference(ps, max_new_tokens, target=None, extra_args=(), keep=output_ids, **request):
    """Start ``reference_outputs(...)`` (same arguments) in a background thread and return at once: called
    *before* launching the server under test, the target-only launch overlaps that server's start instead of
    following it. A later ``reference_outputs`` with the same arguments waits for this one."""
    global _REF_POOL
    target = target or models()["target"]
    key = _reference_key(ps, max_new_tokens, target, extra_args, keep, request)
    if key not in _REF_PENDING:
        if _REF_POOL is None:
            _REF_POOL = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="specv2-reference")  # one REF_URL
        _REF_PENDING[key] = _REF_POOL.submit(_reference, key, ps, max_new_tokens, target, extra_args, keep, request)
    return _REF_PENDING[key]


def reference_outputs(ps, max_new_tokens, target=None, extra_args=(), keep=output_ids, **request):
    """What a target-only server answers for prompts ``ps`` (greedy): ``keep(response)`` per prompt, by
    default the output ids. ``extra_args``: server flags; ``request``: extra /generate fields (e.g.
    ``return_routed_experts=True``). Cached on disk per machine and release behind a file lock, so the
    stock and plugin runs (and the rows of one run) share a single target-only launch; a ``prefetch_reference``
    of this process with the same arguments is waited for instead of launching again."""
    target = target or models()["target"]
    key = _reference_key(ps, max_new_tokens, target, extra_args, keep, request)
    pending = _REF_PENDING.get(key)
    if pending is not None:
        return pending.result()
    return _reference(key, ps, max_new_tokens, target, extra_args, keep, request)


def _reference(key, ps, max_new_tokens, target, extra_args, keep, request):
    import fcntl
    import json

    path = os.path.join(MODELS_DIR, f"reference-{key}.json")
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        proc = popen_launch_server(target, REF_URL, timeout=600,
                                   other_args=COMMON + nccl_args(REF_URL) + list(extra_args) + ["--specv2-fixes", "off"])
        try:
            with concurrent.futures.ThreadPoolExecutor(16) as ex:
                outs = list(ex.map(lambda p: keep(generate(p, max_new_tokens, url=REF_URL, **request)), ps))
        finally:
            stop(proc)
        with open(path + f".{os.getpid()}", "w") as f:
            json.dump(outs, f)
        os.replace(path + f".{os.getpid()}", path)
        return outs


def rescore_logprobs(input_ids, output_ids):
    """Prefill re-scoring: logprobs of ``output_ids`` given ``input_ids`` from one extend pass."""
    full = list(input_ids) + list(output_ids)
    payload = {"input_ids": full, "sampling_params": {"temperature": 0, "max_new_tokens": 1},
               "return_logprob": True, "logprob_start_len": len(input_ids) - 1}
    r = requests.post(URL + "/generate", json=payload, timeout=TIMEOUT)
    r.raise_for_status()
    lps = r.json()["meta_info"]["input_token_logprobs"]
    return [lp[0] for lp in lps[1:]]  # drop the logprob of the last prompt token itself


class SpecChecks:
    """Assertions shared by the speculative rows (mixin for CustomTestCase)."""

    N_REF, REF_TOKENS = 16, 48

    @classmethod
    def prefetch_target_only(cls):
        """Start the target-only launch behind ``check_greedy_equals_target_only`` now: call it in setUpClass
        before ``launch`` so the two servers start together."""
        prefetch_reference(prompts(cls.N_REF, seed=7), cls.REF_TOKENS)

    def check_greedy_equals_target_only(self):
        ps = prompts(self.N_REF, seed=7)
        ref = reference_outputs(ps, self.REF_TOKENS)
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            got = list(ex.map(lambda p: generate(p, self.REF_TOKENS)["output_ids"], ps))
        for i, (g, r) in enumerate(zip(got, ref)):
            self.assertEqual(g, r, f"prompt {i}: speculative greedy output differs from target-only")

    def check_decode_logprobs_match_prefill(self, n=6, tokens=40, tol=0.1):
        for p in prompts(n, seed=11):
            out = generate(p, tokens, return_logprob=True)
            dec = [lp[0] for lp in out["meta_info"]["output_token_logprobs"]]
            pre = rescore_logprobs(p, out["output_ids"])
            self.assertEqual(len(dec), len(pre))
            diff = max(abs(a - b) for a, b in zip(dec, pre))
            self.assertLess(diff, tol, f"decode vs prefill logprob max diff {diff}")

    def check_concurrent_load(self, n=32):
        outs = concurrent_generate(n, lambda i: 4 + (i * 13) % 90, seed=3)
        for i, o in enumerate(outs):
            self.assertEqual(o["meta_info"]["completion_tokens"], 4 + (i * 13) % 90)
        return outs

    def check_accept_length(self, minimum):
        accept = server_info()["internal_states"][0].get("avg_spec_accept_length")
        print("avg_spec_accept_length:", accept)
        self.assertIsNotNone(accept)
        self.assertGreater(accept, minimum)

    def check_alive(self):
        self.assertTrue(health_ok())
        self.assertIsNone(self.process.poll())

    def check_concurrent_abort(self, n=16, tokens=3000):
        """Abort long decodes while they run (half by rid, then the rest with abort_all): every request
        returns, the aborted ones with an abort finish reason, the rest complete exactly; the server
        stays healthy (strict memory checks would stop it on a leak)."""
        import threading
        import time
        import uuid

        ps = prompts(n, seed=5)
        rids = [f"specv2-abort-{uuid.uuid4().hex}" for _ in range(n)]
        out = {}

        def run(i):
            try:
                out[i] = generate(ps[i], tokens, rid=rids[i])
            except requests.HTTPError as e:  # an abort can surface as an HTTP error status (release-dependent)
                out[i] = {"meta_info": {"finish_reason": {"type": "abort", "http_status": e.response.status_code}}}
            except Exception as e:  # noqa: BLE001 - reported below
                out[i] = e

        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        for rid in rids[: n // 2]:
            requests.post(URL + "/abort_request", json={"rid": rid}, timeout=TIMEOUT).raise_for_status()
        time.sleep(0.2)
        requests.post(URL + "/abort_request", json={"abort_all": True}, timeout=TIMEOUT).raise_for_status()
        for t in threads:
            t.join(TIMEOUT)
        errors = [o for o in out.values() if isinstance(o, Exception)]
        self.assertEqual(len(out), n, "some aborted requests never returned")
        self.assertEqual(errors, [])
        aborted = [o for o in out.values() if (o["meta_info"].get("finish_reason") or {}).get("type") == "abort"]
        done = [o for o in out.values() if o not in aborted]
        print(f"concurrent abort: {len(aborted)} aborted, {len(done)} completed")
        self.assertGreater(len(aborted), 0, "nothing was aborted mid-decode (requests finished too early)")
        for o in done:
            self.assertEqual(o["meta_info"]["completion_tokens"], tokens)
        self.check_alive()


# ---- streaming sessions (test_streaming_sessions_*.py) ------------------------------------------------
# The HTTP API is the same in 0.5.11 and 0.5.12.x: /open_session {capacity_of_str_len, streaming} answers
# the session id; a turn is /generate with session_params {id, rid, offset, replace, drop_previous_output}
# (io_struct.SessionParams); /close_session {session_id}; /abort_request {rid}; /flush_cache?timeout=S.


def open_session(streaming=True, url=None):
    r = requests.post((url or URL) + "/open_session", json={"capacity_of_str_len": 50000, "streaming": streaming},
                      timeout=TIMEOUT)
    r.raise_for_status()
    sid = r.json()
    assert isinstance(sid, str) and sid, f"open_session answered {r.text!r}"
    return sid


def close_session(session_id, url=None):
    requests.post((url or URL) + "/close_session", json={"session_id": session_id}, timeout=TIMEOUT).raise_for_status()


def session_payload(session_id, input_ids, max_new_tokens, session=None, **kw):
    """/generate body of one greedy turn of a session; ``session`` adds session_params fields, ``kw`` top-level
    fields (rid, return_logprob, logprob_start_len, ...)."""
    payload = {"input_ids": input_ids, "session_params": {"id": session_id, **(session or {})},
               "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}}
    payload.update(kw)
    return payload


def post_generate(payload, url=None):
    """The raw /generate response (a rejected request answers 400)."""
    return requests.post((url or URL) + "/generate", json=payload, timeout=TIMEOUT)


def stream_generate(payload, on_chunk=None, url=None):
    """/generate with stream=True: every data chunk goes to ``on_chunk`` as it arrives; returns all chunks."""
    import json

    chunks = []
    with requests.post((url or URL) + "/generate", json=dict(payload, stream=True), stream=True, timeout=TIMEOUT) as r:
        r.raise_for_status()
        for line in r.iter_lines(chunk_size=None):  # each event as it arrives
            if not line.startswith(b"data:"):
                continue
            data = line[len(b"data:"):].strip()
            if data == b"[DONE]":
                break
            chunks.append(json.loads(data))
            if on_chunk is not None:
                on_chunk(chunks[-1])
    return chunks


def abort_request(rid, url=None):
    requests.post((url or URL) + "/abort_request", json={"rid": rid}, timeout=TIMEOUT).raise_for_status()


def flush_cache(timeout_s=30, url=None):
    """Flush the radix cache once the server is idle (waits up to ``timeout_s``); True on success."""
    return requests.post((url or URL) + f"/flush_cache?timeout={timeout_s}", timeout=TIMEOUT).status_code == 200


class TreeRow(SpecChecks):
    """A tree-drafting row, mixed in *before* CustomTestCase (``class T(TreeRow, CustomTestCase)``, so its
    setUpClass wins over unittest's no-op one): EAGLE3 STEPS / TOPK / TOKENS at page_size 1 with
    forced retraction. Stock falls back to spec v1 for explicit topk > 1 (asserted first); the plugin
    must serve it on spec v2 tree drafting: greedy = target-only, decode logprobs = prefill, 32
    concurrent requests, a concurrent abort, healthy afterwards."""

    STEPS = TOPK = TOKENS = MIN_ACCEPT = None

    @classmethod
    def setUpClass(cls):
        cls.prefetch_target_only()
        cls.process = launch(eagle3_args(steps=cls.STEPS, topk=cls.TOPK, tokens=cls.TOKENS) + ["--page-size", "1"],
                             env={"SGLANG_TEST_RETRACT": "1"})

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_spec_v2_tree_is_used(self):
        info = server_info()
        self.assertFalse(info["disable_overlap_schedule"], f"topk {self.TOPK} fell back to spec v1 (overlap disabled)")
        self.assertEqual(info["speculative_eagle_topk"], self.TOPK)

    def test_2_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()

    def test_3_decode_logprobs_match_prefill(self):
        self.check_decode_logprobs_match_prefill()

    def test_4_concurrent_load_with_retract(self):
        self.check_concurrent_load(32)
        self.check_accept_length(self.MIN_ACCEPT)
        self.check_alive()

    def test_5_concurrent_abort(self):
        self.check_concurrent_abort()
        self.check_greedy_equals_target_only()
        self.check_alive()


class RetractRow(SpecChecks):
    """A retract guard row, mixed in before CustomTestCase like ``TreeRow``: EAGLE3 3/1/4 on spec v2 at PAGE_SIZE with forced
    retraction (SGLANG_TEST_RETRACT); long prompts (PROMPT_LEN) split by CHUNK-sized chunked prefill
    while short requests decode; 64 concurrent mixed-length requests. ``--enable-mixed-chunk`` is
    passed and SGLang turns it off for EAGLE in these releases (asserted, so the row notices if a
    release starts mixing). Greedy output = target-only, exact completion lengths, strict memory checks."""

    PAGE_SIZE = CHUNK = PROMPT_LEN = None

    @classmethod
    def long_and_short_prompts(cls):
        lo, hi = cls.PROMPT_LEN
        return prompts(24, seed=21, lo=lo, hi=hi) + prompts(24, seed=22)

    @classmethod
    def setUpClass(cls):
        prefetch_reference(cls.long_and_short_prompts(), 40)
        cls.process = launch(
            eagle3_args(3, 1, 4) + ["--page-size", str(cls.PAGE_SIZE), "--enable-mixed-chunk",
                                    "--chunked-prefill-size", str(cls.CHUNK), "--max-running-requests", "32"],
            env={"SGLANG_TEST_RETRACT": "1"},
        )

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_config(self):
        info = server_info()
        self.assertFalse(info["disable_overlap_schedule"])  # spec v2
        self.assertEqual((info["page_size"], info["chunked_prefill_size"]), (self.PAGE_SIZE, self.CHUNK))
        self.assertFalse(info["enable_mixed_chunk"], "SGLang now mixes chunked prefill with EAGLE: extend this row")

    def test_2_long_prompts_chunked_under_retract_equal_target_only(self):
        ps = self.long_and_short_prompts()
        ref = reference_outputs(ps, 40)
        with concurrent.futures.ThreadPoolExecutor(48) as ex:
            got = list(ex.map(lambda p: generate(p, 40)["output_ids"], ps))
        for i, (g, r) in enumerate(zip(got, ref)):
            self.assertEqual(g, r, f"prompt {i} (len {len(ps[i])}): output differs from target-only")

    def test_3_concurrent_mixed_lengths(self):
        self.check_concurrent_load(64)
        self.check_accept_length(1.5)
        self.check_alive()


class SessionChecks:
    """Streaming-session checks (mixin for CustomTestCase), the scenarios of upstream's
    ``StreamingSessionKitMixin`` (sglang/test/kits/streaming_session_kit.py, in the wheel from 0.5.12) with
    token-id prompts, exact counts and HTTP timeouts. The class sets

    * KV_OFFSET: a continued turn's ``cached_tokens`` = previous turn's prompt_tokens + completion_tokens +
      KV_OFFSET when the previous turn ended on an otherwise idle server;
    * KV_SLACK: how many tokens fewer a turn may inherit when other requests were scheduled while the previous
      turn finished (overlap scheduler: the extra step that writes the last token's KV may be a prefill).
    """

    KV_OFFSET = 0
    KV_SLACK = 0
    LOGPROB_TOL = 0.1  # session turn vs the same context as a plain request (decode vs decode)

    @staticmethod
    def _ids(rng, n):
        return [rng.randrange(16, 1000) for _ in range(n)]  # never BOS (1): a session strips a leading BOS

    def _turn_ok(self, r, prev_total, n_new, max_new, inherit=True, slack=0):
        """Checks one finished turn; returns (output, prompt_tokens + completion_tokens)."""
        self.assertEqual(r.status_code, 200, r.text[:500])
        out = r.json()
        meta = out["meta_info"]
        self.assertEqual(meta["finish_reason"]["type"], "length", meta["finish_reason"])
        self.assertEqual(meta["completion_tokens"], max_new)
        self.assertEqual(meta["prompt_tokens"], prev_total + n_new, "session context = previous turns + new ids")
        if inherit:
            want = prev_total + self.KV_OFFSET
            if slack == 0:
                self.assertEqual(meta["cached_tokens"], want, f"inherited KV (previous turn total {prev_total})")
            else:
                self.assertTrue(want - slack <= meta["cached_tokens"] <= want,
                                f"inherited KV {meta['cached_tokens']} not in [{want - slack}, {want}] "
                                f"(previous turn total {prev_total})")
        return out, meta["prompt_tokens"] + meta["completion_tokens"]

    def _matches_plain(self, full_ids, out, max_new):
        """The turn (requested with return_logprob) equals the same context sent as a plain request."""
        plain = generate(full_ids, max_new, return_logprob=True)
        self.assertEqual(out["output_ids"], plain["output_ids"], "session turn != the same context sent plain")
        a = [lp[0] for lp in out["meta_info"]["output_token_logprobs"]]
        b = [lp[0] for lp in plain["meta_info"]["output_token_logprobs"]]
        self.assertEqual((len(a), len(b)), (max_new, max_new))
        diff = max(abs(x - y) for x, y in zip(a, b))
        self.assertLess(diff, self.LOGPROB_TOL, f"session vs plain logprob max diff {diff}")
        return diff

    def _post_turn(self, payload):
        """A turn right after an abort: retried while the session still reports its aborted turn as active
        (as upstream's kit does); the scheduler clears that before it answers the aborted turn, so normally
        the first try succeeds."""
        import time

        for attempt in range(20):
            r = post_generate(payload)
            if r.status_code == 200 or "already has an active request" not in r.text:
                break
            time.sleep(0.25)
        if attempt:
            print(f"turn after abort: {attempt} retries")
        return r

    def check_server_config(self, algorithm, overlap):
        info = server_info()
        self.assertTrue(info["enable_streaming_session"])
        self.assertEqual(info["speculative_algorithm"], algorithm)
        self.assertEqual(not info["disable_overlap_schedule"], overlap, "scheduler kind (overlap on/off)")

    def check_kv_inheritance(self):
        """One session, sequential turns on an idle server: exact cached_tokens per turn (kit:
        test_kv_cache_inheritance); each turn equals its whole context sent as a plain request."""
        import random

        self.assertTrue(flush_cache(), "flush_cache failed")
        rng = random.Random(101)
        # (new ids, max_new_tokens): a 1-token append; with accept length ~4 spec v2 both overshoots
        # max_new_tokens (12, 2, 16: 1 + 4k > max) and lands on it exactly (9, 5)
        turns = [(23, 12), (1, 9), (9, 5), (14, 16), (6, 2)]
        sid = open_session()
        full, total, cached, diffs = [], 0, [], []
        try:
            for k, (n, max_new) in enumerate(turns):
                ids = self._ids(rng, n)
                r = post_generate(session_payload(sid, ids, max_new, return_logprob=True))
                out, new_total = self._turn_ok(r, total, n, max_new, inherit=k > 0)
                if k == 0:
                    self.assertEqual(out["meta_info"]["cached_tokens"], 0, "first turn after flush_cache")
                cached.append((out["meta_info"]["cached_tokens"], total))
                full += ids
                diffs.append(self._matches_plain(full, out, max_new))
                full += out["output_ids"]
                total = new_total
        finally:
            close_session(sid)
        print(f"kv inheritance (cached, previous total) per turn: {cached}; logprob diffs {diffs}")

    def check_concurrent_sessions(self, n_sessions=6, turns=4, rounds=2, n_plain=2):
        """Concurrent sessions, all turns of a round fired at once with plain requests in between, in the
        kit's three logprob modes (kit: test_leak_logprob_concurrent / test_stress_concurrent_sessions)."""
        import random

        rng = random.Random(202)
        modes = [{}, {"return_logprob": True}, {"return_logprob": True, "logprob_start_len": 0}]
        seen = []
        for kw in modes:
            for _ in range(rounds):
                sids = [open_session() for _ in range(n_sessions)]
                totals = [0] * n_sessions
                try:
                    for t in range(turns):
                        ids = [self._ids(rng, rng.randrange(1, 24)) for _ in range(n_sessions)]
                        max_new = [rng.randrange(2, 24) for _ in range(n_sessions)]
                        plain = [self._ids(rng, rng.randrange(8, 40)) for _ in range(n_plain)]
                        with concurrent.futures.ThreadPoolExecutor(n_sessions + n_plain) as ex:
                            fs = [ex.submit(post_generate, session_payload(sids[s], ids[s], max_new[s], **kw))
                                  for s in range(n_sessions)]
                            fp = [ex.submit(generate, p, 16) for p in plain]
                            rs = [f.result() for f in fs]
                            for f in fp:
                                self.assertEqual(f.result()["meta_info"]["completion_tokens"], 16)
                        for s, r in enumerate(rs):
                            out, new_total = self._turn_ok(r, totals[s], len(ids[s]), max_new[s], inherit=t > 0,
                                                           slack=self.KV_SLACK)
                            if kw.get("return_logprob"):
                                self.assertEqual(len(out["meta_info"]["output_token_logprobs"]), max_new[s])
                            if t > 0:
                                seen.append(totals[s] + self.KV_OFFSET - out["meta_info"]["cached_tokens"])
                            totals[s] = new_total
                finally:
                    for sid in sids:
                        close_session(sid)
        print(f"concurrent sessions: {len(seen)} continued turns, inherited short of the idle value by "
              f"{ {d: seen.count(d) for d in sorted(set(seen))} }")
        self.assertTrue(health_ok())

    def check_mid_stream_abort(self, first_turn):
        """Abort a turn while it streams (kit: test_nth_mid_abort_recovery / test_first_mid_abort_recovery):
        the session goes on from its last finished turn, and inherits exactly again afterwards."""
        import random
        import uuid

        rng = random.Random(303 + int(first_turn))
        sid = open_session()
        try:
            full, total = [], 0
            if not first_turn:
                ids = self._ids(rng, 20)
                out, total = self._turn_ok(post_generate(session_payload(sid, ids, 16)), 0, 20, 16, inherit=False)
                full = ids + out["output_ids"]
            rid = f"specv2-session-abort-{uuid.uuid4().hex}"
            state = {"aborted_at": None}

            def on_chunk(chunk):
                done = chunk.get("meta_info", {}).get("completion_tokens", 0)
                if state["aborted_at"] is None and done >= 8:
                    state["aborted_at"] = done
                    abort_request(rid)

            ids = self._ids(rng, 10)
            chunks = stream_generate(session_payload(sid, ids, 3000, rid=rid), on_chunk)
            self.assertIsNotNone(state["aborted_at"], f"the turn never streamed 8 tokens: {chunks[-1:]}")
            self.assertNotIn("error", chunks[-1], chunks[-1])
            meta = chunks[-1]["meta_info"]
            self.assertEqual(meta["finish_reason"]["type"], "abort", meta["finish_reason"])
            self.assertEqual(meta["prompt_tokens"], total + len(ids))
            self.assertLess(meta["completion_tokens"], 3000)
            print(f"aborted turn: abort sent at {state['aborted_at']} tokens, ended at {meta['completion_tokens']}")
            # recovery: the aborted turn is gone from the context; its KV was released, so no slot inheritance
            ids = self._ids(rng, 7)
            r = self._post_turn(session_payload(sid, ids, 8, return_logprob=True))
            out, total = self._turn_ok(r, total, 7, 8, inherit=False)
            meta = out["meta_info"]
            print(f"recovery turn: prompt {meta['prompt_tokens']}, cached {meta['cached_tokens']} (not slot-inherited)")
            full += ids
            self._matches_plain(full, out, 8)
            full += out["output_ids"]
            # and the session inherits exactly again
            ids = self._ids(rng, 5)
            out, _ = self._turn_ok(post_generate(session_payload(sid, ids, 12, return_logprob=True)), total, 5, 12)
            self._matches_plain(full + ids, out, 12)
        finally:
            close_session(sid)
        self.assertTrue(health_ok())

    def check_rejected_turns_keep_session(self):
        """Turns rejected before they start (kit: test_preabort_recovery; streaming sessions refuse offset,
        replace and drop_previous_output) leave the session's KV slot intact: the next turn inherits exactly."""
        import random

        rng = random.Random(404)
        sid = open_session()
        try:
            ids = self._ids(rng, 18)
            out, total = self._turn_ok(post_generate(session_payload(sid, ids, 16)), 0, 18, 16, inherit=False)
            full = ids + out["output_ids"]
            for bad in ({"offset": 1}, {"replace": True}, {"drop_previous_output": True}):
                r = post_generate(session_payload(sid, self._ids(rng, 6), 8, session=bad))
                if r.status_code == 200:
                    self.assertEqual(r.json()["meta_info"]["finish_reason"]["type"], "abort", (bad, r.text[:300]))
                else:
                    self.assertEqual(r.status_code, 400, (bad, r.text[:300]))
            ids = self._ids(rng, 7)
            out, total = self._turn_ok(post_generate(session_payload(sid, ids, 10, return_logprob=True)), total, 7, 10)
            self._matches_plain(full + ids, out, 10)
        finally:
            close_session(sid)
        self.assertTrue(health_ok())

    def check_healthy_after_sessions(self):
        import time

        time.sleep(3)  # every session is closed: idle iterations run the scheduler's pool leak checks (raise)
        self.assertTrue(health_ok(), "server unhealthy after the session checks")
        self.assertIsNone(self.process.poll(), "server process exited")


class SessionRow(SessionChecks):
    """A streaming-session row, mixed in before CustomTestCase like ``TreeRow``: the server of
    ``launch_args()`` with ``--enable-streaming-session``, serving ALGORITHM (None: no speculation) with
    the overlap scheduler on or off (OVERLAP), checked by every ``SessionChecks`` scenario."""

    ALGORITHM, OVERLAP = None, True

    @classmethod
    def launch_args(cls):
        return []

    @classmethod
    def setUpClass(cls):
        cls.process = launch(cls.launch_args() + ["--enable-streaming-session"])

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_0_server_config(self):
        self.check_server_config(algorithm=self.ALGORITHM, overlap=self.OVERLAP)

    def test_1_kv_inheritance_exact(self):
        self.check_kv_inheritance()

    def test_2_concurrent_sessions_logprob_modes(self):
        self.check_concurrent_sessions()

    def test_3_mid_stream_abort_nth_turn(self):
        self.check_mid_stream_abort(first_turn=False)

    def test_4_mid_stream_abort_first_turn(self):
        self.check_mid_stream_abort(first_turn=True)

    def test_5_rejected_turns_keep_session(self):
        self.check_rejected_turns_keep_session()

    def test_9_healthy_and_alive(self):
        self.check_healthy_after_sessions()


class SpecSessionRow(SessionRow, SpecChecks):
    """A streaming-session row with a speculative draft: also greedy output = target-only."""

    @classmethod
    def setUpClass(cls):
        cls.prefetch_target_only()
        super().setUpClass()

    def test_6_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()

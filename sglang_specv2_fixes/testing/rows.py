"""Test mixins of the registered speculative rows: ``SpecChecks`` (assertions shared by every speculative row),
``ServerRow`` (one server per class: its reference prefetched, then the launch, stopped after the class),
``ChainChecks`` (a chain row's five test cases), ``FinishLineRow`` (a finish-line row's server), ``FinishLineCases``
(a finish-line differential's test cases), ``TreeRow`` (tree drafting at a width), ``DefaultInvocationRow`` (no
spec-shape or backend flags), ``RetractRow`` (retraction with chunked prefill at a page size) and ``HandoffRow``
(verify-handoff's checks); the DeepSeek-V3 MTP rows' ``Dsv3MtpStrict`` is in dsv3_rows.py. Mixed in *before*
``CustomTestCase`` (``class T(TreeRow, CustomTestCase)``) so their setUpClass wins."""

import concurrent.futures
import time

import requests

from .client import (concurrent_generate, flush_cache, generate, health_ok, loads, post, rescore_logprobs,
                     server_info, specv2_state)
from . import finish_line
from .config import common_without_backend, prompts
from .reference import prefetch_reference, prefetch_responses, reference_outputs
from .server import TIMEOUT, URL, eagle3_args, launch, stop
from ..selection import ENV_PROBE


class SpecChecks:
    """Assertions shared by the speculative rows (mixin for CustomTestCase)."""

    N_REF, REF_TOKENS = 16, 48
    BACKEND_ARGS = ()  # e.g. ("--attention-backend", "flashinfer"): appended to the row's launch and its reference

    @classmethod
    def prefetch_target_only(cls):
        """Start the target-only launch behind ``check_greedy_equals_target_only`` now: call it in setUpClass
        before ``launch`` so the two servers start together."""
        prefetch_reference(prompts(cls.N_REF, seed=7), cls.REF_TOKENS, extra_args=tuple(cls.BACKEND_ARGS))

    def check_greedy_equals_target_only(self):
        ps = prompts(self.N_REF, seed=7)
        ref = reference_outputs(ps, self.REF_TOKENS, extra_args=tuple(self.BACKEND_ARGS))
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            got = list(ex.map(lambda p: generate(p, self.REF_TOKENS)["output_ids"], ps))
        for i, (g, r) in enumerate(zip(got, ref)):
            self.assertEqual(g, r, f"prompt {i}: speculative greedy output differs from target-only")

    def check_prompts_equal_target_only(self, ps, tokens):
        """Each of ``ps`` alone (greedy, ``tokens`` new tokens) gives the target-only output ids; the server lives."""
        ref = reference_outputs(ps, tokens)
        for i, p in enumerate(ps):
            self.assertEqual(generate(p, tokens)["output_ids"], ref[i], f"prompt {i} (len {len(p)})")
        self.check_alive()

    def verify_steps(self, ps, tokens):
        """``spec_verify_ct`` of each of ``ps``, one request at a time from an empty radix cache (a batch would change
        chunk boundaries, a cache hit the prefill); each must produce ``tokens`` tokens. The detector-draft rows
        read acceptance from it."""
        out = []
        for p in ps:
            self.assertTrue(flush_cache())
            meta = generate(p, tokens)["meta_info"]
            self.assertEqual(meta["completion_tokens"], tokens)
            out.append(meta["spec_verify_ct"])
        return out

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

    def check_length_rounds(self, label, n, rounds, seed, max_new_tokens, workers):
        """``rounds`` rounds of ``n`` concurrent greedy requests that ignore EOS (``prompts(n, seed=seed + round)``, at
        most ``workers`` at once; request i asks for ``max_new_tokens(i)`` tokens): every one finishes by length with
        exactly that many, and the server reports an acceptance length (speculative verify steps ran). For rows on
        dummy weights, whose greedy text is no oracle; ``label`` starts the printed summary."""
        outs = []
        for rnd in range(rounds):
            ps = prompts(n, seed=seed + rnd)

            def one(i):
                body = {"input_ids": ps[i], "sampling_params": {"temperature": 0, "ignore_eos": True,
                                                                "max_new_tokens": max_new_tokens(i)}}
                return i, post(body)

            with concurrent.futures.ThreadPoolExecutor(workers) as ex:
                outs += list(ex.map(one, range(n)))
        wrong = [f"request {i}: {o['meta_info']['finish_reason']} {o['meta_info']['completion_tokens']} tokens"
                 for i, o in outs
                 if o["meta_info"]["finish_reason"]["type"] != "length"
                 or o["meta_info"]["completion_tokens"] != max_new_tokens(i)]
        accept = server_info()["internal_states"][0].get("avg_spec_accept_length")
        print(f"{label}: {len(wrong)} of {len(outs)} requests wrong; {wrong[:4]}; avg_spec_accept_length {accept}")
        self.assertEqual(len(outs), n * rounds)
        self.assertEqual(wrong, [])
        self.assertIsNotNone(accept)

    def check_accept_length(self, minimum):
        accept = server_info()["internal_states"][0].get("avg_spec_accept_length")
        print("avg_spec_accept_length:", accept)
        self.assertIsNotNone(accept)
        self.assertGreater(accept, minimum)

    def check_alive(self):
        self.assertTrue(health_ok())
        self.assertIsNone(self.process.poll())

    def assert_idle_balanced(self, what, settle=3.0, wait_s=60.0):
        """Nothing running or waiting on any DP rank (``/v1/loads``), then, once the idle scheduler's strict self-check
        has run (``settle`` s), every KV token free or evictable and the probe (SGLANG_SPECV2_FIXES_PROBE=1) has seen
        no request with more KV committed than allocated."""
        deadline = time.time() + wait_s
        while True:
            ranks = loads()
            if all(r["num_running_reqs"] == 0 and r["num_waiting_reqs"] == 0 for r in ranks):
                break
            self.assertLess(time.time(), deadline, f"{what}: the server did not go idle: {ranks}")
            time.sleep(0.5)
        time.sleep(settle)  # the scheduler idles: its strict idle self-check runs now (a leak stops it)
        self.check_alive()
        ranks, state = loads(), specv2_state(server_info())
        probe = state["probe"]
        used = [{k: r.get(k) for k in ("num_used_tokens", "max_total_num_tokens", "token_usage")} for r in ranks]
        print(f"[{type(self).__name__}] {what}: loads={used} radix_tokens={state.get('radix_tokens')} "
              f"probe={ {k: v for k, v in probe.items() if k != 'examples'} }", flush=True)
        for r in ranks:
            self.assertEqual(r["num_used_tokens"], 0, f"{what}: KV tokens neither free nor evictable when idle: {r}")
        self.assertEqual(probe["live_committed_over_allocated"], 0, probe.get("examples"))
        self.assertEqual(probe["committed_over_allocated"], 0, probe.get("examples"))

    def check_replays_planned_sync_free(self):
        """flashinfer-draft-extend-graph's sync-free plan: every draft-extend graph replay of the server so far took
        the host layout (``serving.draft_extend_plans``); a refused one is counted as "flashinfer: why"."""
        plans = specv2_state(server_info())["serving"].get("draft_extend_plans") or {}
        print("draft_extend_plans:", plans)
        self.assertEqual(set(plans), {"sync-free"}, f"replays planned as stock: {plans}")
        self.assertGreater(plans["sync-free"], 0)

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


class ServerRow(SpecChecks):
    """One server under test per class, mixed in *before* CustomTestCase (its setUpClass wins over unittest's no-op
    one): the target-only reference its checks compare with is prefetched first (``prefetch_target_only``), then
    ``launch(cls.launch_args(), env=cls.server_env())`` (forced retraction and ``ENV``); it stops after the class."""

    ENV = {}  # extra server environment

    @classmethod
    def launch_args(cls):
        raise NotImplementedError

    @classmethod
    def server_env(cls):
        return {"SGLANG_TEST_RETRACT": "1", **cls.ENV}

    @classmethod
    def setUpClass(cls):
        cls.prefetch_target_only()
        cls.process = launch(cls.launch_args(), env=cls.server_env())

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)


class ChainChecks:
    """The test cases of a chain row's server (with ``ServerRow``): greedy = target-only, decode logprobs = prefill,
    32 concurrent requests, acceptance above MIN_ACCEPT, alive afterwards."""

    MIN_ACCEPT = 2.0

    def test_1_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()

    def test_2_decode_logprobs_match_prefill(self):
        self.check_decode_logprobs_match_prefill()

    def test_3_concurrent_load(self):
        self.check_concurrent_load(32)

    def test_4_acceptance_kept(self):
        self.check_accept_length(self.MIN_ACCEPT)

    def test_5_alive(self):
        self.check_alive()


class FinishLineRow(ServerRow):
    """The server of a finish-line row (test_finish_line.py, test_min_tokens_per_position.py): EAGLE3 ``SPEC`` (steps,
    topk, draft tokens) on the shared flags, no forced retraction; the target-only answers to the row's /generate
    ``BODIES`` (``finish_line.received`` of each) prefetched first."""

    SPEC = (3, 1, 4)
    BODIES = ()

    @classmethod
    def prefetch_target_only(cls):
        prefetch_responses(cls.BODIES, keep=finish_line.received)

    @classmethod
    def launch_args(cls):
        return eagle3_args(*cls.SPEC)

    @classmethod
    def server_env(cls):
        return {}


class FinishLineCases:
    """The test cases of a finish-line differential row (test_finish_line.py, test_dsv3_mtp_finish_line.py), mixed in
    with the row's server: ``CASES`` (``finish_line.cases``: (label, /generate body), a label may end in " (...)"),
    ``N_PROMPTS`` (the prompts they are built on), ``oracle()`` (the target-only answers in the order of ``CASES``, as
    ``compare`` reads them) and ``compare(got, want)`` (what differs in one answer: ``finish_line.differences`` on
    ``finish_line.received`` of the oracle's)."""

    CASES = ()
    N_PROMPTS = 0
    compare = staticmethod(finish_line.differences)

    def oracle(self):
        raise NotImplementedError

    def tag(self):
        """What the row's log line names this server by."""
        return type(self).__name__

    def check_premise(self, want):
        """The premise: the oracle's greedy output is the predicted walk, and the stops are reached."""
        self.assertEqual(len(want), len(self.CASES))
        self.assertGreaterEqual(len(self.CASES), 200)
        for (label, body), w in zip(self.CASES, want):
            if label.split(" (")[0].endswith("max_new_tokens"):
                n = body["sampling_params"]["max_new_tokens"]
                self.assertEqual(w["output_ids"], finish_line.walk(body["input_ids"])[:n], label)
        kinds = [w["finish_reason"]["type"] for w in want]
        self.assertGreater(kinds.count("stop"), len(self.CASES) // 2, kinds)
        self.assertGreater(kinds.count("length"), self.N_PROMPTS, kinds)

    def test_1_the_cases_reach_their_finish(self):
        """The premise: the oracle's greedy output is the predicted walk, and the stops are reached."""
        self.check_premise(self.oracle())

    def check_cases(self, earlier_token_later_string):
        """Every case of one group equals the non-speculative server. The group of a stop token followed by a stop
        string (``stop token then stop string``) is apart: upstream's check order lets the later string win inside
        one accepted run (stock fails it on 0.5.14-0.5.23; the plugin's first finish in the run wins)."""
        want = self.oracle()
        mine = [i for i, (label, _) in enumerate(self.CASES)
                if label.split(" (")[0].endswith("stop token then stop string") == earlier_token_later_string]
        n, bad = finish_line.differing([self.CASES[i] for i in mine], [want[i] for i in mine], compare=self.compare)
        print(f"[{self.tag()}] {len(bad)} of {len(mine)} cases differ", flush=True)
        self.assertGreaterEqual(n, 10)
        self.assertFalse(bad, f"{len(bad)} of {len(mine)} cases differ from the non-speculative server:\n"
                         + "\n".join(bad[:25]))

    def test_2_every_case_equals_non_speculative(self):
        self.check_cases(earlier_token_later_string=False)

    def test_3_an_earlier_stop_token_beats_a_later_stop_string(self):
        self.check_cases(earlier_token_later_string=True)


class TreeRow(ServerRow):
    """A tree-drafting row, mixed in *before* CustomTestCase (``class T(TreeRow, CustomTestCase)``, so its
    setUpClass wins over unittest's no-op one): EAGLE3 STEPS / TOPK / TOKENS at page_size 1 with
    forced retraction. Stock falls back to spec v1 for explicit topk > 1 (asserted first); the plugin
    must serve it on spec v2 tree drafting: greedy = target-only, decode logprobs = prefill, 32
    concurrent requests, a concurrent abort, healthy afterwards."""

    STEPS = TOPK = TOKENS = MIN_ACCEPT = None
    LAUNCH_ARGS = ()  # the server under test only (e.g. "--tp-size", "2"); its target-only reference stays TP 1

    @classmethod
    def launch_args(cls):
        return (eagle3_args(steps=cls.STEPS, topk=cls.TOPK, tokens=cls.TOKENS) + ["--page-size", "1"]
                + list(cls.BACKEND_ARGS) + list(cls.LAUNCH_ARGS))

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


class DefaultInvocationRow(SpecChecks):
    """The default invocation on Hopper, mixed in before CustomTestCase like ``TreeRow``: EAGLE3 with no step / topk /
    token flags and no --attention-backend, forced retraction. The server must run the auto-chosen tree (topk > 1) on
    spec v2 tree drafting on BACKEND (``/server_info``); 2 x 32 concurrent requests, greedy = a BACKEND target-only
    server, a concurrent abort, healthy afterwards."""

    BACKEND = None  # the attention backend the server must end up on; also the target-only reference's
    ENV = {}  # extra server environment

    @classmethod
    def setUpClass(cls):
        cls.BACKEND_ARGS = ("--attention-backend", cls.BACKEND)  # the reference only: the server gets no backend flag
        cls.prefetch_target_only()
        cls.process = launch(eagle3_args(steps=None), env={"SGLANG_TEST_RETRACT": "1", **cls.ENV},
                             common=common_without_backend())

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_backend_and_spec_path(self):
        info = server_info()
        serving = specv2_state(info).get("serving") or {}
        print("serving:", serving, "attention_backend:", info.get("attention_backend"))
        self.assertEqual(info["attention_backend"], self.BACKEND)
        self.assertEqual(serving.get("spec_path"), "v2 tree")
        self.assertGreater(info["speculative_eagle_topk"], 1)

    def test_2_concurrent_load_survives(self):
        self.check_concurrent_load(32)
        self.check_concurrent_load(32)
        self.check_alive()

    def test_3_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()

    def test_4_concurrent_abort(self):
        self.check_concurrent_abort()
        self.check_greedy_equals_target_only()
        self.check_alive()


class RetractRow(ServerRow):
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
    def prefetch_target_only(cls):
        prefetch_reference(cls.long_and_short_prompts(), 40)

    @classmethod
    def launch_args(cls):
        return eagle3_args(3, 1, 4) + ["--page-size", str(cls.PAGE_SIZE), "--enable-mixed-chunk",
                                       "--chunked-prefill-size", str(cls.CHUNK), "--max-running-requests", "32"]

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


class HandoffRow(ServerRow):
    """One server of a verify-handoff row (test_verify_handoff.py, test_verify_handoff_fa3.py), mixed in before
    CustomTestCase: EAGLE3 STEPS / TOPK / TOKENS on BACKEND_ARGS' backend with CUDA graphs, page size 1, forced
    retraction, the probe on, ENV in the server's environment. test_7: the probe counts no host wait on a verify."""

    STEPS = TOPK = TOKENS = None
    MIN_ACCEPT = 2.0  # the walk model's draft: 4.0 (the most 3 steps give) for the chain and the 3 / 4 / 8 tree
    BACKEND_ARGS = ("--attention-backend", "triton")
    LAUNCH_ARGS = ()  # the server under test only

    @classmethod
    def launch_args(cls):
        return eagle3_args(cls.STEPS, cls.TOPK, cls.TOKENS) + list(cls.BACKEND_ARGS) + list(cls.LAUNCH_ARGS)

    @classmethod
    def server_env(cls):
        return {"SGLANG_TEST_RETRACT": "1", ENV_PROBE: "1", **cls.ENV}

    def test_1_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()

    def test_2_decode_logprobs_match_prefill(self):
        self.check_decode_logprobs_match_prefill()

    def test_3_concurrent_load(self):
        self.check_concurrent_load(32)

    def test_4_concurrent_abort(self):
        self.check_concurrent_abort()

    def test_5_acceptance_kept(self):
        self.check_accept_length(self.MIN_ACCEPT)

    def test_6_alive(self):
        self.check_alive()

    def test_7_no_host_wait_on_verify(self):
        before = specv2_state(server_info())["probe"]["verify_host_waits"]
        outs = concurrent_generate(16, lambda i: 64 + 8 * i, seed=3)
        for i, o in enumerate(outs):
            self.assertEqual(o["meta_info"]["completion_tokens"], 64 + 8 * i)
        probe = specv2_state(server_info())["probe"]
        print("verify_host_waits:", before, "->", probe["verify_host_waits"], "spec_v2_results:", probe["spec_v2_results"])
        self.assertGreater(probe["spec_v2_results"], 0)
        self.assertEqual(probe["verify_host_waits"] - before, 0,
                         "the decode preparation still waited on the host for a verify")

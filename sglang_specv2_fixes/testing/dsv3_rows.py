"""The strict MTP rows on a DeepSeek-V3-class target (issue 58): ``Dsv3MtpStrict``, one (BACKEND, PAGE_SIZE, RADIX)
server, mixed in *before* CustomTestCase (``class T(Dsv3MtpStrict, CustomTestCase)``). The rows are a family, one file
per attention backend (tests/registered/test_dsv3_mtp_strict.py: triton, test_dsv3_mtp_strict_flashinfer.py,
test_dsv3_mtp_strict_fa3.py, test_dsv3_mtp_strict_flashmla.py) and DP attention (test_dp2_dsv3_mtp.py), each with two
servers: page size 1 with the radix cache off and page size 64 with it on (DeepSeek's production page size; FlashMLA
runs at 64 alone, so its two servers are 64 without and with the radix cache).

The target is the tiny real-weight ``DeepseekV3ForCausalLM`` (tiny_models/deepseek_v3.py: MLA, 8 routed experts + 1
shared, one NextN layer in the checkpoint) served as users serve DeepSeek: ``--speculative-algorithm EAGLE`` with no
draft path and no step / topk / token flags (ServerArgs fills the draft path with the model path and picks 3 / 1 / 4;
the draft is ``DeepseekV3ForCausalLMNextN``), overlap on (spec v2), CUDA graphs, forced retraction
(SGLANG_TEST_RETRACT), strict busy memory checks (``launch``), the probe, xgrammar.

On each server: greedy output = the same target served without speculation at the same backend and page size (the
oracle), decode logprobs = prefill re-scoring, streamed = non-streamed, long prompts through chunked prefill (chunk
256) = oracle, 32 concurrent requests under forced retraction with the MTP layer's acceptance kept (the walk model's
MTP drafts right: accept length ~4 of 4 when the plumbing is right, <~1.5 with a wrong hidden state),
regex-constrained requests end as the regex says, client aborts (by rid and abort_all), and after each load the idle
checks: SGLang's strict idle self-check, ``/v1/loads`` ``num_used_tokens`` 0, the probe's committed-over-allocated
counters 0.

Where a release refuses a (backend, page size) at startup, ``test_0`` shows the refusal is clear (the server exits
with an error naming the backend or the page size) and the combination must be listed in ``REFUSED``; the other
tests of that class are then skipped with the refusal as the reason. An unlisted refusal fails the row.
"""

import concurrent.futures
import os
import re
import tempfile

from . import server as srv
from .client import flush_cache, generate, health_ok, post, server_info, stream_generate
from .config import common_with_grammar, prompts
from .finish_line import walk
from .reference import prefetch_responses, reference_responses
from .rows import SpecChecks
from .server import MODELS_DIR, URL, launch, stop

EOS = 2  # the tiny tokenizer's </s>
CHUNK = 256
MIN_ACCEPT = 2.5  # the walk model's MTP chain: ~4 when right (tiny_models.deepseek_v3_ref.check: >= 3.5 on CPU)
# (release prefix, backend, page size) -> regex the refusal's error must match: combinations a release refuses at
# startup (none seen yet: fill in from a GPU run's log, with the release's reason in a comment); the rows of every
# backend read it
REFUSED = {}


def model():
    from .tiny_models import deepseek_v3

    return deepseek_v3.build(MODELS_DIR)


def mtp_args():
    """How users serve DeepSeek MTP: EAGLE, no draft path, no step / topk / token flags."""
    return ["--speculative-algorithm", "EAGLE"]


def grammar_common(backend):
    """COMMON with xgrammar and ``backend`` instead of COMMON's triton."""
    return common_without_flag(common_with_grammar(), "--attention-backend") + ["--attention-backend", backend]


def common_without_flag(args, flag):
    i = args.index(flag)
    return args[:i] + args[i + 2:]


def launch_or_refusal(extra, env, common):
    """(process, None) when the server starts; (None, its last error lines) when it exits at startup (launched again
    with its output captured: the first launch's output went to the test's log)."""
    try:
        return launch(extra, env=env, target=model(), common=common), None
    except Exception as first:  # noqa: BLE001 - a refusal is examined below
        print(f"launch failed ({first}); launching again to read the refusal", flush=True)
    from sglang.test.test_utils import popen_launch_server

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        try:
            proc = popen_launch_server(model(), URL, timeout=300, return_stdout_stderr=(out, err), env=env,
                                       other_args=common + srv.nccl_args(URL, extra) + list(extra)
                                       + ["--specv2-fixes", srv.AB])
        except Exception as second:  # noqa: BLE001
            err.seek(0)
            out.seek(0)
            lines = [ln for ln in (out.read() + err.read()).splitlines() if ln.strip()]
            return None, "\n".join(lines[-12:] + [str(second)])
        stop(proc)
        raise AssertionError("the server failed to start once, then started: not a refusal (flaky start)")


class Dsv3MtpStrict(SpecChecks):
    """One (BACKEND, PAGE_SIZE, RADIX) server of the strict MTP row; mixed in before CustomTestCase."""

    BACKEND, PAGE_SIZE, RADIX = "triton", 1, True
    LAUNCH_ARGS = ()  # the server under test only (test_dp2_dsv3_mtp.py: DP attention); the oracle stays TP 1

    @classmethod
    def setUpClass(cls):
        cls.BACKEND_ARGS = ("--attention-backend", cls.BACKEND, "--page-size", str(cls.PAGE_SIZE))
        cls.extra = (mtp_args() + ["--page-size", str(cls.PAGE_SIZE), "--chunked-prefill-size", str(CHUNK),
                                   "--max-running-requests", "32"] + ([] if cls.RADIX else ["--disable-radix-cache"]) + list(cls.LAUNCH_ARGS))
        cls.refused = None
        cls.prefetch_target_only()
        cls.process, cls.refused = launch_or_refusal(cls.extra, {"SGLANG_TEST_RETRACT": "1", "SGLANG_SPECV2_FIXES_PROBE": "1"},
                                                     grammar_common(cls.BACKEND))

    @classmethod
    def oracle_bodies(cls):
        """The greedy bodies the oracle answers (one target-only launch per backend and page size): the short
        prompts with REF_TOKENS new tokens, then the long (chunked-prefill) ones with 24."""
        body = lambda p, n: {"input_ids": p, "sampling_params": {"temperature": 0, "max_new_tokens": n,  # noqa: E731
                                                                 "ignore_eos": True}}
        return ([body(p, cls.REF_TOKENS) for p in prompts(cls.N_REF, seed=7)]
                + [body(p, 24) for p in cls.long_prompts()])

    @classmethod
    def prefetch_target_only(cls):
        prefetch_responses(cls.oracle_bodies(), target=model(), extra_args=cls.BACKEND_ARGS)

    def oracle(self):
        return reference_responses(self.oracle_bodies(), target=model(), extra_args=self.BACKEND_ARGS)

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    @staticmethod
    def long_prompts():
        return prompts(8, seed=41, lo=300, hi=700)

    def known_refusal(self):
        from .. import installed

        rel = installed.version() or ""
        return next((rx for (prefix, b, p), rx in REFUSED.items()
                     if rel.startswith(prefix) and (b, p) == (self.BACKEND, self.PAGE_SIZE)), None)

    def setUp(self):
        super().setUp()
        if self.refused is not None and self._testMethodName != "test_0_starts_or_refuses_clearly":
            if self.known_refusal() is None:
                self.fail(f"{self.BACKEND} page {self.PAGE_SIZE} refused at startup (not in REFUSED):\n{self.refused}")
            self.skipTest(f"{self.BACKEND} page {self.PAGE_SIZE} refused at startup (REFUSED): {self.refused[-300:]}")

    # ---- the oracle comparisons (reference at this backend and page size) ----
    def check_greedy_equals_target_only(self):
        ps = prompts(self.N_REF, seed=7)
        ref = self.oracle()[:self.N_REF]
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            got = list(ex.map(lambda p: generate(p, self.REF_TOKENS)["output_ids"], ps))
        for i, (g, r) in enumerate(zip(got, ref)):
            self.assertEqual(g, r, f"prompt {i}: MTP greedy output differs from target-only")
            self.assertEqual(g, walk(ps[i])[:self.REF_TOKENS], f"prompt {i}: the oracle is not the model's walk")

    def test_0_starts_or_refuses_clearly(self):
        if self.refused is None:
            return
        print(f"[{self.BACKEND} page {self.PAGE_SIZE}] refused at startup:\n{self.refused}", flush=True)
        named = re.search(rf"(?i){self.BACKEND}|page.?size|not supported|unsupported", self.refused)
        self.assertTrue(named, f"the refusal names neither the backend nor the page size:\n{self.refused}")
        rx = self.known_refusal()
        self.assertIsNotNone(rx, "a refusal not listed in REFUSED: list it (release, backend, page size) with why")
        self.assertRegex(self.refused, rx)

    def test_1_served_as_deepseek_mtp(self):
        info = server_info()
        print({k: info.get(k) for k in ("speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
                                        "speculative_eagle_topk", "speculative_num_draft_tokens", "attention_backend",
                                        "page_size", "disable_radix_cache", "disable_overlap_schedule")}, flush=True)
        self.assertEqual(info["speculative_algorithm"], "EAGLE")
        self.assertEqual(os.path.realpath(info["speculative_draft_model_path"]), os.path.realpath(model()),
                         "ServerArgs did not take the NextN draft from the target checkpoint")
        self.assertEqual((info["speculative_num_steps"], info["speculative_eagle_topk"],
                          info["speculative_num_draft_tokens"]), (3, 1, 4))
        self.assertFalse(info["disable_overlap_schedule"], "spec v2 (overlap) expected")
        self.assertEqual((info["attention_backend"], info["page_size"]), (self.BACKEND, self.PAGE_SIZE))
        self.assertEqual(info["disable_radix_cache"], not self.RADIX)
        self.assertEqual(info["grammar_backend"], "xgrammar")

    def test_2_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()

    def test_3_decode_logprobs_match_prefill(self):
        self.check_decode_logprobs_match_prefill()

    def test_4_streamed_equals_non_streamed(self):
        for p in prompts(6, seed=13):
            body = {"input_ids": p, "sampling_params": {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True}}
            whole = post(body)
            chunks = stream_generate(body)
            last = chunks[-1]["output_ids"]  # cumulative or incremental, by release and flags
            ids = last if len(last) == 30 else sum((c["output_ids"] for c in chunks), [])
            self.assertEqual(ids, whole["output_ids"], "streamed output ids differ from the non-streamed answer")
            self.assertEqual(chunks[-1]["text"].strip(), whole["text"].strip())
            self.assertEqual(chunks[-1]["meta_info"]["completion_tokens"], 30)

    def test_5_chunked_prefill_equals_target_only(self):
        ps = self.long_prompts()
        ref = self.oracle()[self.N_REF:]
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            got = list(ex.map(lambda p: generate(p, 24)["output_ids"], ps))
        for i, (g, r) in enumerate(zip(got, ref)):
            self.assertEqual(g, r, f"long prompt {i} ({len(ps[i])} tokens, chunk {CHUNK}): differs from target-only")

    def test_6_concurrent_load_with_retract_keeps_acceptance(self):
        self.check_concurrent_load(32)
        self.check_accept_length(MIN_ACCEPT)
        self.assert_idle_balanced("after 32 concurrent requests")

    def test_7_regex_requests_end_as_the_regex_says(self):
        # (prompt, K words, max_new_tokens): room for K words and EOS (the grammar ends the request), or exactly K (the
        # length check comes first); never K + 1 .. K + 2, where EOS and the length cap meet
        ps = prompts(24, seed=17)
        cases = [(p, 1 + i % 7, 16 if i % 4 else 1 + i % 7) for i, p in enumerate(ps)]

        def run(c):
            p, k, n = c
            return post({"input_ids": p, "sampling_params": {"temperature": 0, "max_new_tokens": n,
                                                             "regex": f"(t[0-9]+){{{k}}}"}})

        with concurrent.futures.ThreadPoolExecutor(24) as ex:
            outs = list(ex.map(run, cases))
        wrong = []
        for i, ((p, k, n), o) in enumerate(zip(cases, outs)):
            ids, reason = o["output_ids"], o["meta_info"]["finish_reason"]
            ids = ids[:-1] if n > k and ids[-1:] == [EOS] else ids  # a matched EOS may be trimmed from the ids
            want_reason = ("stop", EOS) if n > k else ("length", None)
            if ids != walk(p)[:k] or (reason["type"], reason.get("matched")) != want_reason:
                wrong.append(f"case {i} (k {k}, max {n}): {o['output_ids']} {reason} != {walk(p)[:k]} {want_reason}")
        self.assertEqual(wrong, [], "regex-constrained MTP output differs from the grammar's greedy walk")
        self.assert_idle_balanced("after regex requests")

    def test_8_client_aborts_then_idle(self):
        self.check_concurrent_abort(n=16, tokens=3000)
        self.assert_idle_balanced("after aborts")
        self.check_greedy_equals_target_only()

    def test_9_flush_and_alive(self):
        self.assertTrue(flush_cache(), "flush_cache refused: the server is not idle")
        self.assertTrue(health_ok())
        self.assertIsNone(self.process.poll())

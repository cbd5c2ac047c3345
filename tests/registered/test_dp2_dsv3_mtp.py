"""DP attention 2 with MTP on the DeepSeek-V3-class target (issue 58, run with the 2-GPU rows): the strict MTP row
(``testing.dsv3_rows.Dsv3MtpStrict``, test_dsv3_mtp_strict.py: default MTP invocation, forced retraction, chunked
prefill, streaming, logprobs, regex, aborts, busy / idle leak checks on every DP rank's ``/v1/loads``) on ``--tp-size 2
--dp-size 2 --enable-dp-attention`` (attention data parallel, the MoE tensor parallel over both GPUs, as DeepSeek is
served), triton, page size 1 without the radix cache and 64 with it; the oracle is the TP 1 non-speculative server.
Plus single requests one after another, so that one DP rank idles through every round (the idle rank still runs each
round's draft extend and verify on an empty batch)."""

import unittest

from sglang_specv2_fixes.testing.client import health_ok, loads, post, server_info
from sglang_specv2_fixes.testing.config import prompts
from sglang_specv2_fixes.testing.dsv3_rows import Dsv3MtpStrict
from sglang_specv2_fixes.testing.finish_line import walk
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang.test.test_utils import CustomTestCase

# bug_in: as test_dsv3_mtp_strict.py (scheduler and draft-graph code, not the backend's)
register_specv2_ci(est_time=360, suite="specv2-gpu", releases="gpu",
                   bug_in="fix:skip-stale-overlap-updates|fix:draft-graph-eager-registry", gpus=2)

DP = ("--tp-size", "2", "--dp-size", "2", "--enable-dp-attention")


class _Dp2(Dsv3MtpStrict):
    LAUNCH_ARGS = DP

    def test_1b_dp_attention(self):
        info = server_info()
        self.assertTrue(info.get("enable_dp_attention"), "DP attention is off: no idle rank")
        self.assertEqual((info.get("dp_size"), info.get("tp_size")), (2, 2))
        self.assertEqual(len(loads()), 2, "one /v1/loads entry per DP rank")

    def test_6b_single_requests_with_an_idle_rank(self):
        ps = prompts(8, seed=97)
        outs = [post({"input_ids": p, "sampling_params": {"temperature": 0, "ignore_eos": True,
                                                          "max_new_tokens": 12}}) for p in ps]
        wrong = [i for i, (p, o) in enumerate(zip(ps, outs)) if o["output_ids"] != walk(p)[:12]
                 or o["meta_info"]["finish_reason"]["type"] != "length"]
        self.assertEqual(wrong, [], "single requests with one DP rank idle: output is not the greedy walk")
        self.assertTrue(health_ok())
        self.assert_idle_balanced("after single requests")


class TestDp2Dsv3MtpTritonPage1NoRadix(_Dp2, CustomTestCase):
    BACKEND, PAGE_SIZE, RADIX = "triton", 1, False


class TestDp2Dsv3MtpTritonPage64Radix(_Dp2, CustomTestCase):
    BACKEND, PAGE_SIZE, RADIX = "triton", 64, True


if __name__ == "__main__":
    unittest.main()

"""multi-layer-draft's idle-round guard on the real server: multi-layer EAGLE v2 with DP attention
(``--tp-size 2 --dp-size 2 --enable-dp-attention``) on 2 GPUs, the draft extend run eagerly (``--disable-cuda-graph``).
While one DP rank has requests and the other none, the idle rank still runs each round's draft extend, on an empty
batch. 0.5.16 / 0.5.17 plan every MTP step's attention backend there, also on that empty batch, and the backend's
planning fails on it (``seq_lens_cpu.max()`` on fa3: upstream #33892, fixed in 0.5.18), which stops that rank's
scheduler; the plugin skips the planning on an idle round, as 0.5.18 does (and as its own per-step planning on
0.5.13 - 0.5.15.post1 always did). CPU: tests/cpu/test_fix_multi_layer_draft.py on each release's real draft extend.

test_multi_layer_serves.py's server and load (the tiny MiMo-V2-Flash shape, dummy weights, fa3), plus single requests
one after another, so that one rank idles through every round of each. Met A/B on 0.5.13 - 0.5.17 on 2 GPUs;
queue it alone (TP 2 servers are refused beside one-GPU rows: unbalanced memory).
"""

import unittest

import test_multi_layer_serves as base

from sglang_specv2_fixes.testing.client import health_ok, post, server_info
from sglang_specv2_fixes.testing.config import prompts
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.server import AB

register_specv2_ci(est_time=300, suite="specv2-gpu", releases="gpu&fix:multi-layer-draft",
                   bug_in="gpu&fix:multi-layer-draft", gpus=2)


class TestDp2MultiLayerIdle(base.TestMultiLayerServes):
    LAUNCH_ARGS = ("--tp-size", "2", "--dp-size", "2", "--enable-dp-attention", "--disable-cuda-graph")

    def test_0_dp_attention(self):
        info = server_info()
        self.assertTrue(info.get("enable_dp_attention"), "DP attention is off: no idle rank")
        self.assertEqual(info.get("dp_size"), 2)

    def test_3_single_requests_with_an_idle_rank(self):
        ps = prompts(8, seed=97)
        outs = [post({"input_ids": p, "sampling_params": {"temperature": 0, "ignore_eos": True,
                                                          "max_new_tokens": 12}}) for p in ps]
        wrong = [i for i, o in enumerate(outs)
                 if o["meta_info"]["finish_reason"]["type"] != "length" or o["meta_info"]["completion_tokens"] != 12]
        print(f"dp2 multi-layer idle ({AB}): {len(wrong)} of {len(outs)} single requests wrong: {wrong}")
        self.assertEqual(len(outs), 8)
        self.assertEqual(wrong, [])
        self.assertTrue(health_ok())
        self.assertIsNone(self.process.poll())


if __name__ == "__main__":
    unittest.main()

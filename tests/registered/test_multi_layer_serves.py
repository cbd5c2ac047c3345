"""multi-layer-draft (with multi-layer-grammar-mask's eager verify) on the real server: multi-layer EAGLE v2
(``--enable-multi-layer-eagle``, on by itself for MiMo-V2 targets with ``--speculative-algorithm EAGLE``) serves
decode at all. On 0.5.13 - 0.5.15.post1 ``MultiLayerEagleDraftWorker.draft`` sizes the verify tree mask from
``batch.seq_lens_sum``, which the decode preparation leaves None; on a backend without a preallocated verify mask the
scheduler then stops with a ``TypeError`` (seen on triton without CUDA graphs; on fa3 the stock side stops first at
the eager verify, below). CPU: tests/cpu/test_fix_multi_layer_draft.py on each release's real draft.

The server is test_grammar_multi_layer.py's (the tiny MiMo-V2-Flash shape with dummy weights as target and MTP draft,
EAGLE 3 steps / topk 1 / 4 tokens, fa3 carried in parts: docs/design/device-bundles.md), without a grammar. Dummy
weights give near-flat logits, so greedy text is no oracle; the claim is that the server serves: every request of
two concurrent rounds returns exactly ``max_new_tokens`` tokens (``ignore_eos``) with finish ``length``, none is
aborted, speculative verify steps ran (``avg_spec_accept_length`` reported) and the scheduler stays alive, with the
strict busy memory check on. Stock: the first decode kills the scheduler.

16 requests run at once, more than the largest CUDA graph of the shared flags (8), so verifies and draft extends also
run outside the graphs, which on 0.5.13 - 0.5.15.post1 takes two more changes: ``multi-layer-draft`` plans each MTP
step's runner in the eager draft extend (``multi-layer-draft-extend-unplanned``), and ``multi-layer-grammar-mask`` no
longer marks an eager verify as planned (``multi-layer-verify-unplanned``). Without either, the first such step stops
the scheduler with ``Size mismatch`` in ``set_kv_buffer`` (both seen on 0.5.13 - 0.5.15.post1).
"""

import unittest

from sglang_specv2_fixes.testing.client import health_ok, server_info, specv2_state
from sglang_specv2_fixes.testing.config import MODELS_DIR
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import SpecChecks
from sglang_specv2_fixes.testing.server import AB, launch, mimo_multi_layer_args, stop
from sglang_specv2_fixes.testing.tiny_models import mimo_v2
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=180, suite="specv2-gpu", releases="gpu&fix:multi-layer-draft",
                   bug_in="gpu&fix:multi-layer-draft")

N, ROUNDS = 32, 2


def max_new_tokens(i):
    return 4 + 3 * (i % 7)


class TestMultiLayerServes(CustomTestCase):
    LAUNCH_ARGS = ()  # test_dp2_multi_layer_idle.py: DP attention on 2 GPUs
    check_length_rounds = SpecChecks.check_length_rounds  # no target-only reference (dummy weights)

    @classmethod
    def setUpClass(cls):
        path = mimo_v2.build(MODELS_DIR)
        cls.process = launch(mimo_multi_layer_args(path, 16) + list(cls.LAUNCH_ARGS), target=path)

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_1_config(self):
        info = server_info()
        self.assertTrue(info.get("enable_multi_layer_eagle"), "multi-layer EAGLE is off: not the multi-layer draft")
        self.assertFalse(info["disable_overlap_schedule"], "overlap off: no spec v2")
        self.assertEqual(info["attention_backend"], "fa3")
        state = specv2_state(info)["fixes"]["multi-layer-draft"]["state"]
        self.assertEqual(state, "applied" if AB == "auto" else "disabled")

    def test_2_requests_complete(self):
        self.check_length_rounds(f"multi-layer serves ({AB})", N, ROUNDS, 90, max_new_tokens, 16)
        self.assertTrue(health_ok())
        self.assertIsNone(self.process.poll())


if __name__ == "__main__":
    unittest.main()

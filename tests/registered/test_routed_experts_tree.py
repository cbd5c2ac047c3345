"""Routed experts with tree drafting: a tiny Qwen3-MoE target (testing/tiny_models/moe.py) served with
``--enable-return-routed-experts`` and EAGLE3 steps 3 / topk 4 / 8 draft tokens (page 1, triton attention,
triton fused MoE). Every request asks ``return_routed_experts``; the experts returned per position must
equal those of a target-only server for the same greedy text.

How the releases return them: the capture is a per-token tape keyed by KV slot (``finalize()`` scatters
row r of a forward into ``out_cache_loc[r]``; at finish the request reads ``req_to_token[:seqlen - 1]``).
Spec v2 tree verify writes node k of a request to the slot of position ``seq_lens + k``; the plugin moves
the accepted nodes' KV to ``seq_lens + depth`` and must move the capture rows with it (tree-drafting's
verify body), else every position past a non-first-child branch reports a rejected node's experts.
tiny_moe routes by the input token alone with margins no numerical noise can flip, so the comparison is
exact; its greedy text is the tiny_models walk, drafted (near) perfectly by tiny_models' EAGLE3 draft,
so accepted paths run through sglang's tree order ([0, 1, 5, 7]-like, not the front chain).

Stock (fixes off) never serves this correctly. 0.5.11 - 0.5.14: the draft worker's ModelRunner re-runs
``init_routed_experts_capturer`` with the dense EAGLE3 draft's config -> ``AttributeError: 'LlamaConfig' object has
no attribute 'num_experts_per_tok'`` at startup (upstream #26980 makes a draft runner skip it; on 0.5.11/0.5.12.x
topk > 1 also falls back to spec v1). 0.5.15+: the server starts and runs spec-v2 trees (upstream compacts the KV),
but the capture rows are not moved with it (routed-experts-draft-guard's compaction, open upstream through 0.5.23),
so test_2 fails. The plugin run needs the guard as well as the compaction.
"""

import base64
import concurrent.futures
import unittest

import numpy as np

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.config import MODELS_DIR, prompts
from sglang_specv2_fixes.testing.server import AB, eagle3_args, launch, stop
from sglang_specv2_fixes.testing.client import generate, server_info, specv2_state
from sglang_specv2_fixes.testing.reference import prefetch_reference, reference_outputs
from sglang.test.test_utils import CustomTestCase

from sglang_specv2_fixes.testing.tiny_models import moe as tiny_moe

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="fix:routed-experts-draft-guard&gpu",
                   bug_in="fix:routed-experts-draft-guard&gpu")

# both servers: the prefill rows are not what this row tests (and are computed the same way in both), so the
# experimental piecewise (torch.compile) prefill graph stays out of the picture
MOE_ARGS = ["--enable-return-routed-experts", "--moe-runner-backend", "triton", "--disable-piecewise-cuda-graph"]
N_PROMPTS, NEW_TOKENS = 16, 40
STOCK_STARTUP = (
    "stock 0.5.11 - 0.5.14: the EAGLE3 draft's ModelRunner re-creates the process-global routed-experts "
    "capturer from the dense draft config (AttributeError: num_experts_per_tok) - see the server log above")


def experts(resp):
    """meta_info.routed_experts (base64 int32) -> [positions, layers, top-k], each row sorted."""
    raw = np.frombuffer(base64.b64decode(resp["meta_info"]["routed_experts"]), dtype=np.int32)
    return np.sort(raw.reshape(-1, tiny_moe.L, tiny_moe.TOPK), axis=-1)


def ids_and_experts(response):
    """What the target-only reference keeps of a response: output ids and routed experts."""
    return {"output_ids": response["output_ids"], "meta_info": {"routed_experts": response["meta_info"]["routed_experts"]}}


class TestRoutedExpertsTree(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        cls.target = tiny_moe.build(MODELS_DIR)
        cls.prompts = prompts(N_PROMPTS, seed=17)
        ref_args = dict(target=cls.target, extra_args=MOE_ARGS, keep=ids_and_experts, return_routed_experts=True)
        prefetch_reference(cls.prompts, NEW_TOKENS, **ref_args)  # starts together with the server under test
        cls.process, cls.launch_error = None, None
        try:
            cls.process = launch(eagle3_args(steps=3, topk=4, tokens=8) + ["--page-size", "1"] + MOE_ARGS,
                                 target=cls.target)
        except Exception as e:  # noqa: BLE001 - reported by every test below
            cls.launch_error = f"{type(e).__name__}: {e}"
        cls.ref = reference_outputs(cls.prompts, NEW_TOKENS, **ref_args)

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def setUp(self):
        if self.launch_error is not None and self._testMethodName != "test_0_reference_routes_as_designed":
            self.fail(f"server under test (--specv2-fixes {AB}) did not start: {self.launch_error}. "
                      f"Expected only for {STOCK_STARTUP}")

    def test_0_reference_routes_as_designed(self):
        """The target-only tape itself: one row per position, = tiny_moe.route(input token)."""
        table = np.array([[tiny_moe.route(t, l) for l in range(tiny_moe.L)] for t in range(tiny_moe.V)])
        for i, (p, r) in enumerate(zip(self.prompts, self.ref)):
            seq = p + r["output_ids"]
            got = experts(r)
            self.assertEqual(got.shape[0], len(seq) - 1, f"prompt {i}: target-only rows")
            self.assertTrue((got == table[np.array(seq[:-1])]).all(), f"prompt {i}: target-only routing != design")

    def test_1_spec_v2_tree_is_used(self):
        info = server_info()
        # the path the server took, as the plugin reports it (on 0.5.14+ every spec batch is v2: the overlap flag
        # alone no longer says which path runs)
        self.assertEqual(specv2_state(info)["serving"]["spec_path"], "v2 tree", "topk 4 does not run spec v2 trees")
        self.assertEqual(info["speculative_eagle_topk"], 4)
        self.assertTrue(info["enable_return_routed_experts"])

    def test_2_routed_experts_equal_target_only(self):
        with concurrent.futures.ThreadPoolExecutor(N_PROMPTS) as ex:
            got = list(ex.map(lambda p: generate(p, NEW_TOKENS, return_routed_experts=True), self.prompts))
        bad, extra_rows = [], []
        for i, (p, g, r) in enumerate(zip(self.prompts, got, self.ref)):
            self.assertEqual(g["output_ids"], r["output_ids"], f"prompt {i}: greedy output differs from target-only")
            a, b = experts(g), experts(r)
            # every position whose forward ran (len(prompt)+len(output)-1 rows, as target-only returns) must be
            # there; spec v2 returns one extra trailing row (the pre-claimed bonus slot of the last verify, seen
            # on both releases on the GPU), which no token's forward filled: not compared
            self.assertGreaterEqual(a.shape[0], b.shape[0], f"prompt {i}: routed-experts rows missing")
            self.assertLessEqual(a.shape[0], b.shape[0] + 1, f"prompt {i}: more than one extra routed-experts row")
            extra_rows.append(a.shape[0] - b.shape[0])
            a = a[: b.shape[0]]
            for pos in np.nonzero((a != b).any(axis=(1, 2)))[0]:
                bad.append(f"prompt {i} position {pos} ({'prompt' if pos < len(p) else f'output {pos - len(p)}'}): "
                           f"spec {a[pos].tolist()} vs target-only {b[pos].tolist()}")
        n_out = N_PROMPTS * NEW_TOKENS
        print(f"routed experts compared at {sum(len(p) for p in self.prompts) + n_out - N_PROMPTS} positions; "
              f"extra trailing rows per request: {sorted(set(extra_rows))}")
        self.assertEqual(bad, [], f"{len(bad)} of ~{n_out} generated positions report other experts than the "
                                  f"target-only run (first: {bad[:5]})")

    def test_3_tree_accepts_deep(self):
        accept = server_info()["internal_states"][0].get("avg_spec_accept_length")
        print("avg_spec_accept_length:", accept)
        # accepted paths reach depth >= 2, i.e. leave sglang's front chain: the compaction is exercised
        self.assertIsNotNone(accept)
        self.assertGreater(accept, 2.0)
        self.assertIsNone(self.process.poll())


if __name__ == "__main__":
    unittest.main()

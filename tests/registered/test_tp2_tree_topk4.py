"""Tree drafting under tensor parallelism: ``--tp-size 2`` on 2 GPUs, EAGLE3 3 steps / topk 4 / 8 draft tokens on
spec v2, page_size 1, forced retraction, strict busy leak checks, 32 concurrent requests and a concurrent abort (the
checks of ``testing.rows.TreeRow``). Each TP rank is its own scheduler process with the plugin loaded; verify's
``predict`` / ``accept_index`` / accept counts come from rank 0's broadcast, and the tree compaction, KV move and
stale-request skips then run on every rank. Greedy text must equal the TP 1 target-only reference, and the probe's
view (stale requests seen, spec-v2 results, acceptance counters) must be the same on both ranks: each rank writes
it to SGLANG_SPECV2_FIXES_PROBE_DIR on every internal-state query (only rank 0 answers /server_info).
Stock falls back to spec v1 for explicit topk > 1 (test_1 fails there)."""

import tempfile
import unittest

from sglang_specv2_fixes.testing.client import rank_views
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import TreeRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=300, suite="specv2-gpu", releases="fix:tree-drafting", bug_in="fix:tree-drafting", gpus=2)

PROBE_DIR = tempfile.mkdtemp(prefix="specv2-tp2-probe-")


class TestTp2TreeTopk4(TreeRow, CustomTestCase):
    STEPS, TOPK, TOKENS, MIN_ACCEPT = 3, 4, 8, 1.5
    LAUNCH_ARGS = ("--tp-size", "2")
    ENV = {"SGLANG_SPECV2_FIXES_PROBE": "1", "SGLANG_SPECV2_FIXES_PROBE_DIR": PROBE_DIR}

    def test_6_ranks_agree(self):
        """After the load of tests 4/5 (retraction, aborts): both ranks saw the same stale requests and the same
        spec-v2 results, and keep equal acceptance counters; the plugin reports the same fixes on each."""
        views = rank_views(PROBE_DIR)
        self.assertEqual(sorted(views), [0, 1], f"expected one probe view per TP rank, got ranks {sorted(views)}")
        probes = {r: v["probe"] for r, v in views.items()}
        self.assertGreater(probes[0]["spec_v2_results"], 0, "rank 0 saw no spec-v2 result")
        for key in ("spec_v2_results", "stale_finished_seen", "stale_retracted_seen", "live_committed_over_allocated",
                    "committed_over_allocated"):
            self.assertEqual(probes[0][key], probes[1][key], key)
        self.assertEqual(views[0]["spec_counters"], views[1]["spec_counters"])
        states = {r: {f: s["state"] for f, s in v["fixes"].items()} for r, v in views.items()}
        self.assertEqual(states[0], states[1])
        self.assertEqual(views[0]["serving"]["tp_size"], 2)
        self.assertEqual(views[0]["serving"]["spec_path"], "v2 tree")


if __name__ == "__main__":
    unittest.main()

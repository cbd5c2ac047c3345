"""live-accept-metrics (and #23456's stale-request skips on 0.5.11) under tensor parallelism: ``--tp-size 2`` on 2
GPUs, EAGLE3 3/1/4 on spec v2 with forced retraction (``test_live_accept_metrics.TestLiveAcceptMetrics``'s load and
checks). Every TP rank processes the same late overlap results; besides rank 0's counters equalling the requests'
meta_info, both ranks' probe views (stale requests seen, KV invariants, acceptance counters) must be equal: each rank
writes its view to SGLANG_SPECV2_FIXES_PROBE_DIR on every internal-state query."""

import tempfile
import unittest

import test_live_accept_metrics as base

from sglang_specv2_fixes.testing.client import rank_views
from sglang_specv2_fixes.testing.registry import register_specv2_ci

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="fix:live-accept-metrics&up-to:0.5.12.post1",
                   bug_in="fix:live-accept-metrics&up-to:0.5.12.post1", gpus=2)

PROBE_DIR = tempfile.mkdtemp(prefix="specv2-tp2-probe-")


class TestTp2LiveAcceptMetrics(base.TestLiveAcceptMetrics):
    LAUNCH_ARGS = ("--tp-size", "2")
    ENV = {"SGLANG_SPECV2_FIXES_PROBE_DIR": PROBE_DIR}

    def test_ranks_agree(self):
        base.concurrent_generate(48, lambda i: 8 + (i * 5) % 41, seed=2)
        views = rank_views(PROBE_DIR)
        self.assertEqual(sorted(views), [0, 1], f"expected one probe view per TP rank, got {sorted(views)}")
        self.assertGreater(views[0]["probe"]["spec_v2_results"], 0)
        for key in ("spec_v2_results", "stale_finished_seen", "stale_retracted_seen", "stale_finished_kv_gain",
                    "stale_retracted_kv_gain", "committed_over_allocated", "stale_stat_updates"):
            self.assertEqual(views[0]["probe"][key], views[1]["probe"][key], key)
        self.assertEqual(views[0]["spec_counters"], views[1]["spec_counters"])


if __name__ == "__main__":
    unittest.main()

"""Streaming sessions with the EAGLE (v1 draft) model on spec v1: 3 steps / topk 1 / 4 draft tokens,
``--disable-overlap-schedule``.

A regression guard (bug_in=[]): nothing the plugin patches runs on spec v1, and stock must pass too. The
checks (``testing.sessions.SessionChecks``) follow upstream's streaming-session kit; upstream runs the same case as
``TestStreamingSessionEagle`` with ``kv_inherit_offset = -1``.

Expected inheritance, from the release sources (0.5.11 line / 0.5.12.post1 line):
* with speculation ScheduleBatch.prepare_for_decode returns before its ``kv_committed_len += 1``
  (managers/schedule_batch.py:2266 / 2303); the v1 verify commits the number of tokens it appended
  (speculative/eagle_info.py:449 / 457), bonus token included, whose KV is not written yet; it stops
  appending at max_new_tokens, so there is no overshoot. A finished turn thus holds
  prompt + completion - 1 committed tokens (session/streaming_session.py:513 / 514 leaves it so);
* the next turn takes min(slot committed, input_len - 1) from the slot (streaming_session.py:238,
  schedule_batch.py:1002 / 1018) as cached_tokens: previous prompt_tokens + completion_tokens - 1,
  KV_OFFSET -1;
* no overlap scheduler: the result is processed right after its batch, so concurrency does not change it:
  KV_SLACK 0.
Greedy output must equal a target-only server (the EAGLE draft only proposes).
"""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.server import eagle3_args
from sglang_specv2_fixes.testing.sessions import SpecSessionRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=200, suite="specv2-gpu", releases="patched&gpu&up-to:0.5.12.post1")


class TestStreamingSessionsEagleV1(SpecSessionRow, CustomTestCase):
    KV_OFFSET, KV_SLACK = -1, 0
    ALGORITHM, OVERLAP = "EAGLE", False

    @classmethod
    def launch_args(cls):
        return eagle3_args(3, 1, 4, algorithm="EAGLE", draft="eagle") + ["--disable-overlap-schedule"]


if __name__ == "__main__":
    unittest.main()

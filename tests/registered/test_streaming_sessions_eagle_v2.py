"""Streaming sessions with the EAGLE3 draft on spec v2: 3 steps / topk 1 / 4 draft tokens, overlap
scheduler on (the default; SGLANG_ENABLE_SPEC_V2 defaults to True in 0.5.11 and 0.5.12.x).

A regression guard (bug_in=[]): both releases carry everything of #22651 that sessions need (the bonus-slot
pre-claim and the removed open_session gate), so stock passes and the plugin (on 0.5.11 it replaces the
spec-v2 resolve for #23456 and the verify for tree drafting) must keep it passing. The checks
(``testing.sessions.SessionChecks``) follow upstream's streaming-session kit; upstream runs the same case as
``TestStreamingSessionEagleV2`` with ``kv_inherit_offset = 0``.

Expected inheritance, from the release sources (0.5.11 line / 0.5.12.post1 line):
* open_session only requires --enable-streaming-session; there is no spec-v2 gate
  (managers/tokenizer_control_mixin.py:846 / 850);
* spec v2 prepare_for_decode pre-claims the bonus slot, ``kv_committed_len += 1``
  (speculative/eagle_info_v2.py:132 / 139, #22651), and the resolve adds accept_len - 1
  (managers/scheduler_output_processor_mixin.py:373 / 447); the overlap loop prepares the next step before
  it processes the previous result (managers/scheduler.py:1554 then 1573 / 1583 then 1602), so a turn whose
  last tokens were just accepted holds prompt + len(output_ids) committed tokens, the last token's KV being
  written by that already-launched step;
* a verify commits up to 4 tokens at once, so output_ids may overshoot max_new_tokens; the slot is trimmed
  to prompt + finished_len (session/streaming_session.py:507-519 / 508-520, _trim_overshoot);
* the next turn takes min(slot committed, input_len - 1) from the slot (streaming_session.py:238,
  managers/schedule_batch.py:1002 / 1018) as cached_tokens: previous prompt_tokens + completion_tokens,
  KV_OFFSET 0 (without the pre-claim it would be one less, like spec v1);
* when a prefill is scheduled instead of that extra step (other requests arriving) and the turn ended
  exactly at max_new_tokens, one token less is inherited: KV_SLACK 1 in the concurrent check only.
Stock 0.5.11 lacks #23456 (a late result still adds accept_len - 1 to a finished request,
scheduler_output_processor_mixin.py:373), but only on the finished Req object after its slot was saved
(streaming_session.py:70 save_from_req copies the counters) and finished requests are skipped when results
are applied (scheduler_output_processor_mixin.py:457), so no session-visible effect is expected there.
Greedy output must equal a target-only server.
"""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.server import eagle3_args
from sglang_specv2_fixes.testing.sessions import SpecSessionRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=200, suite="specv2-gpu", releases="patched&gpu&up-to:0.5.12.post1")


class TestStreamingSessionsEagleV2(SpecSessionRow, CustomTestCase):
    KV_OFFSET, KV_SLACK = 0, 1
    ALGORITHM = "EAGLE3"

    @classmethod
    def launch_args(cls):
        return eagle3_args(3, 1, 4)


if __name__ == "__main__":
    unittest.main()

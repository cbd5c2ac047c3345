"""#23802 / #25980 / #28802 / #31738 / #33758 - the finish checks see the whole accepted run.

Speculative decoding (spec v2, and dLLM blocks) appends a whole accepted run to ``Req.output_ids`` and then runs
the request's finish check once (``Req.check_finished(new_accepted_len)`` on 0.5.11 / 0.5.12.x,
``Req.update_finish_state(new_accepted_len)`` from 0.5.13). Those checks were written for one token per step:

* A (0.5.11 … 0.5.13; upstream in 0.5.14 by #23802, #25980, #28802):
  - ``Req.tail_str`` decodes only the last ``stop_str_max_len + 1`` tokens, so a stop string early in a long run is
    never seen and the request runs past the user's ``stop``;
  - a matched stop string (or regex) never sets ``finished_len``, so ``output_ids_through_stop`` (what the output
    streamer sends, token ids and text) keeps every token accepted after it;
  - EOS / stop tokens are checked before the stop string, so a run holding both finishes on the token and leaks the
    stop string;
  - ``_check_vocab_boundary_finish`` lets ``token_id == vocab_size`` through (``>`` for ``>=``).
* B (0.5.11 … 0.5.17; upstream in 0.5.18 by #33758): the ``max_new_tokens`` check runs first, so a run that holds
  EOS / a stop token / a stop string and crosses ``max_new_tokens`` finishes as ``length`` at the cap and emits the
  tokens after the stop (``[..., <eos>, <junk>]``).
* C (every release; open upstream as of 0.5.23, so beyond upstream): the check that comes first in the release's
  order wins wherever in the run it matches, not the finish that comes first in the run. 0.5.14+ (stop strings
  before stop tokens): ``[t5 (stop token), t500, t501]`` with ``stop=["t500 t501"]`` ends at the string and emits the
  tokens after ``t5``; 0.5.11 … 0.5.13 (tokens before strings, out-of-range ids): ``[t500, t501, t5]`` ends at
  ``t5``. One-token decoding stops at the first finish; two stop strings of one request likewise.

The patches port upstream's own code, per release, into the release's functions:

* 0.5.11 / 0.5.12.x / 0.5.13 (A, B, C): ``tail_str(new_accepted_len=1)`` widens its window by the run
  (``stop_match_tail_len`` below, upstream's ``Req._stop_match_tail_len``);
  ``_check_str_based_finish(new_accepted_len=1)`` sets ``finished_len`` at the first prefix of the run that holds the
  match (``locate_str_stop_finished_len``, upstream's ``Req._locate_str_stop_finished_len``); both parameters are
  new and defaulted as in 0.5.14, so ``check_match_stop_str_prefix`` (the streamer's hold-back, ``tail_str()``) keeps
  the stock window; ``_check_vocab_boundary_finish`` uses ``>=`` and, as #33758, skips the upper bound when
  ``vocab_size`` is None (prefill-only embedding / scoring requests, which now reach it); ``check_finished`` /
  ``update_finish_state`` call ``first_finish``.
* 0.5.14 … 0.5.17 (B, C): ``update_finish_state`` calls ``first_finish``; the ``vocab_size`` None guard.
* 0.5.18 … 0.5.23 (C; ``update_finish_state`` byte-identical, fingerprint ac20519c269e99ac): it calls
  ``first_finish``.

``first_finish`` (below, the rule written once): every check of the release's finish method (max_new_tokens, grammar
termination, EOS / stop tokens, out-of-range ids, stop strings and regexes) gives its finish position in the run
without committing anything (``finished_reason`` / ``finished_len`` restored, the id that
``_check_vocab_boundary_finish`` rewrites put back); the earliest position wins and only the winner is committed. A
tie at one token goes to the release's own one-token order (``ORDER_*`` below: 0.5.11 … 0.5.13 length, grammar,
tokens, ids, strings; 0.5.14 … 0.5.16 length, grammar, ids, strings, tokens; 0.5.17 length, ids, strings, tokens,
grammar; 0.5.18+ ids, strings, tokens, length, grammar), so one-token steps (non-speculative decoding, the oracle, and
spec v1) give exactly stock's result, on 0.5.11 … 0.5.13 with A's fixes (``>= vocab_size``; a stop string's
finished_len set, the same tokens). ``max_new_tokens`` is a finish at the cap: a stop past it is a length finish at
the cap (B, upstream's ``_cap_finished_len_at_max_new_tokens``). Grammar termination is a finish at the run's end: a
grammar-terminated run that holds EOS ends at the EOS (#31738's point, on every release).

A patch file can only change functions the release has, so upstream's two new ``Req`` methods are functions below
(written once, the same on every release), imported only on a step with stop strings; ``first_finish`` is imported
by every patched finish check.

tests/cpu/test_fix_multi_token_finish.py checks the plugin body against one-token decoding on every release.
"""

from __future__ import annotations

import re

from ..catalog import Fix

FIX = Fix(
    name="multi-token-finish",
    upstream=("#23802", "#25980", "#28802", "#31738", "#33758"),
    title="finish checks see the whole accepted run; the first finish in the run wins",
    what=(
        "Req.tail_str / Req._check_str_based_finish (0.5.11 … 0.5.13): the stop-string window covers the whole "
        "accepted run and a matched stop string or regex sets finished_len at the stop; "
        "Req._check_vocab_boundary_finish: >= vocab_size, no upper bound without a vocab size; Req.check_finished "
        "(0.5.11 / 0.5.12.x) / Req.update_finish_state (0.5.13 … 0.5.23): every check's finish position in the run "
        "is found without committing and the earliest wins (a tie: the release's own one-token order; "
        "max_new_tokens a finish at the cap, so a stop past it is a length finish there)"
    ),
    why=(
        "with speculative decoding a stop string early in an accepted run is missed (the request runs on) or leaks "
        "the tokens accepted after it, a run that holds EOS / a stop and crosses max_new_tokens returns the tokens "
        "after the stop with finish_reason length, and on every release the check first in the order wins wherever "
        "in the run it matches (a stop string after a stop token ends the run at the string, emitting the tokens "
        "after the stop token), where one-token decoding stops at the first"
    ),
    removal=(
        "A is upstream from 0.5.14, B from 0.5.18; beyond upstream: the first finish in the run wins — open "
        "upstream as of 0.5.23, so every release keeps its patch file until upstream finishes a run at its first "
        "finish; then the 0.5.11 / 0.5.13 patch files go when 0.5.13 leaves the supported releases, the 0.5.14 / "
        "0.5.17 ones when 0.5.17 does"
    ),
)


# ------------------------------------------------------------------ code the patched functions call
def stop_match_tail_len(req, new_accepted_len: int) -> int:
    """Upstream 0.5.14's ``Req._stop_match_tail_len``: tokens ``tail_str`` decodes, widened by the run so the first
    token accepted in this step is still covered (``new_accepted_len=1`` gives the stock window)."""
    max_len_tail_str = max(
        req.sampling_params.stop_str_max_len + 1,
        req.sampling_params.stop_regex_max_len + 1,
    )
    return min(max_len_tail_str + max(new_accepted_len - 1, 0), len(req.output_ids))


def locate_str_stop_finished_len(req, new_accepted_len: int, *, stop_str=None, stop_regex=None) -> int:
    """Upstream 0.5.14's ``Req._locate_str_stop_finished_len``: the ``output_ids`` length (stop included) at which a
    stop string / regex already known to be in the tail window first matches, scanning the prefixes that end at
    each token accepted in this step (older prefixes were checked in earlier steps)."""

    def matched(text: str) -> bool:
        if stop_str is not None:
            return stop_str in text
        return re.search(stop_regex, text) is not None

    tail_len = stop_match_tail_len(req, new_accepted_len)
    start = len(req.output_ids) - tail_len
    token_window = req.output_ids[start:]
    for token_count in range(max(1, len(token_window) - new_accepted_len + 1), len(token_window)):
        if matched(req.tokenizer.decode(token_window[:token_count])):
            return start + token_count
    # the caller found the match in the full window
    return len(req.output_ids)


# The release's own one-token check order (stock ``check_finished`` / ``update_finish_state``), which decides a tie
# at one token position: "length" (max_new_tokens), "grammar" (termination), "token" (EOS / stop token ids), "vocab"
# (out-of-range / NaN ids), "str" (stop strings and regexes).
ORDER_0_5_11 = ("length", "grammar", "token", "vocab", "str")  # 0.5.11 … 0.5.13
ORDER_0_5_14 = ("length", "grammar", "vocab", "str", "token")  # 0.5.14 … 0.5.16
ORDER_0_5_17 = ("length", "vocab", "str", "token", "grammar")  # 0.5.17 (#31738)
ORDER_0_5_18 = ("vocab", "str", "token", "length", "grammar")  # 0.5.18 … 0.5.23 (#33758: a stop on the cap wins)

_STATE = ("finished_reason", "finished_len")  # what the checks set on the request (vocab also rewrites an id)


def first_finish(req, new_accepted_len: int, order) -> bool:
    """Finish ``req`` at the first finish position within the accepted run (beyond upstream, which lets the check that
    comes first in its order win wherever in the run it matches); a tie at one position goes to the check first in
    ``order``, the release's own one-token order, so one-token steps give exactly stock's result. True if finished.

    Each check runs on the request as it is, without committing: a check later in ``order`` runs on ``output_ids``
    cut just before the best finish found so far (it wins only strictly earlier), a check that located its finish
    runs again on the ids before it (a stop string listed later may complete earlier), and every run is undone
    (``finished_reason``, ``finished_len``, the run's ids, which ``_check_vocab_boundary_finish`` rewrites). Only the
    winner is committed. A decode never sees an out-of-range id: "vocab" precedes "str" in every release's order,
    so the string check runs on the ids before it. ``max_new_tokens`` is a check at position max_new_tokens: a stop
    past the cap becomes a length finish at the cap. Grammar termination is a finish at the end of the run."""
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH, FINISH_MATCHED_TOKEN

    ids = req.output_ids
    full = len(ids)
    start = full - min(max(new_accepted_len, 1), full)
    run_ids = ids[start:]
    saved = tuple(getattr(req, name) for name in _STATE)
    max_new_tokens = req.sampling_params.max_new_tokens

    def evaluate(check, limit):
        """(position, state, run ids) if ``check`` finishes ``output_ids[:limit]``, else None; nothing kept."""
        if check == "length":
            if limit < max_new_tokens:
                return None
            return max_new_tokens, (FINISH_LENGTH(length=max_new_tokens), max_new_tokens), None
        if check == "grammar":
            if limit < full or req.grammar is None or not req.grammar.is_terminated():
                return None
            return full, (FINISH_MATCHED_TOKEN(matched=ids[-1]), saved[1]), None
        n = limit - start
        cut, dirty = limit < full, True
        if cut:
            del ids[limit:]
        try:
            if check == "token":
                fired = req._check_token_based_finish(ids[-n:])
            elif check == "vocab":
                fired = req._check_vocab_boundary_finish(ids[-n:])
            else:
                fired = req._check_str_based_finish(n)
            state = tuple(getattr(req, name) for name in _STATE)
            if not fired and state[0] is saved[0]:
                dirty = False  # the common step: nothing set, nothing to undo
                return None
            # a located finish, or a reason without one (a stop string in decoded_text, an invalid regex's abort)
            pos = state[1] if fired and state[1] is not None else limit
            return pos, state, ids[start:pos]
        finally:
            if dirty:
                for name, value in zip(_STATE, saved):
                    setattr(req, name, value)
            if dirty or cut:
                del ids[start:]
                ids.extend(run_ids)

    best = None
    for check in order:
        limit = full if best is None else best[0] - 1
        while limit >= (start + 1 if check not in ("length", "grammar") else 0):
            found = evaluate(check, limit)
            if found is None:
                break
            best = found
            if check in ("length", "grammar") or found[1][1] is None:
                break
            limit = found[0] - 1  # the same check may finish earlier (another stop string)
    if best is None:
        return False
    pos, (reason, finished_len), new_ids = best
    req.finished_reason = reason
    req.finished_len = pos if finished_len is None and pos < full else finished_len
    if new_ids is not None:
        ids[start:pos] = new_ids
    return True

"""#28682 (upstream from 0.5.14): with spec v2 and grammar, the tokens of an accepted run that come after the token
which terminates the request's grammar are committed to KV and appended to the output (0.5.11 … 0.5.13).

The spec-v2 verify builds its vocab mask by walking the draft through the grammar (``spec_utils.traverse_tree``):
once the grammar terminates at a draft position, the mask of the positions after it is left unfilled, i.e. every
token allowed, so the target can accept draft tokens past the grammar's end. The result processor then commits the
whole run (``kv_committed_len += accept_len - 1``) and extends ``output_ids`` with it before the grammar accepts it
(the grammar wrapper ignores tokens once terminated). The client output is cut only where a stop token is also
matched (``finished_len``); the KV, ``output_ids`` and what later inserts them in the radix cache keep the suffix.
0.5.14 (#28682, ``_accept_grammar_tokens``) stops accepting at the terminating token in the spec-v2 resolve step.

The patch changes each release's ``Scheduler.process_batch_result``: before a spec-v2 decode result with grammar
requests goes to the release's decode step, ``cut_runs_at_grammar_end`` (below, the same on every release) walks
each live request's accepted run through its grammar as the release's own mask builder does (``accept_token``, then
``rollback``) and shortens the run (``result.accept_lens``, on the CPU) to end at the terminating token. The decode
step itself is unchanged (its resolve, KV commit, output and grammar accept then see the shorter run); it is the
only function in that path no other fix replaces on these releases (``_resolve_spec_overlap_token_ids`` is
skip-stale-overlap-updates' on 0.5.11, ``process_batch_result_decode`` live-accept-metrics' on every release).
Differences from upstream: the acceptance counters count the shortened run (upstream counts the whole verified run),
and the grammar walks a run twice where the grammar terminates in it or not at all (probe, then the decode step's
accept; a few matcher steps per request per step, grammar requests only).

Not covered here: #29110's PD-decode double accept of the prefill token. Its site was not located in 0.5.11 …
0.5.13's source (``process_prebuilt_extend`` accepts the prefill token only while ``current_token`` is None, as in
0.5.14); the stale-grammar verify of PD decode on those releases is #28039, fixed by grammar-result-order.
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="grammar-run-end",
    upstream=("#28682",),
    title="spec v2 + grammar: an accepted run ends at the token that terminates the grammar",
    what=(
        "Scheduler.process_batch_result: before a spec-v2 decode result with grammar requests reaches the decode "
        "step, each live request's accepted run is walked through its grammar (accept_token, then rollback, as the "
        "release's verify mask builder does) and result.accept_lens is cut at the token that terminates it"
    ),
    why=(
        "the verify's vocab mask allows every token after the grammar's terminal token, so tokens past the grammar's "
        "end are accepted, committed to KV and appended to output_ids (shown to the client where no stop token cuts "
        "them)"
    ),
    removal="delete when 0.5.13.x leaves the supported releases (upstream from 0.5.14)",
)


def cut_runs_at_grammar_end(batch, result, stride):
    """Shorten ``result.accept_lens[i]`` (a CPU tensor, the run of request ``i`` in ``result.next_token_ids`` at
    ``i * stride``) to end at the token that terminates ``batch.reqs[i]``'s grammar; the grammars are left as they
    were. Finished, retracted and grammar-less requests, and a run the grammar rejects (the decode step aborts that
    request as before), are left alone. Returns the number of runs cut."""
    cut = 0
    accept_lens, next_token_ids = result.accept_lens, result.next_token_ids
    for i, req in enumerate(batch.reqs):
        grammar = req.grammar
        if grammar is None or req.finished() or req.is_retracted or grammar.is_terminated():
            continue
        n = int(accept_lens[i])
        end = run_end(grammar, next_token_ids[i * stride : i * stride + n].tolist())
        if end < n:
            accept_lens[i] = end
            cut += 1
    return cut


def run_end(grammar, tokens):
    """How many of ``tokens`` the grammar accepts up to and including the one that terminates it (``len(tokens)``
    when it does not terminate, or rejects a token); ``grammar`` is rolled back to where it was."""
    accepted = 0
    try:
        for token in tokens:
            grammar.accept_token(token)
            accepted += 1
            if grammar.is_terminated():
                return accepted
    except ValueError:  # a token the grammar rejects: the decode step meets it too and aborts the request
        pass
    finally:
        if accepted:
            grammar.rollback(accepted)
    return len(tokens)

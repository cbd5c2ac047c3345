"""``--grammar-backend outlines`` with a speculative algorithm is refused at startup, with the way out (every release
0.5.11 - 0.5.23; upstream #24413, open; #24889, a fix, closed unmerged).

A speculative verify with a grammar walks the draft tree through ``spec_utils.traverse_tree``: it allocates the
request's vocab mask with the grammar's ``allocate_vocab_mask`` and reads it as xgrammar / llguidance keep it, 32
tokens packed per int32 word (``parent_bitmask[token // 32] & (1 << (token % 32))``). ``OutlinesGrammar`` keeps a
dense ``torch.bool`` mask, one element per token: the test reads the wrong element for every token past 31, so a draft
token is accepted or rejected by another token's bit (wrong allowed tokens). After the walk the verify rolls the grammar
back (``grammar.rollback``), which ``OutlinesGrammar`` does not implement (``BaseGrammarObject.rollback`` raises
NotImplementedError): the scheduler dies in the middle of serving.

A working outlines path (its mask in the packed layout, and a rollback, which outlines' ``RegexGuide`` state has no
history for) needs the outlines package to prove on the CPU, and the CPU environment cannot import it. So the guard
refuses the combination where it is decided: ``create_grammar_backend``, which the scheduler calls at startup
(``GrammarManager.__init__``), raises ValueError when the backend is the stock outlines one and a speculative
algorithm is set, naming the combination and the way out (``--grammar-backend xgrammar`` or ``llguidance``, which
pack their masks and roll back; or no speculative decoding). A custom backend registered under the name
``outlines`` (``GRAMMAR_BACKEND_REGISTRY``) is not the stock one and is left alone.

Removal: per release once upstream either refuses the combination or gives OutlinesGrammar a packed mask and a
rollback (open as of 0.5.23).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="outlines-spec-guard",
    upstream=(),
    related=("#24413", "#24889"),
    title="--grammar-backend outlines + speculative decoding: refused at startup, not wrong tokens",
    what=(
        "create_grammar_backend raises ValueError at scheduler startup when the stock outlines backend is chosen "
        "and a speculative algorithm is set, naming the combination and the way out (--grammar-backend xgrammar or "
        "llguidance, or no speculative decoding)"
    ),
    why=(
        "the speculative verify's traverse_tree reads the vocab mask as packed 32-bit words while outlines keeps a "
        "dense bool mask (wrong allowed tokens), then calls grammar.rollback, which OutlinesGrammar lacks "
        "(NotImplementedError in the middle of serving)"
    ),
    removal="per release once upstream refuses the combination or fixes the outlines mask and rollback (open as of 0.5.23)",
)


def refuse_with_spec(speculative_algorithm) -> None:
    """Raise ValueError when a speculative algorithm is set (called where the stock outlines backend is built)."""
    if speculative_algorithm is None or str(speculative_algorithm).upper() == "NONE":
        return
    raise ValueError(
        f"--grammar-backend outlines does not work with --speculative-algorithm {speculative_algorithm}: the "
        "speculative verify reads the grammar's vocab mask as packed 32-bit words (outlines keeps one bool per "
        "token) and rolls the grammar back (OutlinesGrammar has no rollback), so it would pick wrong tokens and then "
        "crash. Use --grammar-backend xgrammar (the default) or llguidance with speculative decoding, or drop "
        "--speculative-algorithm to keep outlines (sglang-specv2-fixes: outlines-spec-guard, upstream #24413)."
    )

"""The reference the CPU attention tests compare a backend's forward with (fa3: tests/cpu/test_fix_fa3_draft_extend_graph.py,
test_fix_verify_handoff_fa3.py through ``fa3_cpu``; flashinfer: test_fix_flashinfer_draft_extend_graph.py and its 0.5.13
twin): causal attention of each draft row over its request's KV, at the tests' shared head shape."""

H, D, KVH = 2, 16, 2  # query heads, head dim, KV heads


def causal_errors(o, q, pool, req_pool, rows, prefix, w):
    """Per query row of the first ``len(rows)`` requests (``w`` each, the last ``w`` of ``prefix + w`` KV): the largest
    difference between ``o`` (rows x heads x dim) and causal attention over that request's KV."""
    import torch

    k_buf, v_buf = pool.get_key_buffer(0), pool.get_value_buffer(0)
    errs = []
    for i, (r, p) in enumerate(zip(rows, prefix)):
        slots = req_pool.req_to_token[r, : p + w].long()
        keys, vals = k_buf[slots], v_buf[slots]
        for j in range(w):
            qj = q[i * w + j].view(H, D)
            att = torch.softmax((qj[:, None, :] * keys[: p + j + 1].transpose(0, 1)).sum(-1) * D**-0.5, dim=-1)
            errs.append(float((o[i * w + j] - (att[:, :, None] * vals[: p + j + 1].transpose(0, 1)).sum(1)).abs().max()))
    return errs

"""Cross-cutting behaviour of the Python layer: no leaks (RSS stable over
many calls, no reference cycles), autograd wrappers (forward unchanged, backward
fills the input gradients; their values: test_py_backward.py), threads, CUDA-without-CUDA error."""
import gc
import threading

import numpy as np
import pytest
import torch

from test_py_common import gen, needs, randn, rel_err, rss_kb
import longattn


def _calls(n, fn):
    for _ in range(n):
        fn()


@pytest.fixture
def one_thread():
    """Leak tests make thousands of tiny calls: one CPU thread keeps them
    quick on a busy machine (an OpenMP team per tiny call is pure overhead)."""
    old = longattn.get_num_threads()
    longattn.set_num_threads(1)
    yield
    longattn.set_num_threads(old)


@needs("softmax_attention", "linear_attention")
def test_rss_stable_over_many_calls(one_thread):
    g = gen(21)
    q, k, v = randn(g, 1, 32, 2, 16), randn(g, 1, 32, 2, 16), randn(g, 1, 32, 2, 16)
    qn, kn, vn = q.numpy(), k.numpy(), v.numpy()

    def one():
        longattn.softmax_attention(q, k, v, return_lse=True)
        longattn.softmax_attention(qn, kn, vn)
        longattn.linear_attention(q, k, v, causal=True, output_final_state=True)
        try:
            longattn.softmax_attention(q, k[:, :3], v)
        except ValueError:
            pass

    W = np.full((64, 64), 0.01, np.float32)
    kc = randn(g, 40, 16)

    def states():
        # C-side states freed by close() and by garbage collection (__del__)
        if longattn.has_op("MHLADecoder"):
            with longattn.MHLADecoder(W, 1, 2, 16, chunk=4) as dec:
                dec.append(q[:, :5], k[:, :5], v[:, :5])
            longattn.MHLADecoder(W, 1, 2, 16, chunk=4)
        if longattn.has_op("IndexCache"):
            c = longattn.IndexCache(16, capacity=4096, block=8)  # 256 KiB of keys
            c.append(kc)
            longattn.IndexCache(16, capacity=4096, block=8).close()

    _calls(100, states)
    gc.collect()
    before = rss_kb()
    _calls(2000, states)
    gc.collect()
    grown = rss_kb() - before
    assert grown < 16 * 1024, "RSS grew by %d KiB over 2000 state create/free" % grown

    _calls(300, one)  # warm up allocator pools
    gc.collect()
    before = rss_kb()
    _calls(2000, one)
    gc.collect()
    grown = rss_kb() - before
    # 2000 iterations allocate ~8000 outputs of ~4 KiB each: a leak of the
    # outputs, views or contexts would grow RSS by tens of MiB.
    assert grown < 8 * 1024, "RSS grew by %d KiB over 2000 iterations" % grown


@needs("softmax_attention", "linear_attention")
def test_no_reference_cycles(one_thread):
    g = gen(22)
    q, k, v = randn(g, 1, 16, 2, 8), randn(g, 1, 16, 2, 8), randn(g, 1, 16, 2, 8)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(20):
            longattn.softmax_attention(q, k, v, return_lse=True)
            longattn.softmax_attention(q.numpy(), k.numpy(), v.numpy())
            longattn.linear_attention(q, k, v, causal=True, output_final_state=True)
            qg = q.clone().requires_grad_(True)
            longattn.softmax_attention(qg, k, v).sum()
            try:
                longattn.softmax_attention(q, k[:, :3], v)
            except ValueError:
                pass
        gc.collect()
        cyclic = list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert not cyclic, "objects only reachable through cycles: %r" % (
        [type(o).__name__ for o in cyclic[:20]],)


@needs("softmax_attention")
def test_autograd_forward_has_grad_fn_and_backward_runs():
    g = gen(23)
    q, k, v = randn(g, 1, 20, 2, 8), randn(g, 1, 20, 2, 8), randn(g, 1, 20, 2, 8)
    qg = q.clone().requires_grad_(True)
    o, lse = longattn.softmax_attention(qg, k, v, return_lse=True)
    assert o.requires_grad and o.grad_fn is not None
    assert type(o.grad_fn).__name__.startswith("SoftmaxAttentionFunction")
    assert rel_err(o.detach(), longattn.softmax_attention(q, k, v)) == 0
    o.sum().backward()
    assert qg.grad is not None and qg.grad.shape == q.shape and torch.isfinite(qg.grad).all()
    with torch.no_grad():
        assert not longattn.softmax_attention(qg, k, v).requires_grad


@needs("linear_attention")
def test_autograd_linear_with_state_keeps_return_structure():
    g = gen(24)
    q, k, v = randn(g, 1, 20, 2, 8), randn(g, 1, 20, 2, 8), randn(g, 1, 20, 2, 4)
    vg = v.clone().requires_grad_(True)
    o, (S, z) = longattn.linear_attention(q, k, vg, causal=True, output_final_state=True)
    o0, (S0, z0) = longattn.linear_attention(q, k, v, causal=True, output_final_state=True)
    assert torch.equal(o.detach(), o0) and torch.equal(S, S0) and torch.equal(z, z0)
    assert o.requires_grad
    (o.sum() + S.sum() + z.sum()).backward()
    assert vg.grad is not None and vg.grad.shape == v.shape and torch.isfinite(vg.grad).all()


@needs("softmax_attention")
def test_concurrent_threads_give_the_same_results():
    g = gen(25)
    q, k, v = randn(g, 2, 200, 2, 32), randn(g, 2, 200, 2, 32), randn(g, 2, 200, 2, 32)
    want = longattn.softmax_attention(q, k, v, causal=True)
    errs = []

    def worker():
        try:
            for _ in range(10):
                o = longattn.softmax_attention(q, k, v, causal=True)
                if not torch.equal(o, want):
                    errs.append("mismatch")
                try:
                    longattn.softmax_attention(q, k[..., :5], v)
                except ValueError as e:  # thread-local message of this call
                    if "5" not in e.message:
                        errs.append(e.message)
        except Exception as e:  # pragma: no cover
            errs.append(repr(e))

    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs, errs


@needs("softmax_attention")
def test_outputs_follow_the_first_input():
    g = gen(26)
    q, k, v = randn(g, 1, 9, 1, 4), randn(g, 1, 9, 1, 4), randn(g, 1, 9, 1, 4)
    # mixed kinds: the output is of q's kind
    assert isinstance(longattn.softmax_attention(q.numpy(), k, v), np.ndarray)
    assert isinstance(longattn.softmax_attention(q, k.numpy(), v.numpy()), torch.Tensor)


@needs("softmax_attention")
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error path")
def test_cuda_request_without_cuda_is_a_clear_error(monkeypatch):
    # A CPU-only machine cannot make a CUDA tensor; check the path that
    # answers for one, with a stand-in object that looks like a CUDA tensor.
    import longattn._tensor as T
    if longattn.cuda_available():
        pytest.skip("library sees a GPU")
    c = T.Call("softmax_attention", torch.zeros(1))
    c.cuda = True
    with pytest.raises(RuntimeError, match="without CUDA or sees no GPU"):
        c.run("la_softmax_attention", None, None, None, None, None, None)


def _autograd_cases(g):
    q, k, v = randn(g, 1, 16, 2, 8), randn(g, 1, 16, 2, 8), randn(g, 1, 16, 2, 8)
    W4 = torch.full((4, 4), 0.25)
    idx = torch.arange(8, dtype=torch.int32).repeat(16, 1)
    return [
        ("softmax_attention", lambda x: longattn.softmax_attention(x, k, v)),
        ("linear_attention", lambda x: longattn.linear_attention(x, k, v, causal=True)),
        ("mhla", lambda x: longattn.mhla(x, k, v, W4, blocks=4)),
        ("mhla_causal", lambda x: longattn.mhla_causal(x, k, v, W4, chunk=4)),
        ("focused_attention", lambda x: longattn.focused_attention(x, k, v, map=(4, 4))),
        ("sparse_attention", lambda x: longattn.sparse_attention(x[0], k[0, :, 0], idx,
                                                                 dv=8)[0]),
    ], q


@pytest.mark.parametrize("op", ["softmax_attention", "linear_attention", "mhla",
                                "mhla_causal", "focused_attention", "sparse_attention"])
def test_every_attention_op_has_an_autograd_wrapper(op):
    if not longattn.has_op(op):
        pytest.skip("%s not in the library yet" % op)
    cases, q = _autograd_cases(gen(27))
    fn = dict(cases)[op]
    want = fn(q)
    qg = q.clone().requires_grad_(True)
    o = fn(qg)
    assert o.requires_grad and torch.equal(o.detach(), want)
    o.sum().backward()
    assert qg.grad is not None and qg.grad.shape == q.shape and torch.isfinite(qg.grad).all()


@needs("linear_attention")
def test_context_allocator_callbacks(one_thread):
    """la_context_set_allocator through ctypes callbacks: the library's
    workspace comes from the Python-provided allocator and is all returned."""
    import ctypes
    from longattn import _lib
    from longattn._tensor import Context, view
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    live, calls = {}, [0]

    def alloc(n, user):
        p = libc.malloc(n)
        live[p] = n
        calls[0] += 1
        return p

    def free(p, user):
        live.pop(p, None)
        libc.free(p)

    af, ff = _lib.la_alloc_fn(alloc), _lib.la_free_fn(free)
    ctx = Context()
    assert _lib.lib.la_context_set_allocator(ctx.handle, af, ff, None) == 0
    ctx.prepare(None)
    g = gen(28)
    q, k, v = randn(g, 1, 200, 2, 16), randn(g, 1, 200, 2, 16), randn(g, 1, 200, 2, 8)
    out = torch.empty(1, 200, 2, 8)
    p = _lib.la_linear_params()
    _lib.lib.la_linear_params_init(ctypes.byref(p))
    p.causal = 1
    tv = [view(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v"), (out, "out"))]
    s = _lib.lib.la_linear_attention(ctypes.byref(p), *[ctypes.byref(t) for t in tv],
                                     None, None, None, None, ctx.handle)
    assert s == 0, _lib.lib.la_last_error()
    assert calls[0] > 0 and not live
    assert rel_err(out, longattn.linear_attention(q, k, v, causal=True)) == 0
    del ctx

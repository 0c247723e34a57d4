"""CUDA path of the Python layer (run on the GPU machine: `pytest -m cuda`;
skipped where torch.cuda is unavailable or the library has no CUDA).

Torch CUDA tensors go to the CUDA backend on torch's current stream with no
synchronization; outputs are CUDA tensors on the inputs' device. Results
are compared with the CPU path of the same library (itself tested against
float64 references) and, for softmax, with the float64 reference."""
import ctypes

import pytest
import torch

from test_py_common import bhnd, cuda, gen, needs, needs_cuda, randn, rel_err
from test_py_softmax import ref_softmax
import longattn
from longattn import _lib

pytestmark = [cuda, needs_cuda]


@pytest.fixture(autouse=True)
def _library_has_cuda():
    if not longattn.cuda_available():
        pytest.skip("liblongattn built without CUDA (%s)" % longattn.build_info())


def dev(*xs):
    return [x.cuda() for x in xs]


def run_or_skip(fn, *a, **kw):
    """Call an op on CUDA inputs; an op without a CUDA kernel must say so
    (LA_ERR_UNSUPPORTED), which skips the test instead of failing it."""
    try:
        return fn(*a, **kw)
    except longattn.LongattnUnsupportedError as e:
        pytest.skip("no CUDA kernel: %s" % e)


@needs("softmax_attention")
def test_softmax_cuda_on_current_stream_without_sync():
    g = gen(81)
    q, k, v = randn(g, 2, 300, 4, 64), randn(g, 2, 300, 2, 64), randn(g, 2, 300, 2, 48)
    qc, kc, vc = dev(q, k, v)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        o, lse = run_or_skip(longattn.softmax_attention, qc, kc, vc, causal=True,
                             return_lse=True)
        # the thread's context carries this stream
        got = ctypes.c_void_p()
        ctx = longattn._tensor.thread_context()
        assert _lib.lib.la_context_get_cuda_stream(ctx.handle, ctypes.byref(got)) == 0
        assert (got.value or 0) == s.cuda_stream
    s.synchronize()
    assert o.is_cuda and o.device == qc.device and o.dtype == torch.float32
    assert lse.is_cuda and lse.dtype == torch.float32
    ro, rl = ref_softmax(q, k, v, causal=True)
    assert rel_err(o.cpu(), ro) <= 1e-5 and rel_err(lse.cpu(), rl) <= 1e-5
    ob = run_or_skip(longattn.softmax_attention, *(x.bfloat16() for x in (qc, kc, vc)),
                     causal=True)
    torch.cuda.synchronize()
    assert ob.dtype == torch.bfloat16 and ob.is_cuda
    assert rel_err(ob.cpu(), ro) <= 1e-2
    os_ = run_or_skip(longattn.softmax_attention, bhnd(qc), bhnd(kc), bhnd(vc), causal=True)
    torch.cuda.synchronize()
    assert rel_err(os_.cpu(), o.cpu()) <= 1e-6


@needs("linear_attention")
def test_linear_cuda_matches_cpu():
    g = gen(82)
    q, k, v = randn(g, 2, 200, 2, 32), randn(g, 2, 200, 2, 32), randn(g, 2, 200, 2, 16)
    for causal in (False, True):
        want = longattn.linear_attention(q, k, v, causal=causal)
        got = run_or_skip(longattn.linear_attention, *dev(q, k, v), causal=causal)
        torch.cuda.synchronize()
        assert got.is_cuda and rel_err(got.cpu(), want) <= 1e-5
    want, (S, z) = longattn.linear_attention(q, k, v, causal=True, output_final_state=True)
    got, (Sc, zc) = run_or_skip(longattn.linear_attention, *dev(q, k, v), causal=True,
                                output_final_state=True)
    torch.cuda.synchronize()
    assert Sc.is_cuda and rel_err(Sc.cpu(), S) <= 1e-5 and rel_err(zc.cpu(), z) <= 1e-5


@needs("mhla", "mhla_causal")
def test_mhla_cuda_matches_cpu():
    g = gen(83)
    q, k, v = randn(g, 1, 256, 2, 32), randn(g, 1, 256, 2, 32), randn(g, 1, 256, 2, 32)
    W = torch.from_numpy(longattn.mhla_init((4, 4)))
    want = longattn.mhla(q, k, v, W, grid=(16, 16), blocks=(4, 4))
    got = run_or_skip(longattn.mhla, *dev(q, k, v, W), grid=(16, 16), blocks=(4, 4))
    torch.cuda.synchronize()
    assert rel_err(got.cpu(), want) <= 1e-5
    Wc = torch.from_numpy(longattn.mhla_init(4, "uniform_causal"))
    want = longattn.mhla_causal(q, k, v, Wc)
    got = run_or_skip(longattn.mhla_causal, *dev(q, k, v, Wc))
    torch.cuda.synchronize()
    assert rel_err(got.cpu(), want) <= 1e-5


@needs("focused_attention")
def test_focused_cuda_matches_cpu():
    g = gen(84)
    q, k, v = randn(g, 1, 196, 2, 32), randn(g, 1, 196, 2, 32), randn(g, 1, 196, 2, 32)
    w, b = randn(g, 32, 5, 5) * 0.1, randn(g, 32)
    want = longattn.focused_attention(q, k, v, map=(14, 14), conv=w, conv_bias=b)
    got = run_or_skip(longattn.focused_attention, *dev(q, k, v), map=(14, 14), conv=w.cuda(),
                      conv_bias=b.cuda())
    torch.cuda.synchronize()
    assert rel_err(got.cpu(), want) <= 1e-5


@needs("dsa_topk", "hisa_topk", "topk")
def test_indexers_cuda_match_cpu():
    g = gen(85)
    T, L = 32, 2000
    q, k = randn(g, T, 8, 64), randn(g, L, 64)
    w = torch.rand(T, 8, generator=g, dtype=torch.float64).float() / 16
    i_cpu, s_cpu = longattn.dsa_topk(q, k, w, topk=128, return_scores=True)
    i_gpu, s_gpu = run_or_skip(longattn.dsa_topk, *dev(q, k, w), topk=128, return_scores=True)
    torch.cuda.synchronize()
    assert i_gpu.is_cuda and i_gpu.dtype == torch.int32
    assert rel_err(s_gpu.cpu(), s_cpu) <= 1e-5
    # same selection up to near-ties: compare the CPU scores of both choices
    sc = s_cpu.double()
    a = torch.gather(sc, 1, i_cpu.long().clamp(min=0)).sort(1).values
    b = torch.gather(sc, 1, i_gpu.cpu().long().clamp(min=0)).sort(1).values
    assert (a - b).abs().max() <= 1e-5 * sc[torch.isfinite(sc)].abs().max()
    h = run_or_skip(longattn.hisa_topk, *dev(q, k, w), topk=128, block=64, block_topk=8)
    torch.cuda.synchronize()
    assert h.is_cuda and h.shape == (T, 128)
    t = run_or_skip(longattn.topk, s_cpu.cuda(), 16)
    torch.cuda.synchronize()
    # the same float32 scores: the rule (descending, ties to the lower index) fixes the answer
    assert torch.equal(t.cpu(), longattn.topk(s_cpu, 16))


@needs("sparse_attention")
def test_sparse_attention_cuda_matches_cpu():
    g = gen(86)
    T, L = 16, 1000
    q, kv = randn(g, T, 16, 576), randn(g, L, 576)
    idx = torch.stack([torch.randperm(L, generator=g)[:128] for _ in range(T)]).int()
    want = longattn.sparse_attention(q, kv, idx, dv=512)
    got = run_or_skip(longattn.sparse_attention, *dev(q, kv, idx), dv=512)
    torch.cuda.synchronize()
    assert got[0].is_cuda and rel_err(got[0].cpu(), want[0]) <= 1e-5
    assert rel_err(got[1].cpu(), want[1]) <= 1e-5


@needs("softmax_attention")
def test_mixed_devices_are_an_error_not_a_crash():
    g = gen(87)
    q = randn(g, 1, 8, 2, 16)
    with pytest.raises((ValueError, RuntimeError)) as e:
        longattn.softmax_attention(q.cuda(), q, q)
    assert str(e.value)

"""Bad Python-side input (issue 21 point 7): non-native byte order, integers
that do not fit the C types, lists / None where a tensor is expected,
misaligned views. Each raises a precise exception before any C call and
never writes an output."""
import numpy as np
import pytest
import torch

from test_py_common import gen, needs, randn, rel_err  # noqa: I001 (sets sys.path first)
import longattn
from longattn._tensor import c_float, c_int, view

pytestmark = needs("softmax_attention", "mhla", "linear_attention", "dsa_topk")


def _qkv(g, B=1, N=33, H=2, D=16):
    return [randn(g, B, N, H, D).numpy() for _ in range(3)]


# ---------------------------------------------------------------------------
# byte order
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("which", [0, 1, 2])
def test_big_endian_input_raises_value_error(which):
    q, k, v = _qkv(gen(1))
    args = [q, k, v]
    args[which] = args[which].astype(">f4")
    name = "qkv"[which]
    with pytest.raises(ValueError, match=r"%s: .*non-native byte order" % name):
        longattn.softmax_attention(*args)


def test_big_endian_mixing_and_index_ranges_raise():
    q, k, v = _qkv(gen(2), N=16)
    W = longattn.mhla_init(4).astype(">f4")
    with pytest.raises(ValueError, match="mixing: .*byte order"):
        longattn.mhla(q, k, v, W, blocks=4)
    g = gen(3)
    qi, ki, w = randn(g, 4, 2, 8).numpy(), randn(g, 40, 8).numpy(), randn(g, 4, 2).numpy()
    end = np.full(4, 40, dtype=">i4")
    with pytest.raises(ValueError, match="end: .*byte order"):
        longattn.dsa_topk(qi, ki, w, topk=8, end=end)


def test_native_explicit_byte_order_is_accepted_and_correct():
    q, k, v = _qkv(gen(4))
    native = "<f4" if np.little_endian else ">f4"
    o1 = longattn.softmax_attention(q.astype(native), k, v)
    o2 = longattn.softmax_attention(q, k, v)
    assert rel_err(o1, torch.from_numpy(o2)) == 0.0


# ---------------------------------------------------------------------------
# integers that do not fit the C types
# ---------------------------------------------------------------------------
def test_c_int_helper_ranges():
    assert c_int(2**63 - 1, "x") == 2**63 - 1
    assert c_int(-2**63, "x") == -2**63
    assert c_int(np.int64(5), "x") == 5
    assert c_int(True, "x") == 1
    for bad in (2**63, 2**64 + 16, -2**63 - 1):
        with pytest.raises(OverflowError, match="x: .*does not fit in the C type int64"):
            c_int(bad, "x")
    with pytest.raises(OverflowError, match="int32"):
        c_int(2**31, "x", "int32")
    for bad in (2.5, "3", None):
        with pytest.raises(TypeError, match="x: expected an integer"):
            c_int(bad, "x")
    with pytest.raises(OverflowError, match="C float"):
        c_float(1e39, "eps")
    assert c_float(float("inf"), "eps") == float("inf")


@pytest.mark.parametrize("grid", [(2**64 + 16,), 2**64 + 16, "18446744073709551632", (2**63,)])
def test_mhla_grid_beyond_int64_raises_overflow(grid):
    q, k, v = _qkv(gen(5), N=16)
    W = longattn.mhla_init(4)
    with pytest.raises(OverflowError, match="grid"):
        longattn.mhla(q, k, v, W, grid=grid, blocks=4)


def test_other_integer_arguments_beyond_their_c_type_raise_overflow():
    g = gen(6)
    q, k, v = _qkv(g, N=16)
    with pytest.raises(OverflowError, match="blocks"):
        longattn.mhla(q, k, v, longattn.mhla_init(4), blocks=(2**64 + 4,))
    with pytest.raises(OverflowError, match="chunk"):
        longattn.linear_attention(q, k, v, causal=True, chunk=2**64 + 64)
    with pytest.raises(OverflowError, match="chunk"):
        longattn.mhla_causal(q, k, v, longattn.mhla_init(4, "uniform_causal"), chunk=2**64)
    qi, ki, w = randn(g, 4, 2, 8).numpy(), randn(g, 40, 8).numpy(), randn(g, 4, 2).numpy()
    with pytest.raises(OverflowError, match="topk"):
        longattn.dsa_topk(qi, ki, w, topk=2**64 + 8)
    with pytest.raises(OverflowError, match="block"):
        longattn.hisa_topk(qi, ki, w, topk=8, block=2**64 + 8)
    with pytest.raises(OverflowError, match="topk: k"):
        longattn.topk(randn(g, 3, 10).float(), 2**64 + 2)
    with pytest.raises(OverflowError, match="dv"):
        longattn.sparse_attention(randn(g, 2, 2, 24).numpy(), randn(g, 10, 24).numpy(),
                                  np.zeros((2, 3), np.int32), dv=2**64 + 8)
    with pytest.raises(OverflowError, match="set_num_threads"):
        longattn.set_num_threads(2**32 + 1)
    with pytest.raises(OverflowError, match="MHLADecoder: heads"):
        longattn.MHLADecoder(longattn.mhla_init(4, "uniform_causal"), 1, 2**64 + 2, 16)
    with pytest.raises(OverflowError, match="IndexCache: capacity"):
        longattn.IndexCache(8, 2**64 + 100)
    with pytest.raises(OverflowError, match="scale"):
        longattn.softmax_attention(q, k, v, scale=1e40)


def test_float_where_an_integer_is_expected_raises_type_error():
    q, k, v = _qkv(gen(7), N=16)
    with pytest.raises(TypeError, match="chunk: expected an integer"):
        longattn.linear_attention(q, k, v, causal=True, chunk=16.5)


# ---------------------------------------------------------------------------
# lists and None where a tensor is expected
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [None, [[1.0, 2.0]], 3.0])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_non_tensor_q_k_v_raise_type_error(bad, which):
    q, k, v = _qkv(gen(8))
    for fn in (lambda a: longattn.softmax_attention(*a),
               lambda a: longattn.linear_attention(*a),
               lambda a: longattn.mhla(*a, longattn.mhla_init(3), blocks=3),
               lambda a: longattn.mhla_causal(*a, longattn.mhla_init(3, "uniform_causal"),
                                              chunk=16)):
        args = [q, k, v]
        args[which] = bad
        with pytest.raises(TypeError, match="numpy.ndarray or torch.Tensor"):
            fn(args)


def test_non_tensor_mixing_and_indexer_inputs_raise_type_error():
    q, k, v = _qkv(gen(9), N=16)
    with pytest.raises(TypeError):
        longattn.mhla(q, k, v, [[1.0]], blocks=1)
    with pytest.raises(TypeError):
        longattn.mhla(q, k, v, [[1.0]])
    with pytest.raises(TypeError):
        longattn.mhla(q, k, v, None, blocks=4)
    with pytest.raises(TypeError):
        longattn.topk([[1.0, 2.0]], 1)
    with pytest.raises(TypeError):
        longattn.topk(None, 1)
    with pytest.raises(TypeError):
        longattn.sparse_attention(q[0], None, np.zeros((16, 2), np.int32))


# ---------------------------------------------------------------------------
# misaligned views
# ---------------------------------------------------------------------------
def _misaligned(shape, dtype=np.float32):
    n = int(np.prod(shape))
    raw = np.zeros(n * np.dtype(dtype).itemsize + 8, dtype=np.uint8)
    return np.frombuffer(raw.data, dtype=dtype, count=n, offset=1).reshape(shape)


def test_misaligned_numpy_view_is_refused():
    q, k, v = _qkv(gen(10))
    bad = _misaligned(q.shape)
    bad[...] = q
    assert bad.__array_interface__["data"][0] % 4 == 1
    with pytest.raises(ValueError, match=r"q: data address 0x[0-9a-f]+ is not aligned"):
        longattn.softmax_attention(bad, k, v)
    with pytest.raises(ValueError, match="not aligned"):
        view(bad, "q")


def test_misaligned_torch_view_is_refused():
    g = gen(11)
    q = randn(g, 1, 8, 2, 16)
    raw = torch.zeros(q.numel() * 4 + 4, dtype=torch.uint8)
    bad = raw[1:1 + q.numel() * 4].view(torch.uint8)
    try:
        bad = bad.view(torch.float32)   # torch itself may refuse the odd offset
    except RuntimeError:
        pytest.skip("this torch refuses misaligned dtype views itself")
    if bad.data_ptr() % 4 == 0:
        pytest.skip("could not build a misaligned torch view")
    bad = bad.view(1, 8, 2, 16)
    with pytest.raises(ValueError, match="not aligned"):
        longattn.softmax_attention(bad, q, q)


def test_misaligned_output_of_mhla_project_is_refused_and_untouched():
    W = _misaligned((4, 4))
    W[...] = 2.0
    with pytest.raises(ValueError, match="not aligned"):
        longattn.mhla_project(W)
    assert (W == 2.0).all()


# ---------------------------------------------------------------------------
# the per-thread view slots of the fast path
# ---------------------------------------------------------------------------
def test_view_slots_are_released_after_errors_and_results_stay_right():
    from longattn._tensor import Call, thread_context
    g = gen(12)
    q, k, v = (randn(g, 1, 40, 2, 16) for _ in range(3))
    want = longattn.softmax_attention(q, k, v)
    ctx = thread_context()
    for bad in (randn(g, 1, 40, 2, 15), [1.0]):   # a C-side shape error, a Python TypeError
        with pytest.raises((ValueError, TypeError)) as info:
            longattn.softmax_attention(q, bad, v)
        assert info.traceback is not None          # the failed call's frames are still alive
        assert not ctx.slots_busy
    assert torch.equal(longattn.softmax_attention(q, k, v), want)
    # a second Call while the first holds the slots gets views of its own
    c1 = Call("outer", q)
    p1 = c1.view(q, "q")
    c2 = Call("inner", k)
    assert c2._slots is None and c1._slots is not None
    c2.view(k, "k")
    assert p1._obj.data == q.data_ptr()
    del c2
    c1._release()
    assert not ctx.slots_busy


def test_threads_calling_at_once_get_their_own_results():
    import threading
    g = gen(13)
    inputs = [tuple(randn(g, 1, 50, 2, 16) for _ in range(3)) for _ in range(4)]
    want = [longattn.linear_attention(*x, causal=True) for x in inputs]
    errors = []

    def work(i):
        try:
            for _ in range(30):
                if not torch.equal(longattn.linear_attention(*inputs[i], causal=True), want[i]):
                    errors.append(i)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors

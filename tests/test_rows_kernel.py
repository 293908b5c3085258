"""voicechat.rows_kernel: a product over a group's rows on CUDA, each row bit for bit its product alone, at any row
count (docs/platform.md §9). The launch's layout is checked everywhere; the kernel itself needs MLX's CUDA backend
(bench/README.md says how to run these on a lent GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from voicechat import compute, rows_kernel  # noqa: F401  (compute first: the BLAS preload)
import mlx.core as mx

ROW_COUNTS = (1, 2, 3, 4, 5, 7, 8, 9, 16, 31, 32, 33, 40, 64, 65, 100, 128)
cuda = pytest.mark.skipif(not mx.cuda.is_available(), reason="the kernel runs on MLX's CUDA backend only; "
                          "bench/README.md runs these on a lent GPU")


def covered(rows: int, n: int) -> np.ndarray:
    """How many times the launch of :func:`rows_kernel.geometry` writes each (row, output), following the kernel's
    indexing (TILES_SOURCE: a block's chunk of rows and tile of outputs, each lane's row and outputs)."""
    g = rows_kernel.geometry(rows, n)
    count = np.zeros((rows, n), dtype=int)
    for block in range(g["blocks"] * g["chunks"]):
        r0 = (block % g["chunks"]) * g["NT"] * 8
        n0 = (block // g["chunks"]) * g["MT"] * 16
        for m in range(g["MT"] * 16):  # the block's final loop: each of its outputs and rows once
            for r in range(g["NT"] * 8):
                if n0 + m < n and r0 + r < rows:
                    count[r0 + r, n0 + m] += 1
    return count


@pytest.mark.parametrize("rows", ROW_COUNTS)
def test_every_row_and_output_is_written_once_within_a_blocks_shared_memory(rows):
    for n in (1, 17, 48, 130):
        assert (covered(rows, n) == 1).all(), (rows, n)
    g = rows_kernel.geometry(rows, 4480)
    assert g["NT"] * 8 <= rows_kernel.TILES_PER_BLOCK * 8 and g["shared"] <= rows_kernel.SHARED_BYTES
    assert g["chunks"] == -(-rows // 32)  # a block per 32 rows: no row count is left to MLX's kernels


def test_a_row_count_past_one_block_is_served():
    """Above 32 rows the 4-bit products stay ours (more blocks), never MLX's kernels (issue 37)."""
    layer = type("Layer", (), {"mode": "affine", "bits": 4, "group_size": 64,
                               "__getitem__": lambda self, k: mx.zeros((2, 1), mx.bfloat16)})()
    x = mx.zeros((128, 64), mx.bfloat16)
    assert rows_kernel.serves(layer, x) == (mx.cuda.is_available() and mx.default_device() == mx.gpu)


def bits(a: mx.array) -> np.ndarray:
    return np.array(a.view(mx.uint16))


def reference(x: mx.array, w: mx.array) -> np.ndarray:
    return np.array(x.astype(mx.float32)) @ np.array(w.astype(mx.float32)).T


def assert_rows_alone(way, x: mx.array, want: np.ndarray) -> None:
    """Each row of ``way(x)`` equals ``way`` of that row alone, bit for bit, and the product is right (a bf16 result
    of float32 sums: within 1e-2 of the largest output)."""
    got = way(x)
    alone = [way(x[r:r + 1]) for r in range(x.shape[0])]
    mx.eval(got, alone)
    for r in range(x.shape[0]):
        assert np.array_equal(bits(got[r:r + 1]), bits(alone[r])), f"row {r} of {x.shape[0]}"
    err = np.abs(np.array(got.astype(mx.float32)) - want).max() / np.abs(want).max()
    assert err < 1e-2, err


@cuda
@pytest.mark.parametrize("rows", ROW_COUNTS)
def test_each_row_of_a_4bit_product_is_its_product_alone(rows):
    w = (mx.random.normal((300, 512), key=mx.random.key(rows)) * 0.02).astype(mx.bfloat16)
    packed = mx.quantize(w, group_size=64, bits=4)
    x = mx.random.normal((rows, 512), key=mx.random.key(1000 + rows)).astype(mx.bfloat16)
    plain = mx.dequantize(*packed, group_size=64, bits=4)
    assert_rows_alone(lambda v: rows_kernel.product(v, *packed), x, reference(x, plain))


@cuda
@pytest.mark.parametrize("rows", ROW_COUNTS)
@pytest.mark.parametrize("k", (9, 257, 1024))  # the subsampling's 3x3 patches, the mel's bins, a layer's width
def test_each_row_of_a_bf16_product_is_its_product_alone(rows, k):
    w = (mx.random.normal((200, k), key=mx.random.key(rows)) * 0.05).astype(mx.bfloat16)
    x = mx.random.normal((rows, k), key=mx.random.key(2000 + rows)).astype(mx.bfloat16)
    assert_rows_alone(lambda v: rows_kernel.dense_product(v, w), x, reference(x, w))


def test_a_linear_hands_the_kernel_its_weight_as_stored(monkeypatch):
    """``compute.linear``'s CUDA path: a Linear's weight [N, K] reaches the kernel as stored and 2-D rows as they are,
    with no transpose or reshape node between (every node costs host time in each tick: docs/batching.md §6); 3-D
    rows take one reshape. The kernel is stood in for here (it needs CUDA: the tests below run it)."""
    from voicechat.benchmarks import op_histogram

    handed = []
    monkeypatch.setattr(rows_kernel, "serves_dense", lambda x, w: True)
    monkeypatch.setattr(rows_kernel, "run", lambda kind, inputs, tiles: handed.append(inputs) or inputs[0][:, :6])
    w, rows, x = mx.ones((6, 64), mx.bfloat16), mx.ones((3, 64), mx.bfloat16), mx.ones((2, 3, 64), mx.bfloat16)
    mx.eval(w, rows, x)
    assert compute.linear(rows, w).shape == (3, 6) and compute.linear(x, w).shape == (2, 3, 6)
    (rows2, w2), (rows3, w3) = handed
    assert not op_histogram(rows2) and not op_histogram(w2) and not op_histogram(w3)
    assert op_histogram(rows3) == {"Reshape": 1}


@cuda
@pytest.mark.parametrize("rows", (2, 8, 33, 128))
def test_a_groups_products_are_each_conversations_alone(rows):
    """``compute.product`` as the networks call it: a group's one row each ([B, 1, C]) and a few frames each
    ([B, T, C]), a weight given transposed (a Linear's) or as is (the codec's transposed conv)."""
    w = (mx.random.normal((384, 256), key=mx.random.key(rows)) * 0.05).astype(mx.bfloat16)  # a Linear's [out, in]
    for t, weight in ((1, w.T), (3, w.T), (1, mx.contiguous(w.T))):
        x = mx.random.normal((rows, t, 256), key=mx.random.key(t)).astype(mx.bfloat16)
        together = compute.product(x, weight)
        alone = [compute.product(x[b:b + 1], weight) for b in range(rows)]
        mx.eval(together, alone)
        for b in range(rows):
            assert np.array_equal(bits(together[b:b + 1]), bits(alone[b])), (t, b)
        if weight is not w.T:
            continue
        linear = compute.linear(x, w)  # a Linear's way in: the same kernel over the same rows and weight
        assert np.array_equal(bits(linear), bits(together)), t

"""A product over a group's rows on MLX's CUDA backend, on the tensor cores, each row bit for bit its product alone
(docs/platform.md §9): the LLM's 4-bit products (:func:`product`) and the speech networks' bf16 ones
(:func:`dense_product`), at any row count.

Why: MLX 0.32's CUDA backend runs a 4-bit product of fewer than 8 rows as its vector kernel, which reads the weights
again for each row (4 rows take 3-4x one row's time), and one of 8 or more as its tiled kernel, which rounds a row
unlike its one-row product; a bf16 product of 2 or more rows goes through cuBLAS, which rounds a row by the row count
too. So a conversation in a group was not the conversation alone. This kernel computes ``x [M, K] @ W^T`` with PTX's
``mma.m16n8k16`` (bf16 in, float32 sums): 16 outputs' weights (``mx.quantize``'s affine 4-bit layout dequantized to
bf16 in registers: each uint32 holds 8 consecutive weights of a row, the first in the lowest 4 bits, a scale and a
bias per group of 64, ``w = scale * q + bias``; or bf16 weights read as they are) are the fragment's 16 rows, 8 rows
of x its 8 columns (a tile per 8 rows, up to TILES_PER_BLOCK tiles a block; more rows take more blocks side by side
over the same outputs). A block's 8 warps take every 8th group of 64 columns each and their sums are added in warp
order at the end. So each output of each row is the same sequence of tensor-core steps and additions whatever the
other rows are and however many: the products of a conversation in a group are those of the conversation alone.
"""

from __future__ import annotations

import math

import mlx.core as mx

GROUP = 64
BITS = 4
ROWS_PER_TILE = 8  # the tensor cores' n: rows of x a fragment holds
TILES_PER_BLOCK = 4  # rows of x a block holds: 32 (more rows, more blocks: each block's sums fill its shared memory)
WARPS = 8  # a block's warps, each taking every 8th group of 64 columns
SHARED_BYTES = 48 * 1024  # a block's static shared memory on CUDA

TILES_SOURCE = """
    const int rows = x_shape[0];
    const int K = x_shape[1];
    const int N = w_shape[0];
    const int G = K / GS;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int gid = lane / 4;  // the fragment's row (an output) and column (a row of x), PTX's groupID
    const int tig = lane % 4;  // PTX's threadID_in_group: which pair of k a lane holds
    const int chunks = (rows + NT * 8 - 1) / (NT * 8);  // blocks of NT * 8 rows side by side over one tile of outputs
    const int r0 = (blockIdx.x % chunks) * (NT * 8);
    const int n0 = (blockIdx.x / chunks) * (MT * 16);
    __shared__ float partial[KW][MT * 16][NT * 8];
    float d[MT][NT][4];
    #pragma unroll
    for (int m = 0; m < MT; ++m) {
        #pragma unroll
        for (int t = 0; t < NT; ++t) {
            #pragma unroll
            for (int i = 0; i < 4; ++i) d[m][t][i] = 0.0f;
        }
    }
    for (int g = warp; g < G; g += KW) {  // a warp's groups of 64 columns: the same ones whatever the rows
/*GROUP*/        #pragma unroll
        for (int s = 0; s < 4; ++s) {  // the group's four k-steps of 16 columns
            uint32_t xb[NT][2];
            #pragma unroll
            for (int t = 0; t < NT; ++t) {
                const int r = r0 + t * 8 + gid;
                const uint32_t* xr = reinterpret_cast<const uint32_t*>(
                    x + (size_t)min(r, rows - 1) * K + g * 64 + s * 16 + 2 * tig);
                xb[t][0] = r < rows ? xr[0] : 0u;
                xb[t][1] = r < rows ? xr[4] : 0u;
            }
            #pragma unroll
            for (int m = 0; m < MT; ++m) {
                uint32_t a[4];
/*FRAGMENT*/                #pragma unroll
                for (int t = 0; t < NT; ++t) {
                    asm volatile(
                        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                        : "+f"(d[m][t][0]), "+f"(d[m][t][1]), "+f"(d[m][t][2]), "+f"(d[m][t][3])
                        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(xb[t][0]), "r"(xb[t][1]));
                }
            }
        }
    }
    #pragma unroll
    for (int m = 0; m < MT; ++m) {
        #pragma unroll
        for (int t = 0; t < NT; ++t) {
            partial[warp][m * 16 + gid][t * 8 + 2 * tig] = d[m][t][0];
            partial[warp][m * 16 + gid][t * 8 + 2 * tig + 1] = d[m][t][1];
            partial[warp][m * 16 + gid + 8][t * 8 + 2 * tig] = d[m][t][2];
            partial[warp][m * 16 + gid + 8][t * 8 + 2 * tig + 1] = d[m][t][3];
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < MT * 16 * NT * 8; i += KW * 32) {
        const int m = i / (NT * 8), r = i % (NT * 8);
        if (n0 + m < N && r0 + r < rows) {
            float v = partial[0][m][r];
            #pragma unroll
            for (int k = 1; k < KW; ++k) v += partial[k][m][r];
            out[(size_t)(r0 + r) * N + n0 + m] = __float2bfloat16(v);
        }
    }
"""  # /*GROUP*/: a group's loads; /*FRAGMENT*/: a[4], the weights' fragment at k-step s

Q4_GROUP = """
        uint32_t wa[MT][8], wb[MT][8];
        float sa[MT], ba[MT], sb[MT], bb[MT];
        #pragma unroll
        for (int m = 0; m < MT; ++m) {
            const int ra = min(n0 + m * 16 + gid, N - 1), rb = min(n0 + m * 16 + gid + 8, N - 1);
            const uint4* pa = reinterpret_cast<const uint4*>(w + (size_t)ra * (K / 8) + g * 8);
            const uint4* pb = reinterpret_cast<const uint4*>(w + (size_t)rb * (K / 8) + g * 8);
            const uint4 a0 = pa[0], a1 = pa[1], b0 = pb[0], b1 = pb[1];
            wa[m][0] = a0.x; wa[m][1] = a0.y; wa[m][2] = a0.z; wa[m][3] = a0.w;
            wa[m][4] = a1.x; wa[m][5] = a1.y; wa[m][6] = a1.z; wa[m][7] = a1.w;
            wb[m][0] = b0.x; wb[m][1] = b0.y; wb[m][2] = b0.z; wb[m][3] = b0.w;
            wb[m][4] = b1.x; wb[m][5] = b1.y; wb[m][6] = b1.z; wb[m][7] = b1.w;
            sa[m] = __bfloat162float(scales[(size_t)ra * G + g]);
            ba[m] = __bfloat162float(biases[(size_t)ra * G + g]);
            sb[m] = __bfloat162float(scales[(size_t)rb * G + g]);
            bb[m] = __bfloat162float(biases[(size_t)rb * G + g]);
        }
"""

Q4_FRAGMENT = """
                const int sh = 8 * tig;
                const __nv_bfloat162 p0 = __floats2bfloat162_rn(
                    fmaf(sa[m], (float)((wa[m][2 * s] >> sh) & 15u), ba[m]),
                    fmaf(sa[m], (float)((wa[m][2 * s] >> (sh + 4)) & 15u), ba[m]));
                const __nv_bfloat162 p1 = __floats2bfloat162_rn(
                    fmaf(sb[m], (float)((wb[m][2 * s] >> sh) & 15u), bb[m]),
                    fmaf(sb[m], (float)((wb[m][2 * s] >> (sh + 4)) & 15u), bb[m]));
                const __nv_bfloat162 p2 = __floats2bfloat162_rn(
                    fmaf(sa[m], (float)((wa[m][2 * s + 1] >> sh) & 15u), ba[m]),
                    fmaf(sa[m], (float)((wa[m][2 * s + 1] >> (sh + 4)) & 15u), ba[m]));
                const __nv_bfloat162 p3 = __floats2bfloat162_rn(
                    fmaf(sb[m], (float)((wb[m][2 * s + 1] >> sh) & 15u), bb[m]),
                    fmaf(sb[m], (float)((wb[m][2 * s + 1] >> (sh + 4)) & 15u), bb[m]));
                a[0] = *reinterpret_cast<const uint32_t*>(&p0);
                a[1] = *reinterpret_cast<const uint32_t*>(&p1);
                a[2] = *reinterpret_cast<const uint32_t*>(&p2);
                a[3] = *reinterpret_cast<const uint32_t*>(&p3);
"""

BF16_FRAGMENT = """
                const int ra = min(n0 + m * 16 + gid, N - 1), rb = min(n0 + m * 16 + gid + 8, N - 1);
                const uint32_t* pa = reinterpret_cast<const uint32_t*>(w + (size_t)ra * K + g * 64 + s * 16 + 2 * tig);
                const uint32_t* pb = reinterpret_cast<const uint32_t*>(w + (size_t)rb * K + g * 64 + s * 16 + 2 * tig);
                a[0] = pa[0];
                a[1] = pb[0];
                a[2] = pa[4];
                a[3] = pb[4];
"""


def source(group: str, fragment: str) -> str:
    """The kernel for one kind of weights: TILES_SOURCE with its loads."""
    return TILES_SOURCE.replace("/*GROUP*/", group.lstrip("\n")).replace("/*FRAGMENT*/", fragment.lstrip("\n"))


KINDS = {"q4_rows": (["x", "w", "scales", "biases"], Q4_GROUP, Q4_FRAGMENT),  # name -> inputs, loads
         "bf16_rows": (["x", "w"], "", BF16_FRAGMENT)}
_KERNELS: dict = {}
_CUDA = mx.cuda.is_available()


def on_cuda() -> bool:
    """Whether the products run on MLX's CUDA backend (``bench.cuda_nodes`` says yes on a CPU, to count that graph)."""
    return _CUDA and mx.default_device() == mx.gpu


def serves(layer, x: mx.array) -> bool:
    """Whether ``layer`` (an ``nn.QuantizedLinear``) on rows ``x`` [M, K] runs here: on CUDA, 4-bit affine with
    groups of 64, bfloat16."""
    return (on_cuda() and layer.mode == "affine" and layer.bits == BITS and layer.group_size == GROUP
            and x.dtype == mx.bfloat16 and layer["scales"].dtype == mx.bfloat16 and x.shape[0] >= 1)


def serves_dense(x: mx.array, w: mx.array) -> bool:
    """Whether :func:`dense_product` takes rows ``x`` [..., K] and the weight ``w`` [N, K]: on CUDA, both bfloat16."""
    return on_cuda() and x.dtype == w.dtype == mx.bfloat16 and x.size > 0 and w.ndim == 2


def output_tiles(rows: int) -> int:
    """Tiles of 16 outputs a warp takes: 1 up to 4 rows (more warps for the weights' reads), 2 above (each row of x
    then serves 32 outputs); `python -m bench.qmv_rows` measured 1 and 2 (docs/platform.md §9)."""
    return 2 if rows > 4 else 1


def geometry(rows: int, n: int, tiles: int | None = None) -> dict:
    """The launch of a product of ``rows`` rows into ``n`` outputs: NT tiles of 8 rows a block, MT tiles of 16
    outputs a warp, ``chunks`` blocks of NT * 8 rows side by side over each of ``blocks`` tiles of MT * 16 outputs
    (the kernel's ``blockIdx.x``: chunk = its remainder by ``chunks``), and the block's shared memory in bytes."""
    nt = min(-(-rows // ROWS_PER_TILE), TILES_PER_BLOCK)
    mt = tiles or output_tiles(rows)
    chunks = -(-rows // (nt * ROWS_PER_TILE))
    return {"NT": nt, "MT": mt, "chunks": chunks, "blocks": -(-n // (16 * mt)),
            "shared": WARPS * mt * 16 * nt * ROWS_PER_TILE * 4}


def run(kind: str, inputs: list, tiles: int | None) -> mx.array:
    """Launch the kernel of ``kind`` (KINDS; made at its first use) over x = inputs[0] [rows, K] and w = inputs[1]
    [N, ...]: :func:`geometry`'s blocks, WARPS warps each."""
    if kind not in _KERNELS:
        names, group, fragment = KINDS[kind]
        _KERNELS[kind] = mx.fast.cuda_kernel(name=f"voicechat_{kind}", input_names=names, output_names=["out"],
                                             source=source(group, fragment))
    rows, n = inputs[0].shape[0], inputs[1].shape[0]
    g = geometry(rows, n, tiles)
    return _KERNELS[kind](inputs=inputs,
                          template=[("NT", g["NT"]), ("MT", g["MT"]), ("KW", WARPS), ("GS", GROUP)],
                          grid=(g["blocks"] * g["chunks"] * WARPS * 32, 1, 1), threadgroup=(WARPS * 32, 1, 1),
                          output_shapes=[(rows, n)], output_dtypes=[mx.bfloat16])[0]


def product(x: mx.array, w: mx.array, scales: mx.array, biases: mx.array, tiles: int | None = None) -> mx.array:
    """x [M, K] bf16 @ the 4-bit W [N, K] (``mx.quantize``'s w, scales, biases) ^T, [M, N] bf16. ``tiles``:
    :func:`output_tiles` unless given (only to measure another)."""
    return run("q4_rows", [x, w, scales, biases], tiles)


def dense_product(x: mx.array, w: mx.array, tiles: int | None = None) -> mx.array:
    """x [..., K] bf16 @ the bf16 W [N, K] ^T, [..., N] bf16 (:func:`serves_dense`), each row its product alone. K is
    padded with zeros to a multiple of 64 where it is not one (a zero adds nothing to a float32 sum)."""
    k, n = x.shape[-1], w.shape[0]
    rows = x.reshape(as_rows(x.shape))
    if k % GROUP:
        pad = GROUP - k % GROUP
        rows, w = mx.pad(rows, [(0, 0), (0, pad)]), mx.pad(w, [(0, 0), (0, pad)])
    return run("bf16_rows", [rows, w], tiles).reshape(*x.shape[:-1], n)


def as_rows(shape: tuple) -> tuple:
    """[..., K] -> (rows, K) with the row count written out: reshaping an array to its own shape adds no graph node,
    and a 2-D input is already its rows (``reshape(-1, K)`` would add one)."""
    return (math.prod(shape[:-1]), shape[-1])

"""bench.host_profile on py-spy's raw format (a stack of frames joined by ';', then a sample count)."""

from bench.host_profile import read, shares

RAW = """\
_run_module_as_main (<frozen runpy>:198);main (voicechat/benchmarks/frame_split.py:78) 5
main (frame_split.py:78);mlx::core::async_eval (libmlx.so);mlx::core::eval_impl (libmlx.so);\
mlx::core::Fence::update (libmlx.so);mlx::core::cu::CommandEncoder::commit (libmlx.so) 3
main (frame_split.py:78);mlx::core::async_eval (libmlx.so);mlx::core::eval_impl (libmlx.so);\
mlx::core::Matmul::eval_gpu (libmlx.so);cublasLtMatmul (libcublasLt.so.13) 4
main (frame_split.py:78);mlx::core::async_eval (libmlx.so);mlx::core::eval_impl (libmlx.so);0x7f00 (libcuda.so.580) 1
"""


def test_shares_count_only_the_samples_under_async_eval_each_function_once(tmp_path):
    path = tmp_path / "frame.raw"
    path.write_text(RAW)
    stacks, total = read(str(path))
    assert total == 13 and len(stacks) == 3 and all(frames[0] == "mlx::core::async_eval" for frames, _ in stacks)
    functions, groups, under = shares(stacks)
    assert under == 8
    assert functions["mlx::core::eval_impl"] == 8 and functions["mlx::core::Fence::update"] == 3
    assert functions["?? (libcuda.so.580)"] == 1 and "main" not in functions
    assert groups["cross-stream fences (Fence::update, Event::wait)"] == 3
    assert groups["CUDA graph commits (any caller)"] == 3
    assert groups["cuBLAS products"] == 4 and groups["cuDNN (attention, convolution)"] == 0

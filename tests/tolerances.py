"""Every numeric tolerance the tests use, with the reason for each. Nowhere else."""

from reference import ATOL, RTOL  # noqa: F401  official checker: rtol = atol = 1e-3

# Decoding tables (e2m1, e4m3) and layout permutations are exact: compared bit for bit.
EXACT = 0.0

# ref_kernel vs a float64 brute force: ref_kernel's products are exact and its float64 sum
# differs from the brute force's only in summation order (relative error ~1e-13), so after
# the one rounding to fp16 the two agree within half an fp16 ulp of the exact value, i.e.
# |ref - exact| <= 2**-11 * |exact|, or half the subnormal spacing 2**-25 near zero.
FP16_HALF_ULP_REL = 2.0 ** -11
FP16_SUBNORMAL_HALF_ULP = 2.0 ** -25

# fp32-accumulating kernels (Triton, cuBLAS-style) vs the exact reference: the fp32 sum over
# K <= 16384 errs by << 1 fp16 ulp; the fp16 rounding can then land one ulp off. The
# official tolerance (1e-3 relative + 1e-3 absolute) covers one fp16 ulp (<= 2**-10 rel).
KERNEL_RTOL = RTOL
KERNEL_ATOL = ATOL

# NVFP4 quantizer (tests/test_quant.py): its rounding is exact, so it is compared with a
# brute-force numpy quantizer bit for bit (EXACT). Floor for its SQNR on N(0,1) data: measured
# 20.44 dB (512 x 4096, seed 4; 20.43 dB with a global scale); 20 dB catches a wrong rounding
# mode or scale choice (truncating values, or rounding scales up, cost whole dB).
NVFP4_GAUSSIAN_SQNR_MIN_DB = 20.0

# The gaussian / outliers distributions must keep |c| this many times below fp16's 65504 at the
# tested shapes, so that no seed overflows to inf: outliers' measured max |c| over the benchmark
# shapes (seeds 0..7) is 20992, 65504 / 3.1 (see quant.fill_outliers).
FP16_OUTPUT_HEADROOM = 2.0

// NVFP4 batched GEMV, c[r, l] = fp16(sum_k a[r, k, l] * b[0, k, l]) with both block scales.
// Compiled at run time by NVRTC; no headers. One kernel per configuration: gemv_body is
// instantiated by a small extern "C" wrapper that submission.py's cuda_kernel appends to this
// text (the template arguments are CudaConfig's fields). submission.py carries this file as
// embedded text, written by `python3 eval.py bundle`: edit this file, then bundle.
//
// To compile it alone: nvcc -arch=sm_90a -std=c++17 -DNVFP4_GEMV_EXAMPLE -c nvfp4_gemv.cu
// (the example kernel at the end instantiates one configuration; for sm_100a add
// -DHAS_E2M1_CVT=1 -DHAS_LD256=1, as submission.py's build does).
//
// A warp owns 32/LPR * RPT rows: LPR lanes share a row (lane t reads the row's 16-byte
// chunks t, t + LPR, ...), and each lane holds RPT rows. One step of the K loop puts
// RPT * U loads of 16 bytes of a (plus their scale pairs) in flight per lane, every one
// issued before the first is used; then b's chunks (L1/L2 resident) are read and decoded
// once per lane for its RPT rows. Each 16-byte chunk is two 16-value groups; each group's
// dot product is exact (an integer multiple of 1/4), times the exact fp32 product of the
// two e4m3 scales, summed in fp32 per lane; lanes of a row combine by a fixed butterfly,
// so repeated runs are bit-identical.
typedef unsigned int u32;
typedef unsigned short u16;
typedef long long i64;

// Set by submission.py's cuda_compile: 1 on Blackwell's architecture- and family-specific targets
// (blackwell_target: sm_100a, sm_103a, sm_110a, sm_120a, sm_121a, sm_100f, ...), 0 elsewhere.
#ifndef HAS_E2M1_CVT
#define HAS_E2M1_CVT 0  // cvt.rn.f16x2.e2m1x2 and the mixed-precision fma
#endif
#ifndef HAS_LD256
#define HAS_LD256 0  // 32-byte loads with the L2 eviction priority as a qualifier
#endif

struct __align__(16) Q { u32 w[4]; };

// The template arguments of gemv_body by name; each enum's names are those of CudaConfig's
// field in submission.py (load, pipe, decode), in the same order.
// LOAD: how a and its scales are read (read once; chosen by measurement: benchmarks/NOTES.md,
// "Loads"). The names match benchmarks/timing.py's read policies where the load is the same.
enum LoadA : int {
  LD_NC_NO_ALLOCATE = 0,               // ld.global.nc.L1::no_allocate
  LD_PLAIN = 1,                        // ld.global
  LD_L1_EVICT_FIRST = 2,               // ld.global.L1::evict_first
  LD_CS = 3,                           // ld.global.cs (evict-first at every level)
  LD_NO_ALLOCATE_L2_256B = 4,          // ld.global.L1::no_allocate.L2::256B (a 256-byte L2 prefetch)
  LD_NO_ALLOCATE_L2_EVICT_FIRST = 5,   // L1 no-allocate with an L2 evict-first cache policy (below)
  LD_NO_ALLOCATE_L2_EVICT_FIRST_256 = 6  // a lane's two adjacent chunks in one 32-byte load (ld_a32)
};
// PIPE: the order of a step's loads and arithmetic.
enum Pipe : int {
  PIPE_PTXAS = 0,     // as ptxas schedules it (with launch bounds, minb > 0, it hoists the loads)
  PIPE_A_FIRST = 1,   // every load of a issued before the step's arithmetic (b's loads after)
  PIPE_AB_FIRST = 2   // b's loads of the step too, beside a's, before any arithmetic
};
// DECODE: how a group of 16 e2m1 values meets b's (submission.DECODES says what each is).
enum DecodeId : int { DEC_DP4A = 0, DEC_F16X2 = 1, DEC_DP4A_SR = 2, DEC_DP4A_SR2 = 3 };

// The loads of a and its scales by LOAD, those spelled by a qualifier alone.
#define LD_FLAVOURS(T, R, PTXT, OUTS, ...)                                         \
  if (LOAD == LD_NC_NO_ALLOCATE)                                                   \
    asm("ld.global.nc.L1::no_allocate." PTXT " " OUTS ", [%" R "];" : __VA_ARGS__); \
  else if (LOAD == LD_PLAIN)                                                       \
    asm("ld.global." PTXT " " OUTS ", [%" R "];" : __VA_ARGS__);                   \
  else if (LOAD == LD_L1_EVICT_FIRST)                                              \
    asm("ld.global.L1::evict_first." PTXT " " OUTS ", [%" R "];" : __VA_ARGS__);   \
  else if (LOAD == LD_CS)                                                          \
    asm("ld.global.cs." PTXT " " OUTS ", [%" R "];" : __VA_ARGS__);                \
  else                                                                             \
    asm("ld.global.L1::no_allocate.L2::256B." PTXT " " OUTS ", [%" R "];" : __VA_ARGS__);
// LD_NO_ALLOCATE_L2_EVICT_FIRST: ld.global.L1::no_allocate.L2::cache_hint with an L2 evict-first policy (the L2
// priority that 16-byte loads can carry: the .L2::evict_first qualifier needs 32-byte loads).
// The policies are pure values (createpolicy), formed once per thread where the compiler hoists them.
__device__ __forceinline__ unsigned long long l2_first() {
  unsigned long long p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ unsigned long long l2_last() {
  unsigned long long p;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}
template <int LOAD>
__device__ __forceinline__ Q ld_a(const unsigned char* p) {
  Q q;
  if (LOAD == LD_NO_ALLOCATE_L2_EVICT_FIRST) {
    asm("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(q.w[0]), "=r"(q.w[1]), "=r"(q.w[2]), "=r"(q.w[3]) : "l"(p), "l"(l2_first()));
  } else {
    LD_FLAVOURS(Q, "4", "v4.u32", "{%0, %1, %2, %3}",
                "=r"(q.w[0]), "=r"(q.w[1]), "=r"(q.w[2]), "=r"(q.w[3]) : "l"(p))
  }
  return q;
}
template <int LOAD>
__device__ __forceinline__ u32 ld_scales16(const unsigned char* p) {
  u16 v;
  if (LOAD == LD_NO_ALLOCATE_L2_EVICT_FIRST)
    asm("ld.global.L1::no_allocate.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(l2_first()));
  else { LD_FLAVOURS(u16, "1", "u16", "%0", "=h"(v) : "l"(p)) }
  return v;
}
template <int LOAD>
__device__ __forceinline__ u32 ld_scales32(const unsigned char* p) {
  u32 v;
  if (LOAD == LD_NO_ALLOCATE_L2_EVICT_FIRST)
    asm("ld.global.L1::no_allocate.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(l2_first()));
  else { LD_FLAVOURS(u32, "1", "u32", "%0", "=r"(v) : "l"(p)) }
  return v;
}
// LD_NO_ALLOCATE_L2_EVICT_FIRST_256: a lane's two adjacent chunks (V = 2) in one 32-byte load
// with the L2 eviction priority as a qualifier, ld.global.L1::no_allocate.L2::evict_first.v8.u32,
// which ptxas 13.0 takes on 32-byte loads only, and those on sm_100a only (HAS_LD256); elsewhere
// the same 32 bytes as two 16-byte no-allocate loads (the same values: a stand-in that runs off
// Blackwell). The scales of a take LD_NC_NO_ALLOCATE. Needs a 32-byte aligned a (the launcher
// falls back to LD_NC_NO_ALLOCATE otherwise).
__device__ __forceinline__ void ld_a32(const unsigned char* p, Q& x, Q& y) {
#if HAS_LD256
  asm("ld.global.L1::no_allocate.L2::evict_first.v8.u32 {%0, %1, %2, %3, %4, %5, %6, %7}, [%8];"
      : "=r"(x.w[0]), "=r"(x.w[1]), "=r"(x.w[2]), "=r"(x.w[3]), "=r"(y.w[0]), "=r"(y.w[1]), "=r"(y.w[2]),
        "=r"(y.w[3]) : "l"(p));
#else
  asm("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(x.w[0]), "=r"(x.w[1]), "=r"(x.w[2]), "=r"(x.w[3]) : "l"(p));
  asm("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(y.w[0]), "=r"(y.w[1]), "=r"(y.w[2]), "=r"(y.w[3]) : "l"(p + 16));
#endif
}
// b and its scales are small and read by every row: cached loads (BLOAD false), or (BLOAD true)
// the same with an L1 evict-last priority and an L2 evict-last policy (kept while a passes through).
template <bool BLOAD>
__device__ __forceinline__ Q ld_b(const unsigned char* p) {
  Q q;
  if (BLOAD)
    asm("ld.global.nc.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(q.w[0]), "=r"(q.w[1]), "=r"(q.w[2]), "=r"(q.w[3]) : "l"(p), "l"(l2_last()));
  else
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(q.w[0]), "=r"(q.w[1]), "=r"(q.w[2]), "=r"(q.w[3]) : "l"(p));
  return q;
}
template <bool BLOAD>
__device__ __forceinline__ u32 ld_b_scales(const unsigned char* p) {
  u16 v;
  if (BLOAD)
    asm("ld.global.nc.L1::evict_last.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(l2_last()));
  else asm("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}

// Two e4m3 codes (bytes 0 and 1 of v) -> floats, exactly: e4m3 is a subset of fp16, and the
// NaN codes 0x7F / 0xFF stay NaN (NaN in, NaN out, as cuBLAS gives).
__device__ __forceinline__ void e4m3x2(u32 v, float& s0, float& s1) {
  asm("{ .reg .b16 t, l, h; .reg .b32 d; cvt.u16.u32 t, %2; cvt.rn.f16x2.e4m3x2 d, t;"
      " mov.b32 {l, h}, d; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }"
      : "=f"(s0), "=f"(s1) : "r"(v));
}

// ---- "dp4a" (Decode<DEC_DP4A>): prmt is an 8-entry byte table: 4 magnitude codes -> the bytes 2|a|.
// b is prepared per chunk as bytes +2|b|, -2|b| and selector bases i + 4 sign(b_i); a second
// prmt, whose selectors XOR in a's signs, picks +-2|b| per byte; dp4a sums 4 products. The
// result is 4 x the group's dot product.
#define TLO 0x03020100u
#define THI 0x0C080604u
#define NLO 0xFDFEFF00u
#define NHI 0xF4F8FAFCu
struct BWord { u32 p0, n0, p1, n1, x; };
struct BDp4a { BWord w[4]; };
__device__ __forceinline__ BDp4a prep_dp4a(const Q& q) {
  BDp4a r;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    u32 v = q.w[j], s0 = v & 0x7777u, s1 = (v >> 16) & 0x7777u;
    r.w[j].p0 = __byte_perm(TLO, THI, s0);
    r.w[j].n0 = __byte_perm(NLO, NHI, s0);
    r.w[j].p1 = __byte_perm(TLO, THI, s1);
    r.w[j].n1 = __byte_perm(NLO, NHI, s1);
    r.w[j].x = ((v >> 1) & 0x44444444u) | 0x32103210u;
  }
  return r;
}
__device__ __forceinline__ int dot8(u32 v, const BWord& b, int acc) {
  u32 x = ((v >> 1) & 0x44444444u) ^ b.x;
  acc = __dp4a((int)__byte_perm(TLO, THI, v & 0x7777u), (int)__byte_perm(b.p0, b.n0, x), acc);
  return __dp4a((int)__byte_perm(TLO, THI, (v >> 16) & 0x7777u), (int)__byte_perm(b.p1, b.n1, x >> 16), acc);
}
__device__ __forceinline__ void dot_chunk(const Q& a, const BDp4a& b, float& g0, float& g1) {
  g0 = (float)dot8(a.w[1], b.w[1], dot8(a.w[0], b.w[0], 0));
  g1 = (float)dot8(a.w[3], b.w[3], dot8(a.w[2], b.w[2], 0));
}

// ---- "f16x2" (Decode<DEC_F16X2>): each byte (2 values) -> an fp16x2 pair; fma.rn.f16x2 sums 8 exact
// products per half (multiples of 1/4 below 288: exact in fp16); the halves add in fp32.
// Blackwell converts with its e2m1x2 instruction; elsewhere the same conversion is done in
// integer steps (fp16 bits (c & 7) << 9 | (c & 8) << 12 are value * 2^-14; times 2^14),
// an exact stand-in so that this path is tested off Blackwell.
// Byte J of w (two e2m1 values) -> fp16x2. Blackwell's conversion reads the byte in place
// (SASS F2FP.F16.E2M1.UNPACK_B with a byte selector: no shift to bring it down; the instruction
// counts: benchmarks/NOTES.md, "The e2m1 conversion with a byte selector").
template <int J>
__device__ __forceinline__ u32 e2m1x2(u32 w) {
  u32 d;
#if HAS_E2M1_CVT
  asm("{ .reg .b8 t0, t1, t2, t3; mov.b32 {t0, t1, t2, t3}, %1; cvt.rn.f16x2.e2m1x2 %0, t%2; }"
      : "=r"(d) : "r"(w), "n"(J));
#else
  const u32 x = w >> (8 * J);
  u32 bits = ((x & 7u) << 9) | ((x & 8u) << 12) | ((x & 0x70u) << 21) | ((x & 0x80u) << 24);
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(bits), "r"(0x74007400u));
#endif
  return d;
}
__device__ __forceinline__ u32 e2m1x2_any(u32 w, int j) {  // j: a constant once unrolled
  return j == 0 ? e2m1x2<0>(w) : j == 1 ? e2m1x2<1>(w) : j == 2 ? e2m1x2<2>(w) : e2m1x2<3>(w);
}
struct BF16 { u32 h[16]; };
__device__ __forceinline__ BF16 prep_f16(const Q& q) {
  BF16 r;
#pragma unroll
  for (int j = 0; j < 16; ++j) r.h[j] = e2m1x2_any(q.w[j >> 2], j & 3);
  return r;
}
__device__ __forceinline__ u32 dot_group_f16(const Q& a, const BF16& b, int g) {
  u32 acc;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int byte = 8 * g + j;
    const u32 ah = e2m1x2_any(a.w[byte >> 2], byte & 3);
    if (j == 0) asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(acc) : "r"(ah), "r"(b.h[byte]));
    else asm("fma.rn.f16x2 %0, %1, %2, %0;" : "+r"(acc) : "r"(ah), "r"(b.h[byte]));
  }
  return acc;  // two exact half sums of the group (8 products each)
}

// ---- "dp4a-sr" (Decode<DEC_DP4A_SR>): as dp4a, but a's signs are handled by prmt's sign-replicate mode
// instead of per-byte selection: with a selector nibble's bit 3 set (a negative value) prmt
// writes 0 for the non-negative table bytes. prmt(T, v) then holds 2|a| of a's non-negative
// values, prmt(T, v ^ 0x8888) of its negative ones; dp4a with +2b and with -2b (prepared once
// per chunk) sums both. 11 instructions per 8 values of a, 6 of them (4 prmt, 2 xor) on the
// integer pipe; the shift runs on the multiply-add pipe (shr_hi below).
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
  u32 d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
struct Tables { u32 tlo, thi, nlo, nhi; };
// The tables in registers: ptxas would keep a constant in a uniform register and copy it to a
// regular one before every prmt; (threadIdx.x & zero), zero being a kernel argument that is
// always 0, makes the values per-lane as far as ptxas can tell, so they stay put.
__device__ __forceinline__ Tables tables(u32 zero) {
  const u32 z = threadIdx.x & zero;
  return Tables{0x03020100u | z, 0x0C080604u | z, 0xFDFEFF00u | z, 0xF4F8FAFCu | z};
}
struct BWordS { u32 b0, nb0, b1, nb1; };  // bytes +2b and -2b of the word's quads 0 and 1
struct BSigned { BWordS w[4]; };
// x >> k as the high word of x * 2^(32-k): on the multiply-add pipe (IMAD.HI) instead of the
// integer pipe's shift, which the prmt table lookups keep busy (Hopper issues integer-pipe
// instructions at half rate); ptxas keeps the multiply when it comes from inline PTX.
template <int K>
__device__ __forceinline__ u32 shr_hi(u32 x) {
  u32 d;
  asm("mul.hi.u32 %0, %1, %2;" : "=r"(d) : "r"(x), "n"(1u << (32 - K)));
  return d;
}
__device__ __forceinline__ BSigned prep_signed(const Q& q, const Tables& T) {
  BSigned r;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const u32 v = q.w[j], s0 = v & 0x7777u, s1 = shr_hi<16>(v) & 0x7777u;
    const u32 p0 = prmt(T.tlo, T.thi, s0), n0 = prmt(T.nlo, T.nhi, s0);
    const u32 p1 = prmt(T.tlo, T.thi, s1), n1 = prmt(T.nlo, T.nhi, s1);
    const u32 x = (shr_hi<1>(v) & 0x44444444u) | 0x32103210u;  // i + 4 sign(b_i)
    const u32 xh = shr_hi<16>(x);
    r.w[j].b0 = prmt(p0, n0, x);
    r.w[j].nb0 = prmt(p0, n0, x ^ 0x4444u);
    r.w[j].b1 = prmt(p1, n1, xh);
    r.w[j].nb1 = prmt(p1, n1, xh ^ 0x4444u);
  }
  return r;
}
// xh from vh by XOR, as in dot8_plus below.
__device__ __forceinline__ int dot8_signed(u32 v, const BWordS& b, const Tables& T, int acc) {
  const u32 x = v ^ 0x88888888u, vh = shr_hi<16>(v), xh = vh ^ 0x8888u;
  acc = __dp4a((int)prmt(T.tlo, T.thi, v), (int)b.b0, acc);
  acc = __dp4a((int)prmt(T.tlo, T.thi, x), (int)b.nb0, acc);
  acc = __dp4a((int)prmt(T.tlo, T.thi, vh), (int)b.b1, acc);
  return __dp4a((int)prmt(T.tlo, T.thi, xh), (int)b.nb1, acc);
}
__device__ __forceinline__ void dot_chunk(const Q& a, const BSigned& b, const Tables& T, float& g0, float& g1) {
  g0 = (float)dot8_signed(a.w[1], b.w[1], T, dot8_signed(a.w[0], b.w[0], T, 0));
  g1 = (float)dot8_signed(a.w[3], b.w[3], T, dot8_signed(a.w[2], b.w[2], T, 0));
}
__device__ __forceinline__ void dot_chunk(const Q& a, const BDp4a& b, const Tables&, float& g0, float& g1) {
  dot_chunk(a, b, g0, g1);
}

// ---- group scales. Each chunk's two groups g carry scales sa_g * sb_g; s_g = sa_g * sb_g * 2^-6
// is exact in fp16 (e4m3 products have <= 8 significant bits, lie in [2^-18, 448^2] and are
// multiples of 2^-18, so after 2^-6 they are multiples of 2^-24 below 3136: fp16's subnormal
// step and range), so one mul.rn.f16x2 forms both groups' scales from the e4m3 pairs (b's pair
// prepared as sb * 2^-6 once per chunk); the result is multiplied by 2^6 at the end. A group's
// dot (an integer times 1/4, or an fp16 half sum: <= 12 significant bits) times s_g is exact in
// fp32, so each group adds with one rounding, in a fixed order.
__device__ __forceinline__ u32 e4m3x2_f16x2(u32 v) {
  u32 d;
  asm("{ .reg .b16 t; cvt.u16.u32 t, %1; cvt.rn.f16x2.e4m3x2 %0, t; }" : "=r"(d) : "r"(v));
  return d;
}
__device__ __forceinline__ u32 hmul2(u32 x, u32 y) {
  u32 d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(y));
  return d;
}
__device__ __forceinline__ u32 prep_sb(u32 sbv) { return hmul2(e4m3x2_f16x2(sbv), 0x24002400u); }  // x 2^-6
__device__ __forceinline__ float half_f32(u32 s, int h) {
  float f;
  if (h == 0) asm("{ .reg .b16 l, u; mov.b32 {l, u}, %1; cvt.f32.f16 %0, l; }" : "=f"(f) : "r"(s));
  else asm("{ .reg .b16 l, u; mov.b32 {l, u}, %1; cvt.f32.f16 %0, u; }" : "=f"(f) : "r"(s));
  return f;
}
// acc + (half HX of x) * (half HS of s), both fp16, one rounding: Blackwell's mixed-precision fma
// (FHFMA, halves picked by operand selectors); elsewhere the exact conversions and an fp32 fma
// (the same result bit for bit).
template <int HX, int HS>
__device__ __forceinline__ float fma_h(u32 x, u32 s, float acc) {
  float d;
#if HAS_E2M1_CVT
  asm("{ .reg .b16 x0, x1, s0, s1; mov.b32 {x0, x1}, %1; mov.b32 {s0, s1}, %2;"
      " fma.rn.f32.f16 %0, x%4, s%5, %3; }" : "=f"(d) : "r"(x), "r"(s), "f"(acc), "n"(HX), "n"(HS));
#else
  d = fmaf(half_f32(x, HX), half_f32(s, HS), acc);
#endif
  return d;
}
// One chunk of a row (a, its scale pair sa) into acc, b prepared (bc, sb from prep_sb).
__device__ __forceinline__ float accumulate(float acc, const Q& a, u32 sa, const BF16& bc, u32 sb, const Tables&) {
  const u32 s = hmul2(e4m3x2_f16x2(sa), sb);
  const u32 h0 = dot_group_f16(a, bc, 0), h1 = dot_group_f16(a, bc, 1);
  // (lo + hi) * s_g formed exactly (lo * s_g is exact, and so is the sum: lo + hi has <= 12
  // significant bits, s_g 11), then one add per group, as the integer decodes do. Adding the
  // two products to acc one by one (two fewer instructions) rounds twice per group and fails the
  // 1e-3 check on full-range rows with heavy cancellation (benchmarks/NOTES.md, "The f16x2
  // decode's group sum").
  acc += fma_h<1, 0>(h0, s, fma_h<0, 0>(h0, s, 0.f));
  return acc + fma_h<1, 1>(h1, s, fma_h<0, 1>(h1, s, 0.f));
}
template <class B>
__device__ __forceinline__ float accumulate(float acc, const Q& a, u32 sa, const B& bc, u32 sb, const Tables& T) {
  const u32 s = hmul2(e4m3x2_f16x2(sa), sb);
  float g0, g1;
  dot_chunk(a, bc, T, g0, g1);
  acc = fmaf(g0, half_f32(s, 0), acc);
  return fmaf(g1, half_f32(s, 1), acc);
}

// ---- "dp4a-sr2" (Decode<DEC_DP4A_SR2>): dp4a-sr with b prepared as +2b only (half the words to prepare,
// keep and read back): a's non-negative and negative values are summed into two counters
// against the same +2b bytes, and the group is their difference (one IMAD: the integer pipe is
// the busier one).
struct BWordP { u32 b0, b1; };  // bytes +2b of the word's quads 0 and 1
struct BPlus { BWordP w[4]; };
__device__ __forceinline__ BPlus prep_plus(const Q& q, const Tables& T) {
  BPlus r;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const u32 v = q.w[j], s0 = v & 0x7777u, s1 = shr_hi<16>(v) & 0x7777u;
    const u32 x = (shr_hi<1>(v) & 0x44444444u) | 0x32103210u;  // i + 4 sign(b_i)
    r.w[j].b0 = prmt(prmt(T.tlo, T.thi, s0), prmt(T.nlo, T.nhi, s0), x);
    r.w[j].b1 = prmt(prmt(T.tlo, T.thi, s1), prmt(T.nlo, T.nhi, s1), shr_hi<16>(x));
  }
  return r;
}
// The high half's selector xh = (v ^ 0x88888888) >> 16 as vh ^ 0x8888, an integer-pipe XOR, not
// a second IMAD.HI: it moves 4 instructions per 16 bytes of a from the multiply-add pipe (IDP,
// IMAD), the busier one under SM pressure, to the integer pipe (benchmarks/NOTES.md, "Decode").
__device__ __forceinline__ void dot8_plus(u32 v, const BWordP& b, const Tables& T, int& pos, int& neg) {
  const u32 x = v ^ 0x88888888u, vh = shr_hi<16>(v), xh = vh ^ 0x8888u;
  pos = __dp4a((int)prmt(T.tlo, T.thi, v), (int)b.b0, pos);
  neg = __dp4a((int)prmt(T.tlo, T.thi, x), (int)b.b0, neg);
  pos = __dp4a((int)prmt(T.tlo, T.thi, vh), (int)b.b1, pos);
  neg = __dp4a((int)prmt(T.tlo, T.thi, xh), (int)b.b1, neg);
}
__device__ __forceinline__ int sub_imad(int p, int n) {
  int d;
  asm("mad.lo.s32 %0, %1, -1, %2;" : "=r"(d) : "r"(n), "r"(p));
  return d;
}
__device__ __forceinline__ void dot_chunk(const Q& a, const BPlus& b, const Tables& T, float& g0, float& g1) {
  int p0 = 0, n0 = 0, p1 = 0, n1 = 0;
  dot8_plus(a.w[0], b.w[0], T, p0, n0);
  dot8_plus(a.w[1], b.w[1], T, p0, n0);
  dot8_plus(a.w[2], b.w[2], T, p1, n1);
  dot8_plus(a.w[3], b.w[3], T, p1, n1);
  g0 = (float)sub_imad(p0, n0);
  g1 = (float)sub_imad(p1, n1);
}

template <int DECODE> struct Decode;
template <> struct Decode<DEC_DP4A> {
  typedef BDp4a B;
  static __device__ __forceinline__ B prep(const Q& q, const Tables&) { return prep_dp4a(q); }
  static constexpr float scale = 16.0f;  // 2^6 / 4
};
template <> struct Decode<DEC_F16X2> {
  typedef BF16 B;
  static __device__ __forceinline__ B prep(const Q& q, const Tables&) { return prep_f16(q); }
  static constexpr float scale = 64.0f;
};
template <> struct Decode<DEC_DP4A_SR2> {
  typedef BPlus B;
  static __device__ __forceinline__ B prep(const Q& q, const Tables& T) { return prep_plus(q, T); }
  static constexpr float scale = 16.0f;  // 2^6 / 4
};
template <> struct Decode<DEC_DP4A_SR> {
  typedef BSigned B;
  static __device__ __forceinline__ B prep(const Q& q, const Tables& T) { return prep_signed(q, T); }
  static constexpr float scale = 16.0f;  // 2^6 / 4
};

// Byte offset of the scale pair of groups 2ch, 2ch + 1 of row r. PLAIN: row-major [rows, K/16]
// per batch (row stride rs). Permuted (blocked): scale (r, g) of a batch sits at
// (r / 128) * G * 128 + (g / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + g % 4.
template <bool PLAIN>
__device__ __forceinline__ i64 scale_row(int r, i64 rs, int groups) {
  if (PLAIN) return (i64)r * rs;
  return (i64)(r >> 7) * groups * 128 + (r & 31) * 16 + ((r >> 5) & 3) * 4;
}
template <bool PLAIN>
__device__ __forceinline__ i64 scale_col(int ch) {
  if (PLAIN) return 2 * (i64)ch;
  return (i64)(ch >> 1) * 512 + (ch & 1) * 2;
}

// The body of one kernel: its template arguments are a CudaConfig's fields (submission.py's
// cuda_kernel writes them). LPR lanes per row, RPT rows per lane, U 16-byte chunks of a row per
// lane and step, V of them adjacent, WARPS warps of rows per block; LOAD, PIPE, DECODE (the enums
// above); FULL: every step whole (no bounds checks); PLAIN: the plain scales (else the permuted
// ones); PROBE: the loads-only timing probe (wrong results); BSH: b prepared once per warp and
// step through shared memory; KS, KB: K split over KS warps of a block and KB blocks (KINT: the
// parts' steps interleaved); BLOAD: b's loads with the evict-last priority. bx: the block's row group.
template <int LPR, int RPT, int U, int V, int WARPS, int LOAD, int PIPE, bool FULL, bool PLAIN, int DECODE,
          bool PROBE, bool BSH, int KS, int KB, bool BLOAD, bool KINT>
__device__ __forceinline__ void gemv_body(
    const unsigned char* __restrict__ a, const unsigned char* __restrict__ b,
    const unsigned char* __restrict__ sfa, const unsigned char* __restrict__ sfb,
    u16* __restrict__ c, int chunks, i64 a_rs, i64 a_bs, i64 b_bs, i64 sfa_rs, i64 sfa_bs,
    i64 sfb_bs, i64 c_rs, i64 c_bs, u32 zero, float* __restrict__ part, u32* __restrict__ cnt, int bx) {
  constexpr int RS = 32 / LPR;          // rows side by side in a warp
  constexpr int BROWS = WARPS * RS * RPT;
  constexpr int STEP = LPR * U;         // chunks of a row per step
  // the loads of a's scales: LOAD, but LD_NC_NO_ALLOCATE where a takes 32-byte loads
  constexpr int SLOAD = LOAD == LD_NO_ALLOCATE_L2_EVICT_FIRST_256 ? LD_NC_NO_ALLOCATE : LOAD;
  static_assert(U % V == 0, "U must be a multiple of V");
  static_assert(!BSH || STEP == 32, "BSH: a step spans 32 chunks, one per lane to prepare");
  typedef Decode<DECODE> D;
  typedef typename D::B B;
  constexpr int NW = sizeof(B) / 16;    // 16-byte words of a prepared b chunk
  static_assert(sizeof(B) % 16 == 0, "prepared b chunk: whole 16-byte words");
  // BSH: the warp prepares b once per step, lane L the step's chunk L, into shared memory as
  // [word][chunk] (consecutive lanes, consecutive 16 bytes: no bank conflicts either way; the
  // lanes of a step that share a chunk read one address).
  __shared__ uint4 sh_b[BSH ? WARPS * KS : 1][BSH ? NW : 1][32];
  __shared__ u32 sh_s[BSH ? WARPS * KS : 1][32];
  const Tables T = tables(zero);
  // KS > 1: the block's WARPS * KS warps split K in KS parts of whole steps; warp w takes rows
  // (w % WARPS) and part kp = w / WARPS, and the parts' row sums add in a fixed order at the end.
  // KB > 1: K is split in KB * KS parts over the KB blocks blockIdx.z of a row group (see the end).
  const int lane = threadIdx.x & 31, t = lane % LPR, warp = threadIdx.x >> 5;
  const int rw = warp % WARPS, kp = warp / WARPS;
  const int row0 = bx * BROWS + rw * RS * RPT + lane / LPR;  // bx: the block's row group
  const i64 bi = blockIdx.y;
  const int nsteps = (chunks + STEP - 1) / STEP;
  constexpr int NP = KS * KB;
  const int pi = (KB > 1 ? (int)blockIdx.z * KS : 0) + kp;
  // part pi's steps: a contiguous range, or (KINT) steps pi, pi + NP, pi + 2 NP, ...: the parts of
  // a row group then read its K front side by side, whole stretches of a row at a time
  const int cbeg = NP == 1 ? 0 : KINT ? pi * STEP : (pi * nsteps / NP) * STEP;
  const int cend = NP == 1 || KINT ? chunks : min(((pi + 1) * nsteps / NP) * STEP, chunks);
  constexpr int CSTRIDE = KINT ? NP * STEP : STEP;  // chunks from one of the part's steps to the next
  // per row: a pointer at the lane's first chunk and its scale pointer; each step moves both
  const unsigned char* ap[RPT];
  const unsigned char* sp[RPT];
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int r = row0 + RS * i;
    ap[i] = a + bi * a_bs + r * a_rs + 16 * (i64)(cbeg + t * V);
    sp[i] = sfa + bi * sfa_bs + scale_row<PLAIN>(r, sfa_rs, 2 * chunks) + (PLAIN ? 2 * (i64)(cbeg + t * V) : 0);
  }
  const unsigned char* bp = b + bi * b_bs;
  const unsigned char* sbp = sfb + bi * sfb_bs;
  float acc[RPT];
#pragma unroll
  for (int i = 0; i < RPT; ++i) acc[i] = 0.f;
  Q av[RPT][U];
  u32 sa[RPT][U];
  // offset (in chunks) of the lane's u-th chunk from its first of the step: V adjacent chunks
  // per lane, LPR lanes side by side
  auto off = [&](int u) { return (u / V) * (LPR * V) + u % V; };

  // The step's loads of a and its scales: every one an immediate offset from the row's pointer.
  auto load = [&](int c0) {
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int ch = c0 + t * V + off(u);
        if (FULL || ch < chunks) {
          if (LOAD != LD_NO_ALLOCATE_L2_EVICT_FIRST_256) av[i][u] = ld_a<LOAD>(ap[i] + 16 * off(u));
          else if (u % 2 == 0) ld_a32(ap[i] + 16 * off(u), av[i][u], av[i][u + 1 < U ? u + 1 : u]);  // V = 2
          const unsigned char* sq = PLAIN ? sp[i] + 2 * off(u) : sp[i] + scale_col<false>(ch);
          if (V == 1) sa[i][u] = ld_scales16<SLOAD>(sq);
          else if (u % 2 == 0) sa[i][u] = ld_scales32<SLOAD>(sq);
          else sa[i][u] = sa[i][u - 1] >> 16;
        } else {
          av[i][u] = Q{{0u, 0u, 0u, 0u}};
          sa[i][u] = 0u;
        }
      }
      ap[i] += 16 * CSTRIDE;
      if (PLAIN) sp[i] += 2 * CSTRIDE;
    }
  };
  // b chunk ch and its scale pair as loaded (zeros past the end), and prepared
  auto load_b = [&](const unsigned char* bstep, int ch, Q& bq, u32& sbv) {
    bq = Q{{0u, 0u, 0u, 0u}};
    sbv = 0u;
    if (FULL || ch < chunks) {
      bq = ld_b<BLOAD>(bstep + 16 * (i64)ch);
      sbv = ld_b_scales<BLOAD>(sbp + scale_col<PLAIN>(ch));
    }
  };
  auto prep_b = [&](const unsigned char* bstep, int ch, B& bc, u32& sb) {
    Q bq;
    u32 sbv;
    load_b(bstep, ch, bq, sbv);
    bc = D::prep(bq, T);
    sb = prep_sb(sbv);
  };
  // PIPE_AB_FIRST: b's chunks of the step and their scales loaded beside a's, before any arithmetic
  // (no dependency on a's loads: on a short row the step's two round trips become one).
  Q bqs[PIPE == PIPE_AB_FIRST ? U : 1];
  u32 sbs[PIPE == PIPE_AB_FIRST ? U : 1];
  auto compute = [&](int c0, const unsigned char* bstep) {
    if (BSH && !PROBE) {
      B mine;
      u32 sbm;
      prep_b(bstep, c0 + lane, mine, sbm);
      __syncwarp();  // the last step's reads are done
      const uint4* w = reinterpret_cast<const uint4*>(&mine);
#pragma unroll
      for (int k = 0; k < NW; ++k) sh_b[BSH ? warp : 0][k][lane] = w[k];
      sh_s[BSH ? warp : 0][lane] = sbm;
      __syncwarp();
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ch = c0 + t * V + off(u);
      if (PROBE) {  // timing probe: the same loads, next to no arithmetic (wrong results)
        Q bq;
        u32 sbv;
        load_b(bstep, ch, bq, sbv);
#pragma unroll
        for (int i = 0; i < RPT; ++i)
          acc[i] += (float)((av[i][u].w[0] ^ av[i][u].w[1] ^ av[i][u].w[2] ^ av[i][u].w[3]
                             ^ sa[i][u] ^ bq.w[0] ^ sbv) & 1u);
        continue;
      }
      B bc;
      u32 sb;
      if (BSH) {
        const int j = t * V + off(u);  // the chunk's index within the step
        uint4* w = reinterpret_cast<uint4*>(&bc);
#pragma unroll
        for (int k = 0; k < NW; ++k) w[k] = sh_b[BSH ? warp : 0][k][j];
        sb = sh_s[BSH ? warp : 0][j];
      } else if (PIPE == PIPE_AB_FIRST) {
        bc = D::prep(bqs[PIPE == PIPE_AB_FIRST ? u : 0], T);
        sb = prep_sb(sbs[PIPE == PIPE_AB_FIRST ? u : 0]);
      } else {
        prep_b(bstep, ch, bc, sb);
      }
#pragma unroll
      for (int i = 0; i < RPT; ++i) acc[i] = accumulate(acc[i], av[i][u], sa[i][u], bc, sb, T);
    }
  };

  for (int c0 = cbeg; c0 < cend; c0 += CSTRIDE) {
    load(c0);
    if (PIPE == PIPE_AB_FIRST) {
#pragma unroll
      for (int u = 0; u < U; ++u)
        load_b(bp, c0 + t * V + off(u), bqs[PIPE == PIPE_AB_FIRST ? u : 0], sbs[PIPE == PIPE_AB_FIRST ? u : 0]);
    }
    const unsigned char* bstep = bp;
    if (PIPE == PIPE_A_FIRST) {
      // All loads of the step are issued before the first use: ptxas would otherwise sink
      // each load next to its use (fewer registers, but one load in flight per lane). The b
      // loads depend on every one of them through `fold & zero` (zero is a kernel argument,
      // always 0; a 16-byte load completes as a whole, so one word suffices).
      u32 fold = 0u;
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int i = 0; i < RPT; ++i) fold ^= av[i][u].w[0] ^ sa[i][u];
      bstep = bp + (fold & zero);
    }
    compute(c0, bstep);
  }
  __shared__ float sh_r[KS > 1 ? KS : 1][KS > 1 ? BROWS : 1];
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    float v = acc[i];
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    acc[i] = v;
    if (KS > 1 && t == 0) sh_r[KS > 1 ? kp : 0][rw * RS * RPT + lane / LPR + RS * i] = v;
  }
  if (KS > 1) {
    __syncthreads();
    if (KB == 1 && kp != 0) return;
    if (kp == 0) {
#pragma unroll
      for (int i = 0; i < RPT; ++i) {
        float v = sh_r[0][rw * RS * RPT + lane / LPR + RS * i];
#pragma unroll
        for (int k = 1; k < KS; ++k) v += sh_r[KS > 1 ? k : 0][rw * RS * RPT + lane / LPR + RS * i];
        acc[i] = v;
      }
    }
  }
  if (KB > 1) {
    // K split over blocks: each block stores its rows' sums for its part z = blockIdx.z in
    // part[batch][z][row] and counts itself in cnt[batch][row group] (atomicInc wraps the count
    // to 0 on the KB-th arrival, ready for the next launch); the block that arrives last adds
    // the KB sums of its rows in the order z = 0, 1, ... (fixed whatever the arrival order, so
    // repeats are bit-identical; no float atomics) and writes c.
    const int m = gridDim.x * BROWS;
    __shared__ u32 sh_last;
    float* pr = part + bi * KB * (i64)m;
    if (kp == 0 && t == 0) {
#pragma unroll
      for (int i = 0; i < RPT; ++i) pr[(i64)blockIdx.z * m + row0 + RS * i] = acc[i];
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) sh_last = atomicInc(cnt + bi * gridDim.x + blockIdx.x, KB - 1) == KB - 1;
    __syncthreads();
    if (!sh_last || kp != 0) return;
    __threadfence();
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      float v = __ldcg(pr + row0 + RS * i);
#pragma unroll
      for (int z = 1; z < KB; ++z) v += __ldcg(pr + (i64)z * m + row0 + RS * i);
      acc[i] = v;
    }
  }
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    if (t == 0) {
      u16 h;
      asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(acc[i] * D::scale));
      c[bi * c_bs + (i64)(row0 + RS * i) * c_rs] = h;
    }
  }
}

// ---- The persistent bulk-copy ring (CudaConfig ring > 0; needs sm_90 or later).
// A persistent grid (blocks per SM x the context's SMs, at most one block per unit): block i
// reads an even share of the units (RPT consecutive rows of one batch, whole K), no K split
// across blocks. NPW producer warps, each with one lane issuing two bulk copies per stage (a's
// bytes and their plain scales, each contiguous: a stage is RPT whole rows, or one row's
// segment of 32 U chunks) into a ring of RING slots per consumer warp, completing on the slot's
// full barrier (expect_tx). The consumer warps form TEAMS teams of KS warps; a team takes every
// TEAMS-th unit of the block, its warp kw the unit's stages kw, kw + KS, ... (K parts
// interleaved); lane L reads chunks L, L + 32, ... of each row of a stage from shared memory,
// frees the slot on its empty barrier and keeps the rows' sums in registers across the unit.
// b and its scales are prepared once per block and batch into shared memory. Sums: per lane in a
// fixed order, a fixed butterfly, then the team's KS parts in the order kw = 0, 1, ...: the same
// bits whatever the grid. Waits are bounded (RING_TIMEOUT_NS): a stuck barrier makes the
// consumers write NaN instead of hanging.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#ifndef RING_TIMEOUT_NS
#define RING_TIMEOUT_NS 200000000ull  // 0.2 s: about 10^4 times the longest benchmark launch
#endif
__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity) {
  u32 ok;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok != 0;
}
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Wait for the phase of parity `parity` of barrier `bar`; false once RING_TIMEOUT_NS have passed.
__device__ __forceinline__ bool mbar_wait(u32 bar, u32 parity) {
  if (mbar_try_wait(bar, parity)) return true;
  const unsigned long long t0 = global_ns();
  while (!mbar_try_wait(bar, parity))
    if (global_ns() - t0 > RING_TIMEOUT_NS) return false;
  return true;
}
// `bytes` (a multiple of 16) from global `src` to shared `dst` (both 16-byte aligned), counted on
// barrier `bar`'s transaction count; `policy`: the L2 cache policy (createpolicy).
__device__ __forceinline__ void bulk_copy(u32 dst, const void* src, u32 bytes, u32 bar, unsigned long long policy) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
               " [%0], [%1], %2, [%3], %4;" ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(policy) : "memory");
}

// The ring's shared memory, in bytes from the dynamic block's start (submission.py's ring_smem
// computes the same sizes): barriers, the teams' partial sums (two units' worth), the slots of
// a, the slots of a's scales, then b prepared for each batch the block touches
// ([batch][word][chunk] 16-byte words, then [batch][chunk] scale pairs).
template <int RPT, int U, int NCW, int RING>
struct RingLayout {
  static constexpr int SLOT_CH = RPT * 32 * U;           // chunks of a per stage
  static constexpr int SLOT_A = 16 * SLOT_CH;             // bytes of a per stage
  static constexpr int SLOT_S = 2 * SLOT_CH;              // bytes of its scales
  static constexpr int BARS = 2 * NCW * RING * 8;
  static constexpr int RED = (BARS + 2 * NCW * RPT * 4 + 127) / 128 * 128 - BARS;
  static constexpr int A0 = BARS + RED;
  static constexpr int S0 = A0 + NCW * RING * SLOT_A;
  static constexpr int B0 = (S0 + NCW * RING * SLOT_S + 127) / 128 * 128;
};

// groups: units per batch (M / RPT); batches: L. The grid is gridDim.x persistent blocks of
// 32 * (TEAMS * KS + NPW) threads: the consumer warps, then NPW producer warps, producer p
// feeding the consumer warps p, p + NPW, ... through their empty barriers; NPW = 0: each consumer
// warp's lane 0 copies the warp's own next stages, into the slot the warp has just read (no
// producer, no empty barrier; benchmarks/NOTES.md, "The bulk-copy ring done right").
template <int RPT, int U, int TEAMS, int KS, int RING, int NPW, int DECODE, bool PROBE>
__device__ __forceinline__ void ring_body(
    const unsigned char* __restrict__ a, const unsigned char* __restrict__ b,
    const unsigned char* __restrict__ sfa, const unsigned char* __restrict__ sfb,
    u16* __restrict__ c, int chunks, i64 a_rs, i64 a_bs, i64 b_bs, i64 sfa_rs, i64 sfa_bs,
    i64 sfb_bs, i64 c_rs, i64 c_bs, u32 zero, int groups, int batches) {
  constexpr int NCW = TEAMS * KS;  // consumer warps
  typedef RingLayout<RPT, U, NCW, RING> L;
  typedef Decode<DECODE> D;
  typedef typename D::B B;
  constexpr int NW = sizeof(B) / 16;
  static_assert(sizeof(B) % 16 == 0, "prepared b chunk: whole 16-byte words");
  static_assert(KS == 1 || TEAMS + 2 <= 16, "a named barrier per team of several warps (ids 2..), 16 in all");
  constexpr int SEG = 32 * U;  // chunks of a row per stage
  extern __shared__ __align__(128) unsigned char ring_smem[];
  const u32 bars = smem_addr(ring_smem);  // full[w][s] at 8 (w RING + s), empty[w][s] after them
  float* red = reinterpret_cast<float*>(ring_smem + L::BARS);  // [unit parity][warp][row]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const i64 units = (i64)groups * batches;
  const i64 ubeg = units * blockIdx.x / gridDim.x, uend = units * (blockIdx.x + 1) / gridDim.x;
  const int nunits = (int)(uend - ubeg);
  const int spw = (RPT > 1 ? 1 : chunks / SEG) / KS;  // stages of a unit per warp of its team
  if (threadIdx.x == 0) {
    for (int i = 0; i < NCW * RING; ++i) {
      mbar_init(bars + 8 * i, 1);                 // full: the producer's expect_tx
      mbar_init(bars + 8 * (NCW * RING + i), 1);  // empty: one lane of the consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (nunits <= 0) return;
  const i64 bfirst = ubeg / groups;  // the first batch of the block's share
  // The copies of consumer warp w's stage q of its team's unit j into its slot `slot`, completing on
  // the slot's full barrier; as few instructions as it can (no division: batches back to back,
  // the server's layout, put unit gu's bytes at gu * RPT * (row stride)).
  const bool packed = batches == 1 || (a_bs == (i64)groups * RPT * a_rs && sfa_bs == (i64)groups * RPT * sfa_rs);
  const i64 ua = RPT * a_rs, us = RPT * sfa_rs;
  auto copy_stage = [&](int w, int j, int q, int slot, unsigned long long policy) {
    const i64 gu = ubeg + w / KS + j * TEAMS;
    i64 oa = gu * ua, os = gu * us;
    if (!packed) {
      const u32 bi = (u32)gu / (u32)groups, r0 = ((u32)gu - bi * groups) * RPT;
      oa = bi * a_bs + r0 * a_rs;
      os = bi * sfa_bs + r0 * sfa_rs;
    }
    const u32 full = bars + 8 * (w * RING + slot);
    mbar_expect_tx(full, L::SLOT_A + L::SLOT_S);
    const int ch0 = (w % KS + KS * q) * SEG;
    bulk_copy(bars + L::A0 + (w * RING + slot) * L::SLOT_A, a + oa + 16 * ch0, L::SLOT_A, full, policy);
    bulk_copy(bars + L::S0 + (w * RING + slot) * L::SLOT_S, sfa + os + 2 * ch0, L::SLOT_S, full, policy);
  };

  if (NPW > 0 && warp >= NCW) {  // a producer: one lane
    if (lane != 0) return;
    const unsigned long long policy = l2_first();
    const int rounds = ((nunits + TEAMS - 1) / TEAMS) * spw;  // stages of the busiest consumer warp
    int j = 0, q = 0;  // round t: unit j of each team, the team's stage q of it
    for (int t = 0; t < rounds; ++t) {
      const int slot = t % RING;
      const u32 parity = ((t / RING) & 1) ^ 1;
      for (int w = warp - NCW; w < NCW; w += NPW) {
        if (w / KS + j * TEAMS >= nunits) break;  // and so for the warps after it
        const u32 empty = bars + 8 * (NCW * RING + w * RING + slot);
        if (!mbar_wait(empty, parity)) return;  // a consumer is stuck: it writes NaN, stop feeding
        copy_stage(w, j, q, slot, policy);
      }
      if (++q == spw) {
        q = 0;
        ++j;
      }
    }
    return;
  }
  // NPW = 0: each consumer warp feeds its own slots (lane 0): its first RING stages now, each later
  // one into the slot it has just read. total: the warp's stages; (jn, qn): the next to copy.
  const int total = warp / KS < nunits ? (nunits - 1 - warp / KS) / TEAMS * spw + spw : 0;
  int jn = 0, qn = 0;
  if (NPW == 0 && lane == 0) {
    const unsigned long long policy = l2_first();
    for (int s0 = 0; s0 < RING && s0 < total; ++s0) {
      copy_stage(warp, jn, qn, s0, policy);
      if (++qn == spw) qn = 0, ++jn;
    }
  }

  // The consumers: b of each batch of the share prepared once, by all consumer warps together.
  const Tables T = tables(zero);
  const int nb = (int)((uend - 1) / groups - bfirst) + 1;
  uint4* shb = reinterpret_cast<uint4*>(ring_smem + L::B0);                           // [batch][word][chunk]
  u32* shs = reinterpret_cast<u32*>(ring_smem + L::B0 + (i64)nb * NW * chunks * 16);  // [batch][chunk]
  if (!PROBE) {
    for (int i = threadIdx.x; i < nb * chunks; i += 32 * NCW) {
      const int bb = i / chunks, ch = i - bb * chunks;
      const B bc = D::prep(ld_b<false>(b + (bfirst + bb) * b_bs + 16 * (i64)ch), T);
      const uint4* w = reinterpret_cast<const uint4*>(&bc);
#pragma unroll
      for (int k = 0; k < NW; ++k) shb[((i64)bb * NW + k) * chunks + ch] = w[k];
      shs[(i64)bb * chunks + ch] = prep_sb(ld_b_scales<false>(sfb + (bfirst + bb) * sfb_bs + scale_col<true>(ch)));
    }
    asm volatile("bar.sync 1, %0;" ::"r"(32 * NCW) : "memory");  // the consumers only
  }
  const int team = warp / KS, kw = warp % KS;
  bool stuck = false;
  int t = 0;  // this warp's stage count
  // the unit's batch bb (from the share's first) and its place ug in that batch, carried from unit to unit
  int bb = 0, ug = (int)(ubeg - bfirst * groups) + team;
  while (ug >= groups) ug -= groups, ++bb;
  for (int unit = team, j = 0; unit < nunits; unit += TEAMS, ++j, ug += TEAMS) {
    while (ug >= groups) ug -= groups, ++bb;
    const i64 bi = bfirst + bb;
    float acc[RPT];
#pragma unroll
    for (int r = 0; r < RPT; ++r) acc[r] = 0.f;
    for (int q = 0; q < spw; ++q, ++t) {
      const int slot = t % RING;
      const u32 full = bars + 8 * (warp * RING + slot), empty = bars + 8 * (NCW * RING + warp * RING + slot);
      if (stuck || !mbar_wait(full, (t / RING) & 1)) {
        stuck = true;
        continue;
      }
      const Q* sa = reinterpret_cast<const Q*>(ring_smem + L::A0 + (warp * RING + slot) * L::SLOT_A);
      const u16* ss = reinterpret_cast<const u16*>(ring_smem + L::S0 + (warp * RING + slot) * L::SLOT_S);
      const int k0 = (kw + KS * q) * SEG;  // the stage's first chunk along K
#pragma unroll
      for (int i = 0; i < U; ++i) {
        const int jc = 32 * i + lane;  // the lane's chunk of each row of the stage
        if (PROBE) {  // timing probe: the stage's shared-memory reads, next to no arithmetic
#pragma unroll
          for (int r = 0; r < RPT; ++r) {
            const Q av = sa[r * SEG + jc];
            acc[r] += (float)((av.w[0] ^ av.w[1] ^ av.w[2] ^ av.w[3] ^ ss[r * SEG + jc]) & 1u);
          }
          continue;
        }
        const int kc = k0 + jc;  // its chunk along K
        B bc;
        uint4* w = reinterpret_cast<uint4*>(&bc);
#pragma unroll
        for (int k = 0; k < NW; ++k) w[k] = shb[((i64)bb * NW + k) * chunks + kc];
        const u32 sb = shs[(i64)bb * chunks + kc];
#pragma unroll
        for (int r = 0; r < RPT; ++r) acc[r] = accumulate(acc[r], sa[r * SEG + jc], ss[r * SEG + jc], bc, sb, T);
      }
      __syncwarp();
      if (NPW > 0) {
        if (lane == 0) mbar_arrive(empty);
      } else if (lane == 0 && t + RING < total) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the slot's reads before its refill
        copy_stage(warp, jn, qn, slot, l2_first());
        if (++qn == spw) qn = 0, ++jn;
      }
    }
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      float v = stuck ? __int_as_float(0x7FC00000) : acc[r];  // NaN: a wait ran out (see RING_TIMEOUT_NS)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      acc[r] = v;
      if (KS > 1 && lane == 0) red[((j & 1) * NCW + warp) * RPT + r] = v;
    }
    if (KS > 1) {  // the team's parts, added in a fixed order by its first warp
      asm volatile("bar.sync %0, %1;" ::"r"(2 + team), "r"(32 * KS) : "memory");
      if (kw != 0) continue;
#pragma unroll
      for (int r = 0; r < RPT; ++r) {
        float v = red[((j & 1) * NCW + warp) * RPT + r];
#pragma unroll
        for (int k = 1; k < KS; ++k) v += red[((j & 1) * NCW + warp + k) * RPT + r];
        acc[r] = v;
      }
    }
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < RPT; ++r) {
        u16 h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(acc[r] * D::scale));
        c[bi * c_bs + ((i64)ug * RPT + r) * c_rs] = h;
      }
    }
  }
}
#endif

#ifdef NVFP4_GEMV_EXAMPLE
// One configuration, for a compiler or an editor that reads this file alone (submission.py never
// defines the macro): a bsh tile with K in 8 parts, CudaConfig(lpr=8, rpt=2, u=4, warps=1,
// decode="dp4a-sr2", v=1, pipe="ptxas", minb=2, bsh=True, ks=8), whole steps, plain scales.
extern "C" __global__ void __launch_bounds__(256, 2) nvfp4_gemv_example(
    const unsigned char* __restrict__ a, const unsigned char* __restrict__ b,
    const unsigned char* __restrict__ sfa, const unsigned char* __restrict__ sfb, u16* __restrict__ c, int chunks,
    i64 a_rs, i64 a_bs, i64 b_bs, i64 sfa_rs, i64 sfa_bs, i64 sfb_bs, i64 c_rs, i64 c_bs, u32 zero,
    float* __restrict__ part, u32* __restrict__ cnt, int groups) {
  const int bx = blockIdx.x;
  gemv_body<8, 2, 4, 1, 1, LD_L1_EVICT_FIRST, PIPE_PTXAS, true, true, DEC_DP4A_SR2, false, true, 8, 1, false, false>(
      a, b, sfa, sfb, c, chunks, a_rs, a_bs, b_bs, sfa_rs, sfa_bs, sfb_bs, c_rs, c_bs, zero, part, cnt, bx);
}
#endif

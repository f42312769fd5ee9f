"""codegen/c/prelude: the fixed C text every generated file starts with:
headers, the SIMD math functions of glibc (so loops calling exp, log, pow,
tanh or erf vectorise), an 8x8 transposing copy, the unrolling macro
NF_UNROLL (a `#pragma GCC unroll`, dropped in a quick build: toolchain's
`quick=True` defines NF_QUICK), and the helpers that give C the semantics of
nf.evaluate (floor division and modulo, NaN-propagating max/min, torch's sign, the error
report of a read out of bounds or a failed allocation).

Hands on: PRELUDE (a string).
"""
_INT = """\
static inline {t} nf_floordiv_{s}({t} a, {t} b) {{
    {t} q = a / b;
    return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}}
static inline {t} nf_mod_{s}({t} a, {t} b) {{
    {t} r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}}
static inline {t} nf_max_{s}({t} a, {t} b) {{ return a > b ? a : b; }}
static inline {t} nf_min_{s}({t} a, {t} b) {{ return a < b ? a : b; }}
static inline {t} nf_abs_{s}({t} a) {{ return a < 0 ? ({t})(0u - ({u})a) : a; }}
static inline {t} nf_sign_{s}({t} a) {{ return ({t})((a > 0) - (a < 0)); }}
"""

# max/min propagate NaN like nf.evaluate; both they and nf_blend (a select
# evaluating both sides) pick bits without a branch, so loops over them vectorise.
_FLOAT = """\
static inline {t} nf_blend_{s}(int c, {t} a, {t} b) {{
    union {{ {t} f; {u} u; }} x = {{a}}, y = {{b}}, r;
    {u} m = -({u})(c != 0);
    r.u = (x.u & m) | (y.u & ~m);
    return r.f;
}}
static inline {t} nf_max_{s}({t} a, {t} b) {{ return nf_blend_{s}((a > b) | (a != a), a, b); }}
static inline {t} nf_min_{s}({t} a, {t} b) {{ return nf_blend_{s}((a < b) | (a != a), a, b); }}
static inline {t} nf_mod_{s}({t} a, {t} b) {{ return a - floor{f}(a / b) * b; }}
static inline {t} nf_sign_{s}({t} a) {{ return ({t})((a > 0) - (a < 0)); }}   /* sign(NaN) = 0 */
"""

# glibc's vector math library (libmvec, linked through -lm) has SIMD versions
# of these functions; declaring them lets gcc vectorise loops that call them.
# log1p, expm1, sin and cos are deliberately not declared: they stay glibc's
# scalar functions (errors of an ulp or two), never a vector variant
# or a rewrite such as log(1 + x) (no -ffast-math either, codegen/c's rule).
_VECTOR_MATH = """\
#if defined(__x86_64__) && defined(__GLIBC__) && defined(_OPENMP)
#if __GLIBC__ > 2 || __GLIBC_MINOR__ >= 22
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
double exp(double);
#pragma omp declare simd notinbranch
float logf(float);
#pragma omp declare simd notinbranch
double log(double);
#pragma omp declare simd notinbranch
float powf(float, float);
#pragma omp declare simd notinbranch
double pow(double, double);
#endif
#if __GLIBC__ > 2 || __GLIBC_MINOR__ >= 35
#pragma omp declare simd notinbranch
float tanhf(float);
#pragma omp declare simd notinbranch
double tanh(double);
#pragma omp declare simd notinbranch
float erff(float);
#pragma omp declare simd notinbranch
double erf(double);
#endif
#endif

"""

# max and min as OpenMP reductions, so `omp simd` vectorises them with the
# helpers' semantics (NaN propagates); ignored without OpenMP.
_REDUCTION = ("#pragma omp declare reduction(nf_{op}_{s} : {t} : "
              "omp_out = nf_{op}_{s}(omp_out, omp_in)) initializer(omp_priv = {init})\n")
_REDUCTIONS = "".join(
    _REDUCTION.format(op=op, s=s, t=t, init=init[op == "max"])
    for s, t, init in (("f32", "float", ("INFINITY", "-INFINITY")),
                       ("f64", "double", ("INFINITY", "-INFINITY")),
                       ("i32", "int32_t", ("INT32_MAX", "INT32_MIN")),
                       ("i64", "int64_t", ("INT64_MAX", "INT64_MIN")))
    for op in ("max", "min")) + "\n"

# Vector types as wide as the target's SIMD registers (codegen/c/simd.py):
# unaligned, and allowed to alias the scalar arrays they are read from. The
# printer defines NF_VBYTES first (toolchain/target.py's width, the one the
# schedules were made for); the macros below stand in for C built without it.
_VECTORS = """\
#ifndef NF_VBYTES
#if defined(__AVX512F__)
#define NF_VBYTES 64
#elif defined(__AVX__)
#define NF_VBYTES 32
#else
#define NF_VBYTES 16
#endif
#endif
#define NF_LANES_F32 (NF_VBYTES / 4)
#define NF_LANES_F64 (NF_VBYTES / 8)
typedef float nf_vf32 __attribute__((vector_size(NF_VBYTES), aligned(4), may_alias));
typedef double nf_vf64 __attribute__((vector_size(NF_VBYTES), aligned(8), may_alias));
static inline nf_vf32 nf_splat_f32(float x) {
    nf_vf32 v;
    for (int i = 0; i < NF_LANES_F32; ++i) v[i] = x;
    return v;
}
static inline nf_vf64 nf_splat_f64(double x) {
    nf_vf64 v;
    for (int i = 0; i < NF_LANES_F64; ++i) v[i] = x;
    return v;
}
typedef float nf_hf32 __attribute__((vector_size(NF_VBYTES / 2), aligned(4), may_alias));
typedef double nf_hf64 __attribute__((vector_size(NF_VBYTES / 2), aligned(8), may_alias));
static inline nf_hf32 nf_hsplat_f32(float x) {
    nf_hf32 v;
    for (int i = 0; i < NF_LANES_F32 / 2; ++i) v[i] = x;
    return v;
}
static inline nf_hf64 nf_hsplat_f64(double x) {
    nf_hf64 v;
    for (int i = 0; i < NF_LANES_F64 / 2; ++i) v[i] = x;
    return v;
}

"""

# An 8x8 float block copied transposed (packing a dense layer's weight into
# column panels, schedule/lower.py): d[r * ds + c] = s[c * ss + r]. With AVX,
# 8 row loads, 24 shuffles and 8 row stores; a C loop gathers element by
# element (packing MI-LSTM's 1024x256 weight: 35 us against 40 on 2 cores,
# 38-53 against 68-71 on one). The shuffles are the AVX intrinsics' lane
# patterns written as __builtin_shufflevector on a vector type (gcc >= 12 and
# clang print the same vunpck/vshufps/vperm instructions) rather than through
# <immintrin.h>: parsing that header cost every translation unit 0.3 s of
# compile time, a third of a small kernel file's.
_TRANSPOSE = """\
#if defined(__AVX__) && defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define NF_TRANSPOSE8_SHUFFLE 1
#endif
#endif
#ifdef NF_TRANSPOSE8_SHUFFLE
typedef float nf_v8f32 __attribute__((vector_size(32), aligned(4), may_alias));
#define NF_UNPACKLO(a, b) __builtin_shufflevector(a, b, 0, 8, 1, 9, 4, 12, 5, 13)
#define NF_UNPACKHI(a, b) __builtin_shufflevector(a, b, 2, 10, 3, 11, 6, 14, 7, 15)
#define NF_LO2(a, b) __builtin_shufflevector(a, b, 0, 1, 8, 9, 4, 5, 12, 13)
#define NF_HI2(a, b) __builtin_shufflevector(a, b, 2, 3, 10, 11, 6, 7, 14, 15)
#define NF_LO4(a, b) __builtin_shufflevector(a, b, 0, 1, 2, 3, 8, 9, 10, 11)
#define NF_HI4(a, b) __builtin_shufflevector(a, b, 4, 5, 6, 7, 12, 13, 14, 15)
static inline void nf_transpose8_f32(float* restrict d, int64_t ds,
                                     const float* restrict s, int64_t ss) {
    nf_v8f32 r0 = *(const nf_v8f32*)s, r1 = *(const nf_v8f32*)(s + ss),
             r2 = *(const nf_v8f32*)(s + 2 * ss), r3 = *(const nf_v8f32*)(s + 3 * ss),
             r4 = *(const nf_v8f32*)(s + 4 * ss), r5 = *(const nf_v8f32*)(s + 5 * ss),
             r6 = *(const nf_v8f32*)(s + 6 * ss), r7 = *(const nf_v8f32*)(s + 7 * ss);
    nf_v8f32 t0 = NF_UNPACKLO(r0, r1), t1 = NF_UNPACKHI(r0, r1),
             t2 = NF_UNPACKLO(r2, r3), t3 = NF_UNPACKHI(r2, r3),
             t4 = NF_UNPACKLO(r4, r5), t5 = NF_UNPACKHI(r4, r5),
             t6 = NF_UNPACKLO(r6, r7), t7 = NF_UNPACKHI(r6, r7);
    nf_v8f32 u0 = NF_LO2(t0, t2), u1 = NF_HI2(t0, t2), u2 = NF_LO2(t1, t3), u3 = NF_HI2(t1, t3),
             u4 = NF_LO2(t4, t6), u5 = NF_HI2(t4, t6), u6 = NF_LO2(t5, t7), u7 = NF_HI2(t5, t7);
    *(nf_v8f32*)d = NF_LO4(u0, u4);
    *(nf_v8f32*)(d + ds) = NF_LO4(u1, u5);
    *(nf_v8f32*)(d + 2 * ds) = NF_LO4(u2, u6);
    *(nf_v8f32*)(d + 3 * ds) = NF_LO4(u3, u7);
    *(nf_v8f32*)(d + 4 * ds) = NF_HI4(u0, u4);
    *(nf_v8f32*)(d + 5 * ds) = NF_HI4(u1, u5);
    *(nf_v8f32*)(d + 6 * ds) = NF_HI4(u2, u6);
    *(nf_v8f32*)(d + 7 * ds) = NF_HI4(u3, u7);
}
#else
static inline void nf_transpose8_f32(float* restrict d, int64_t ds,
                                     const float* restrict s, int64_t ss) {
    for (int r = 0; r < 8; ++r)
        for (int c = 0; c < 8; ++c)
            d[r * ds + c] = s[c * ss + r];
}
#endif

"""

# nf.random_uniform (te/random.py, which has the same generator in NumPy):
# Philox-4x32-10 of counter (index, stream, counter lo, counter hi) under key
# (seed lo, seed hi); the first word (float32: its top 24 bits) or the first
# two (float64: the top 53 bits of word1:word0) scaled exactly into [0, 1).
_PHILOX = """\
static inline uint64_t nf_philox(int64_t seed, int64_t counter, int64_t stream,
                                 int64_t index) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)stream;
    uint32_t c2 = (uint32_t)counter, c3 = (uint32_t)((uint64_t)counter >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)((uint64_t)seed >> 32);
    for (int r = 0; r < 10; ++r) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return ((uint64_t)c1 << 32) | c0;
}
static inline float nf_uniform_f32(int64_t seed, int64_t counter, int64_t stream,
                                   int64_t index) {
    return (float)((uint32_t)nf_philox(seed, counter, stream, index) >> 8) * 0x1p-24f;
}
static inline double nf_uniform_f64(int64_t seed, int64_t counter, int64_t stream,
                                    int64_t index) {
    return (double)(nf_philox(seed, counter, stream, index) >> 11) * 0x1p-53;
}

"""

# A quick build (toolchain's quick=True) unrolls nothing: unrolled register
# tiles are most of an optimising compiler's work, and unrolling never changes
# the order of the arithmetic, only the speed.
_UNROLL = """\
#define NF_PRAGMA(text) _Pragma(#text)
#ifdef NF_QUICK
#define NF_UNROLL(n)
#else
#define NF_UNROLL(n) NF_PRAGMA(GCC unroll n)
#endif

"""

PRELUDE = "".join([
    "/* Generated by NeoFlow. */\n",
    "#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n\n",
    _UNROLL,
    _VECTOR_MATH,
    _INT.format(t="int32_t", u="uint32_t", s="i32"),
    _INT.format(t="int64_t", u="uint64_t", s="i64"),
    _FLOAT.format(t="float", u="uint32_t", s="f32", f="f"),
    _FLOAT.format(t="double", u="uint64_t", s="f64", f=""),
    _REDUCTIONS,
    _VECTORS,
    _TRANSPOSE,
    _PHILOX,
    """\
/* err[0]: 0 ok, -1 out of memory, n + 1 a read at checked site n out of
   bounds with err[1] the index; the first error wins. */
static inline int64_t nf_oob(int64_t* err, int64_t site, int64_t index) {
    int64_t expected = 0;
    if (__atomic_compare_exchange_n(&err[0], &expected, site + 1, 0,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        err[1] = index;
    return 0;
}
static inline void nf_oom(int64_t* err) {
    int64_t expected = 0;
    __atomic_compare_exchange_n(&err[0], &expected, -1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

"""])

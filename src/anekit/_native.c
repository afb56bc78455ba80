/* anekit's compiled kernels: fp16 rounding in place, add/sub/mul/div with the rounding fused,
 * float32 <-> fp16 conversion (the simulator's engine surfaces, and the weights the compiler
 * and weight updates write, through anekit/float16.py), a gather of strided views, and the
 * simulator's float32 GEMM.
 *
 * All are optional (setup.py builds them where a C compiler is found; float16.py, fp16.py and
 * gemm.py fall back to numpy otherwise) and all run without the GIL.
 *
 * round_in_place: float32 values to the nearest fp16 value (ties to even), still as float32.
 * The simulator rounds every fp16-typed result (tens of millions of values per GPT-2 run).
 * numpy's float16 cast is scalar code, about 1 ns per element each way even with the bit
 * tricks of fp16.py; this loop is branch-free integer and float arithmetic the compiler
 * vectorises (AVX-512 or AVX2 clones on x86-64, NEON on arm64).
 *
 * For |x| < 65520 (finite):
 *   - |x| >= 2**-14 (fp16 normal): keep 11 significant bits; adding 0xFFF plus the lowest kept
 *     bit, then clearing the 13 dropped bits, is round-to-nearest-even on the bit pattern
 *     (a carry into the exponent is the correct result);
 *   - |x| < 2**-14 (fp16 subnormal): the fp16 grid is 2**-24, the ulp of 0.5f, so
 *     (|x| + 0.5f) - 0.5f rounds to it to nearest even with the fp32 adder itself.
 * Where the CPU has AVX2 and F16C, a conversion to fp16 and back does the same rounding in two
 * instructions per 8 values (round_f16c, twice as fast); the loop above serves other CPUs.
 * Values at or above 65520 in magnitude, infinities and NaNs are left as they are and counted;
 * the caller hands those arrays to numpy's exact IEEE conversion (fp16.py), so both paths
 * give the same bits. Build with IEEE semantics (no -ffast-math): the 0.5f add must not be
 * folded away.
 *
 * gemm: C[M, N] = A[M, K] @ B[K, N], row-major float32, for the simulator's weight GEMMs
 * (a 1x1 conv or a matmul of a weight by activations: M channels, K channels, N tokens).
 * OpenBLAS runs these skinny products (N = 64 for GPT-2 on 64 tokens) at about 70 GFLOP/s
 * per core here; a plain 6x64 AVX-512 register block (24 accumulators; B's 64-column panel
 * stays in L2, A's six rows in L1) reaches about 100, as onnxruntime's pre-packed MLAS does.
 * Each output is a sequential fp32 sum over k (one FMA per k). Rows are split between
 * threads; only x86-64 with AVX-512F at run time (gemm_available()), numpy's BLAS elsewhere.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define ABS_MASK 0x7FFFFFFFu
#define MIN_NORMAL 0x38800000u /* 2**-14 */
#define OVERFLOW 0x477FF000u   /* 65520.0f: rounds to infinity in fp16 */
#define BLOCK ((Py_ssize_t)1 << 30) /* elements per call of round_block: its count fits 32 bits */

/* Selects are written as masks so that the loop has no branches and vectorises. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static uint32_t round_block(uint32_t *restrict bits, uint32_t n)
{
    uint32_t special = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = bits[i];
        uint32_t a = b & ABS_MASK;
        uint32_t normal = (a + 0xFFFu + ((a >> 13) & 1u)) & 0xFFFFE000u;
        float f;
        memcpy(&f, &a, sizeof f);
        f = (f + 0.5f) - 0.5f;
        uint32_t sub;
        memcpy(&sub, &f, sizeof sub);
        uint32_t is_sub = 0u - (uint32_t)(a < MIN_NORMAL);
        uint32_t is_big = 0u - (uint32_t)(a >= OVERFLOW);
        uint32_t r = ((sub & is_sub) | (normal & ~is_sub)) | (b & ~ABS_MASK);
        bits[i] = (b & is_big) | (r & ~is_big);
        special += is_big & 1u;
    }
    return special;
}

/* A C-contiguous float32 buffer (writable if asked) of exactly ``count`` values, or of any
 * size when ``count`` is negative; ValueError naming ``what`` otherwise. */
static int float_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t count, int writable,
                        const char *what)
{
    int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    const char *fmt = view->format ? view->format : "B";
    if (*fmt == '<' || *fmt == '=' || *fmt == '@')
        fmt++;
    if (view->itemsize != 4 || strcmp(fmt, "f") != 0) {
        PyErr_Format(PyExc_ValueError, "%s must be float32", what);
        PyBuffer_Release(view);
        return -1;
    }
    if (count >= 0 && view->len / 4 != count) {
        PyErr_Format(PyExc_ValueError, "%s must hold %zd values", what, count);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(round_doc,
"round_in_place(buffer) -> int\n\n"
"Round the float32 values of a writable C-contiguous buffer to fp16 values in place.\n"
"Returns how many values were left alone: |x| >= 65520, infinities and NaNs.");

static int f16c_supported(void);
static int avx2_supported(void);
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
/* round_block with F16C where the CPU has it (AVX2 for the 8-lane integer compare): the
 * conversion to fp16 and back is IEEE rounding to nearest even in two instructions per 8
 * values, twice as fast as the bit arithmetic. The same contract: lanes with |x| >= 65520
 * (infinities, NaNs) are left as they were and counted; the tail takes round_block. */
__attribute__((target("avx2,f16c"))) static Py_ssize_t round_f16c(uint32_t *bits, Py_ssize_t n)
{
    const __m256i abs_mask = _mm256_set1_epi32((int)ABS_MASK);
    const __m256i below = _mm256_set1_epi32((int)OVERFLOW - 1);
    Py_ssize_t i = 0, special = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i b = _mm256_loadu_si256((const __m256i *)(bits + i));
        __m256 x = _mm256_castsi256_ps(b);
        __m256 r = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m256 big = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_and_si256(b, abs_mask), below));
        special += __builtin_popcount((unsigned)_mm256_movemask_ps(big));
        _mm256_storeu_ps((float *)(bits + i), _mm256_blendv_ps(r, x, big));
    }
    return special + round_block(bits + i, (uint32_t)(n - i));
}
#endif

static PyObject *round_in_place(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (float_buffer(arg, &view, -1, 1, "round_in_place: the buffer") < 0)
        return NULL;
    Py_ssize_t n = view.len / 4, special = 0;
    uint32_t *bits = (uint32_t *)view.buf;
    int fast = f16c_supported() && avx2_supported();
    Py_BEGIN_ALLOW_THREADS
#if defined(__GNUC__) && defined(__x86_64__)
    if (fast)
        special = round_f16c(bits, n);
    else
#endif
    for (Py_ssize_t start = 0; start < n; start += BLOCK) {
        Py_ssize_t left = n - start;
        special += round_block(bits + start, (uint32_t)(left < BLOCK ? left : BLOCK));
    }
    Py_END_ALLOW_THREADS
    (void)fast;
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(special);
}


/* ---- binary_round: x (op) y rounded to fp16 in one pass ------------------------------------
 * The simulator's add, sub, mul and real_div on fp16 values compute in fp32 and round the
 * result (numpy's ufunc, then round_in_place: two passes over memory and a temporary). Here
 * both happen per 8 values in registers. IEEE arithmetic and F16C's rounding give numpy's
 * bits for every finite result below 65520; a result at or above it, infinite or NaN (whose
 * payload the two could differ on) is only counted, and the caller then computes the whole
 * product with numpy (fp16.py). Operands: C-contiguous float32 of n values, or of 1 value
 * (a scalar broadcast). */
#if defined(__GNUC__) && defined(__x86_64__)
#define BINARY_LOOP(EXPR)                                                                       \
    for (; i + 8 <= n; i += 8) {                                                                \
        __m256 a = nx == 1 ? _mm256_set1_ps(x[0]) : _mm256_loadu_ps(x + i);                     \
        __m256 b = ny == 1 ? _mm256_set1_ps(y[0]) : _mm256_loadu_ps(y + i);                     \
        __m256 r = EXPR;                                                                        \
        __m256i big = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(r), abs_mask),   \
                                         below);                                                \
        special += __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(big))); \
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_cvtps_ph(r, ROUNDING)));              \
    }

#define ROUNDING (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

__attribute__((target("avx2,f16c"))) static Py_ssize_t binary_round_f16c(
    int op, const float *x, Py_ssize_t nx, const float *y, Py_ssize_t ny, float *out,
    Py_ssize_t n)
{
    const __m256i abs_mask = _mm256_set1_epi32((int)ABS_MASK);
    const __m256i below = _mm256_set1_epi32((int)OVERFLOW - 1);
    Py_ssize_t i = 0, special = 0;
    switch (op) {
    case 0: BINARY_LOOP(_mm256_add_ps(a, b)) break;
    case 1: BINARY_LOOP(_mm256_sub_ps(a, b)) break;
    case 2: BINARY_LOOP(_mm256_mul_ps(a, b)) break;
    default: BINARY_LOOP(_mm256_div_ps(a, b)) break;
    }
    for (; i < n; i++) { /* the last values one by one, rounded by the bit arithmetic */
        float a = x[nx == 1 ? 0 : i], b = y[ny == 1 ? 0 : i];
        float r = op == 0 ? a + b : op == 1 ? a - b : op == 2 ? a * b : a / b;
        uint32_t bits;
        memcpy(&bits, &r, sizeof bits);
        special += round_block(&bits, 1);
        memcpy(out + i, &bits, sizeof bits);
    }
    return special;
}
#endif

PyDoc_STRVAR(binary_round_doc,
"binary_round(op, x, y, out) -> int or None\n\n"
"out = fp16 rounding of x + y, x - y, x * y or x / y (op 0 to 3), as float32; x and y are\n"
"C-contiguous float32 buffers of out's size or of one value. Returns how many results were\n"
"at or above 65520 in magnitude, infinite or NaN (out is then not to be used), or None\n"
"where the CPU lacks AVX2 and F16C (nothing was computed).");

static PyObject *binary_round(PyObject *self, PyObject *args)
{
    int op;
    PyObject *xo, *yo, *oo;
    if (!PyArg_ParseTuple(args, "iOOO:binary_round", &op, &xo, &yo, &oo))
        return NULL;
    if (op < 0 || op > 3) {
        PyErr_SetString(PyExc_ValueError, "binary_round: op must be 0 to 3");
        return NULL;
    }
    if (!(f16c_supported() && avx2_supported()))
        Py_RETURN_NONE;
    Py_buffer vx, vy, vo;
    if (float_buffer(oo, &vo, -1, 1, "binary_round: out") < 0)
        return NULL;
    if (float_buffer(xo, &vx, -1, 0, "binary_round: x") < 0) {
        PyBuffer_Release(&vo);
        return NULL;
    }
    if (float_buffer(yo, &vy, -1, 0, "binary_round: y") < 0) {
        PyBuffer_Release(&vo);
        PyBuffer_Release(&vx);
        return NULL;
    }
    Py_ssize_t n = vo.len / 4, nx = vx.len / 4, ny = vy.len / 4, special = 0;
    if ((nx != n && nx != 1) || (ny != n && ny != 1)) {
        PyErr_SetString(PyExc_ValueError, "binary_round: x and y must hold out's count or 1");
        PyBuffer_Release(&vo);
        PyBuffer_Release(&vx);
        PyBuffer_Release(&vy);
        return NULL;
    }
#if defined(__GNUC__) && defined(__x86_64__)
    Py_BEGIN_ALLOW_THREADS
    special = binary_round_f16c(op, vx.buf, nx, vy.buf, ny, vo.buf, n);
    Py_END_ALLOW_THREADS
#endif
    PyBuffer_Release(&vo);
    PyBuffer_Release(&vx);
    PyBuffer_Release(&vy);
    return PyLong_FromSsize_t(special);
}


/* ---- fp16 surfaces: float32 <-> IEEE binary16 bits ------------------------------------------
 * A session's engine surfaces hold fp16 bytes (binding.py). numpy's float16 casts cost about
 * 2 ns per element each way here, more than the arithmetic of a training step; these loops
 * convert with F16C (8 lanes per instruction) where the CPU has it, and fall back to the
 * scalar conversions below for any block holding a NaN (whose payload F16C may quiet) and on
 * other machines. The scalar conversions are numpy's own rules: round to nearest even,
 * overflow to infinity, NaN payloads truncated but kept NaN. */

static uint16_t half_from_bits(uint32_t f)
{
    uint16_t sign = (uint16_t)((f >> 16) & 0x8000u);
    uint32_t a = f & ABS_MASK;
    if (a >= 0x7F800000u) { /* infinity or NaN */
        uint16_t r = (uint16_t)(0x7C00u | (a & 0x7FFFFFu) >> 13);
        if (a != 0x7F800000u && r == 0x7C00u)
            r++; /* a NaN whose payload was all in the dropped bits stays a NaN */
        return sign | r;
    }
    if (a >= OVERFLOW)
        return sign | 0x7C00u;
    if (a < MIN_NORMAL) { /* fp16 subnormal: 0.5f's ulp is fp16's 2**-24 grid (see above) */
        float x;
        memcpy(&x, &a, sizeof x);
        x += 0.5f;
        uint32_t b;
        memcpy(&b, &x, sizeof b);
        return sign | (uint16_t)(b - 0x3F000000u);
    }
    uint32_t r = (a + 0xFFFu + ((a >> 13) & 1u)) & 0xFFFFE000u; /* a carry is correct */
    return sign | (uint16_t)((r - 0x38000000u) >> 13);          /* rebias 127 -> 15 */
}

static uint32_t bits_from_half(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu)
        return sign | 0x7F800000u | m << 13;
    if (e == 0) { /* subnormal (or zero): m * 2**-24, exact in float32 */
        float x = (float)m * 5.9604644775390625e-08f;
        uint32_t b;
        memcpy(&b, &x, sizeof b);
        return sign | b;
    }
    return sign | (e + 112u) << 23 | m << 13;
}

static void narrow_scalar(const uint32_t *src, uint16_t *dst, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        dst[i] = half_from_bits(src[i]);
}

static void widen_scalar(const uint16_t *src, uint32_t *dst, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        dst[i] = bits_from_half(src[i]);
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_F16C 1

__attribute__((target("avx,f16c"))) static void narrow_f16c(const uint32_t *src, uint16_t *dst,
                                                              Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps((const float *)(src + i));
        if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
            narrow_scalar(src + i, dst + i, 8);
        else
            _mm_storeu_si128((__m128i *)(dst + i),
                             _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    narrow_scalar(src + i, dst + i, n - i);
}

__attribute__((target("avx,f16c"))) static void widen_f16c(const uint16_t *src, uint32_t *dst,
                                                             Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
        if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
            widen_scalar(src + i, dst + i, 8);
        else
            _mm256_storeu_ps((float *)(dst + i), x);
    }
    widen_scalar(src + i, dst + i, n - i);
}
#endif

static int f16c_supported(void)
{
#ifdef HAVE_F16C
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

static int avx2_supported(void)
{
#ifdef HAVE_F16C
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

/* A C-contiguous buffer of ``itemsize``-byte items (writable if asked); ValueError otherwise. */
static int items_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, int writable,
                        const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->itemsize != itemsize || view->len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s must have %zd-byte items", what, itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Both conversions: check the buffers, then convert without the GIL. */
static PyObject *convert(PyObject *args, int narrow)
{
    PyObject *src, *dst;
    if (!PyArg_ParseTuple(args, "OO", &src, &dst))
        return NULL;
    Py_buffer vs, vd;
    Py_ssize_t in_size = narrow ? 4 : 2, out_size = narrow ? 2 : 4;
    if (items_buffer(src, &vs, in_size, 0, "the source") < 0)
        return NULL;
    if (items_buffer(dst, &vd, out_size, 1, "the destination") < 0) {
        PyBuffer_Release(&vs);
        return NULL;
    }
    Py_ssize_t n = vs.len / in_size;
    if (vd.len / out_size != n) {
        PyErr_Format(PyExc_ValueError, "the source holds %zd values, the destination %zd", n,
                     vd.len / out_size);
        PyBuffer_Release(&vs);
        PyBuffer_Release(&vd);
        return NULL;
    }
    int fast = f16c_supported();
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_F16C
    if (fast && narrow)
        narrow_f16c(vs.buf, vd.buf, n);
    else if (fast)
        widen_f16c(vs.buf, vd.buf, n);
    else
#endif
    if (narrow)
        narrow_scalar(vs.buf, vd.buf, n);
    else
        widen_scalar(vs.buf, vd.buf, n);
    Py_END_ALLOW_THREADS
    (void)fast;
    PyBuffer_Release(&vs);
    PyBuffer_Release(&vd);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(to_fp16_doc,
"to_fp16(src, dst) -> None\n\n"
"dst[i] = the IEEE fp16 bits of float32 src[i] (nearest even, as numpy's cast): src a\n"
"C-contiguous buffer of 4-byte items, dst a writable one of as many 2-byte items.");

static PyObject *to_fp16(PyObject *self, PyObject *args) { return convert(args, 1); }

PyDoc_STRVAR(from_fp16_doc,
"from_fp16(src, dst) -> None\n\n"
"dst[i] = float32 value of the fp16 bits src[i] (exact): src a C-contiguous buffer of\n"
"2-byte items, dst a writable one of as many 4-byte items.");

static PyObject *from_fp16(PyObject *self, PyObject *args) { return convert(args, 0); }


/* ---- gather: a strided 2-D float32 view into a C-contiguous array ----------------------------
 * A transposed view (a layout change between the model's and the engine's forms, done every
 * training step for each weight and optimizer slot) copied by numpy walks the source one
 * column at a time: every element is a cache miss, ~0.9 ns each here. Copying in 32 x 32
 * tiles keeps the tile's source lines in L1 (~0.15 ns each). Plain copies: bits unchanged. */
#define TILE 32

static void gather_tiles(const char *src, Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t rs,
                         Py_ssize_t cs, uint32_t *dst, Py_ssize_t ld)
{
    for (Py_ssize_t i0 = 0; i0 < rows; i0 += TILE) {
        Py_ssize_t i1 = i0 + TILE < rows ? i0 + TILE : rows;
        for (Py_ssize_t j0 = 0; j0 < cols; j0 += TILE) {
            Py_ssize_t j1 = j0 + TILE < cols ? j0 + TILE : cols;
            for (Py_ssize_t i = i0; i < i1; i++) {
                const char *row = src + i * rs;
                uint32_t *out = dst + i * ld;
                for (Py_ssize_t j = j0; j < j1; j++)
                    memcpy(out + j, row + j * cs, 4);
            }
        }
    }
}

#if defined(__GNUC__) && defined(__x86_64__)
/* A transposed view (its rows' items adjacent: rs == 4) in 16 x 8 blocks: the eight source
 * columns' 64-byte runs are loaded once each, transposed in registers (two 8 x 8 blocks) and
 * stored as 32-byte row pieces. No tile has to stay in L1: with power-of-two row lengths the
 * 32 x 32 tiles' source lines share a few cache sets and evict each other (0.47 against
 * 0.08 ms for a 512 x 512 transpose). Plain copies; the edges take the tiles. */
__attribute__((target("avx"))) static void transpose8(const float *src, Py_ssize_t cs,
                                                      float *dst, Py_ssize_t cols)
{
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + cs),
           r2 = _mm256_loadu_ps(src + 2 * cs), r3 = _mm256_loadu_ps(src + 3 * cs),
           r4 = _mm256_loadu_ps(src + 4 * cs), r5 = _mm256_loadu_ps(src + 5 * cs),
           r6 = _mm256_loadu_ps(src + 6 * cs), r7 = _mm256_loadu_ps(src + 7 * cs);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
           t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
           t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
           u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
           u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
           u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + cols, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * cols, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * cols, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * cols, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * cols, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * cols, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * cols, _mm256_permute2f128_ps(u3, u7, 0x31));
}

static void gather_transposed(const char *src, Py_ssize_t rows, Py_ssize_t cols,
                              Py_ssize_t cs, uint32_t *dst)
{
    const Py_ssize_t fr = rows / 16 * 16, fc = cols / 8 * 8, step = cs / 4;
    for (Py_ssize_t i = 0; i < fr; i += 16)
        for (Py_ssize_t j = 0; j < fc; j += 8) {
            const float *s = (const float *)(src + j * cs) + i;
            float *d = (float *)dst + i * cols + j;
            transpose8(s, step, d, cols);
            transpose8(s + 8, step, d + 8 * cols, cols);
        }
    if (fc < cols) /* the last columns of the full row blocks */
        gather_tiles(src + fc * cs, fr, cols - fc, 4, cs, dst + fc, cols);
    if (fr < rows)
        gather_tiles(src + fr * 4, rows - fr, cols, 4, cs, dst + fr * cols, cols);
}
#endif

PyDoc_STRVAR(gather_doc,
"gather(src, dst) -> None\n\n"
"Copy a 2-D buffer of 4-byte items with any strides into the C-contiguous dst of as many\n"
"items (row-major order).");

static PyObject *gather(PyObject *self, PyObject *args)
{
    PyObject *src, *dst;
    if (!PyArg_ParseTuple(args, "OO:gather", &src, &dst))
        return NULL;
    Py_buffer vs, vd;
    if (PyObject_GetBuffer(src, &vs, PyBUF_STRIDED_RO) < 0)
        return NULL;
    if (vs.ndim != 2 || vs.itemsize != 4) {
        PyErr_SetString(PyExc_ValueError, "gather: the source must be 2-D with 4-byte items");
        PyBuffer_Release(&vs);
        return NULL;
    }
    if (items_buffer(dst, &vd, 4, 1, "the destination") < 0) {
        PyBuffer_Release(&vs);
        return NULL;
    }
    Py_ssize_t rows = vs.shape[0], cols = vs.shape[1];
    if (vd.len / 4 != rows * cols) {
        PyErr_Format(PyExc_ValueError, "the source holds %zd values, the destination %zd",
                     rows * cols, vd.len / 4);
        PyBuffer_Release(&vs);
        PyBuffer_Release(&vd);
        return NULL;
    }
    int avx = f16c_supported(); /* AVX and F16C: AVX is what the transposes need */
    (void)avx;
    Py_BEGIN_ALLOW_THREADS
#if defined(__GNUC__) && defined(__x86_64__)
    if (avx && vs.strides[0] == 4 && vs.strides[1] % 4 == 0)
        gather_transposed(vs.buf, rows, cols, vs.strides[1], vd.buf);
    else
#endif
        gather_tiles(vs.buf, rows, cols, vs.strides[0], vs.strides[1], vd.buf, cols);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&vs);
    PyBuffer_Release(&vd);
    Py_RETURN_NONE;
}


/* ---- gemm -------------------------------------------------------------------------------- */

#if defined(__GNUC__) && defined(__x86_64__) && !defined(_WIN32)
#define HAVE_GEMM 1
#include <immintrin.h>
#include <pthread.h>

#define ROWS 6    /* rows of A per register block */
#define COLS 64   /* columns of B per register block: four 16-float vectors */
#define MAX_THREADS 64

/* The register blocks: C[0:R, 0:cols] = A[0:R, :] @ B[:, 0:cols] for R = 6 and R = 1.
 * ``mask`` selects the columns of a panel narrower than 64 (all ones for a full one; masked
 * lanes load zeros and are not stored). The accumulators are named variables, one per row
 * and vector: held in an array, GCC stored all 24 to the stack on every k (2.5x slower). */
#define ZERO(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = c##r##0, c##r##2 = c##r##0,    \
                       c##r##3 = c##r##0;
#define FMA(r)                                                                                  \
    {                                                                                           \
        __m512 a = _mm512_set1_ps(A[(r) * lda + k]);                                            \
        c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0);                                              \
        c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1);                                              \
        c##r##2 = _mm512_fmadd_ps(a, b2, c##r##2);                                              \
        c##r##3 = _mm512_fmadd_ps(a, b3, c##r##3);                                              \
    }
#define STORE(r)                                                                                \
    _mm512_mask_storeu_ps(C + (r) * ldc, m0, c##r##0);                                          \
    _mm512_mask_storeu_ps(C + (r) * ldc + 16, m1, c##r##1);                                     \
    _mm512_mask_storeu_ps(C + (r) * ldc + 32, m2, c##r##2);                                     \
    _mm512_mask_storeu_ps(C + (r) * ldc + 48, m3, c##r##3);
#define LOAD_B                                                                                  \
    const float *b = B + k * ldb;                                                               \
    __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);           \
    __m512 b2 = _mm512_maskz_loadu_ps(m2, b + 32), b3 = _mm512_maskz_loadu_ps(m3, b + 48);
#define MASKS const __mmask16 m0 = mask[0], m1 = mask[1], m2 = mask[2], m3 = mask[3];

#define RESUME(r)                                                                               \
    c##r##0 = _mm512_maskz_loadu_ps(m0, C + (r) * ldc);                                        \
    c##r##1 = _mm512_maskz_loadu_ps(m1, C + (r) * ldc + 16);                                   \
    c##r##2 = _mm512_maskz_loadu_ps(m2, C + (r) * ldc + 32);                                   \
    c##r##3 = _mm512_maskz_loadu_ps(m3, C + (r) * ldc + 48);

/* ``resume``: the sums continue from C (the products of an earlier block of k), so each
 * output is still one sequential chain of FMAs over k = 0..K-1, whatever the blocking. */
__attribute__((target("avx512f"))) static void block6(const float *A, long lda, const float *B,
    long ldb, float *C, long ldc, long K, const __mmask16 *mask, int resume)
{
    MASKS
    ZERO(0) ZERO(1) ZERO(2) ZERO(3) ZERO(4) ZERO(5)
    if (resume) {
        RESUME(0) RESUME(1) RESUME(2) RESUME(3) RESUME(4) RESUME(5)
    }
    for (long k = 0; k < K; k++) {
        LOAD_B
        FMA(0) FMA(1) FMA(2) FMA(3) FMA(4) FMA(5)
    }
    STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5)
}

/* One row: the last M % 6 rows. */
__attribute__((target("avx512f"))) static void block1(const float *A, long lda, const float *B,
    long ldb, float *C, long ldc, long K, const __mmask16 *mask, int resume)
{
    MASKS
    ZERO(0)
    if (resume) {
        RESUME(0)
    }
    for (long k = 0; k < K; k++) {
        LOAD_B
        FMA(0)
    }
    STORE(0)
    (void)lda;
}

typedef struct {
    const float *A, *B;
    float *C;
    long row0, row1, K, N;
} part;

#define KC 256 /* k per block: B's KC x 64 panel (64 KiB) stays in L2 across the rows */

/* Rows [row0, row1) of C: block of k by block of k, then column panel by panel, then row
 * block by row block, so one panel of B serves every row of the part from L2 (B read from
 * memory once per part, not once per six rows: 42 against ~14 MB of traffic for a
 * 32 x 12544 x 144 product) and the sums resume from C between blocks of k. */
static void *gemm_rows(void *arg)
{
    const part *p = arg;
    const long K = p->K, N = p->N;
    for (long k0 = 0; k0 < K; k0 += KC) {
        const long kc = K - k0 < KC ? K - k0 : KC;
        for (long j = 0; j < N; j += COLS) {
            __mmask16 mask[4];
            for (int v = 0; v < 4; v++) {
                long left = N - j - 16 * v;
                mask[v] = left >= 16 ? (__mmask16)0xFFFF
                        : left <= 0  ? (__mmask16)0
                                     : (__mmask16)((1u << left) - 1u);
            }
            for (long r = p->row0; r < p->row1;) {
                int rows = p->row1 - r >= ROWS ? ROWS : 1;
                const float *A = p->A + r * K + k0, *B = p->B + k0 * N + j;
                float *C = p->C + r * N + j;
                if (rows == ROWS)
                    block6(A, K, B, N, C, N, kc, mask, k0 > 0);
                else
                    block1(A, K, B, N, C, N, kc, mask, k0 > 0);
                r += rows;
            }
        }
    }
    return NULL;
}

/* ---- the worker pool ----
 * Workers live for the process and are started on first use. A run of the simulator calls the
 * GEMM every millisecond or so, with numpy work in between. Rows are handed out in chunks
 * (about four per thread, whole register blocks) from a shared counter: the caller starts at
 * once and takes chunks until
 * none are left, and a worker joins as soon as it runs. So a worker that is slow to wake (a
 * virtual machine whose other CPU has gone idle: up to half a millisecond) or that the OS has
 * descheduled (other processes on a shared machine) delays the product by at most the chunk it
 * holds, where a fixed split of the rows waited for its whole half (8x slower products with
 * one other busy process on two cores). After each product a worker spins for SPIN_NS in case
 * another product follows at once, then sleeps on a condition variable; a longer spin took a
 * core away from the Python thread between products. One product uses the pool at a time; a
 * caller that finds it busy (another Python thread) computes its product alone. After fork()
 * the child has no workers: the pool is rebuilt there on first use. */
#include <stdatomic.h>
#include <time.h>

#define SPIN_NS 200000L /* 0.2 ms */
#define FIELD 20        /* bits of the chunk count and of the next chunk in ``claims`` */
#define FIELD_MASK ((1L << FIELD) - 1)
#define MAX_CHUNKS FIELD_MASK

static struct {
    pthread_mutex_t lock;      /* guards sleeping on ``wake`` */
    pthread_cond_t wake;
    pthread_mutex_t busy;      /* held by the product that is using the pool */
    atomic_long generation;    /* bumped for each product */
    atomic_long claims;        /* generation (low bits) | chunk count | next chunk to take */
    atomic_long done;          /* chunks of the current product finished */
    atomic_int helpers;        /* workers asked to take part in the current product */
    atomic_int sleepers;
    int started;               /* workers running (in this process) */
    part job;                  /* the current product (rows: the whole of M) */
    long chunk_rows;           /* rows per chunk: a multiple of ROWS */
    long first_seen[MAX_THREADS]; /* the generation before each worker's first product */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};

static long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static long claims_word(long generation, long chunks)
{
    return ((generation & ((1L << (62 - 2 * FIELD)) - 1)) << (2 * FIELD)) | (chunks << FIELD);
}

/* Take chunks of product ``generation`` until none are left. The fields of ``pool.job`` are
 * read only after a chunk is claimed: the product cannot finish, and the next one cannot be
 * published, before that chunk is counted done. */
static void take_chunks(long generation)
{
    long word = atomic_load(&pool.claims);
    for (;;) {
        if ((word >> (2 * FIELD)) != (claims_word(generation, 0) >> (2 * FIELD)))
            return; /* that product is over */
        long next = word & FIELD_MASK, chunks = (word >> FIELD) & FIELD_MASK;
        if (next >= chunks)
            return;
        if (!atomic_compare_exchange_weak(&pool.claims, &word, word + 1))
            continue; /* ``word`` now holds the current value */
        part p = pool.job;
        p.row0 = next * pool.chunk_rows;
        p.row1 = p.row0 + pool.chunk_rows < p.row1 ? p.row0 + pool.chunk_rows : p.row1;
        gemm_rows(&p);
        atomic_fetch_add(&pool.done, 1);
        word = atomic_load(&pool.claims);
    }
}

static void *worker(void *arg)
{
    const int index = (int)(long)arg;
    long seen = pool.first_seen[index]; /* not a fresh load: the first product may be out already */
    for (;;) {
        long deadline = now_ns() + SPIN_NS, generation;
        unsigned spins = 0;
        while ((generation = atomic_load(&pool.generation)) == seen) {
            _mm_pause();
            if (++spins % 256 == 0 && now_ns() > deadline) {
                pthread_mutex_lock(&pool.lock);
                atomic_fetch_add(&pool.sleepers, 1);
                while ((generation = atomic_load(&pool.generation)) == seen)
                    pthread_cond_wait(&pool.wake, &pool.lock);
                atomic_fetch_sub(&pool.sleepers, 1);
                pthread_mutex_unlock(&pool.lock);
                break;
            }
        }
        seen = generation;
        /* a stale ``helpers`` (a later product's) only changes who helps, never the result */
        if (index < atomic_load(&pool.helpers))
            take_chunks(generation);
    }
    return NULL;
}

static void pool_after_fork(void)
{
    /* the child inherits the parent's memory but none of its threads */
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_mutex_init(&pool.busy, NULL);
    atomic_store(&pool.sleepers, 0);
    pool.started = 0;
}

/* Start workers until ``wanted`` run (fewer if the system refuses); returns how many run. */
static int pool_grow(int wanted)
{
    static int registered = 0;
    if (!registered) {
        pthread_atfork(NULL, NULL, pool_after_fork);
        registered = 1;
    }
    while (pool.started < wanted) {
        pthread_t id;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pool.first_seen[pool.started] = atomic_load(&pool.generation);
        int failed = pthread_create(&id, &attr, worker, (void *)(long)pool.started);
        pthread_attr_destroy(&attr);
        if (failed)
            break;
        pool.started++;
    }
    return pool.started;
}

/* The caller and up to ``threads - 1`` workers take the rows chunk by chunk. Every output row
 * is computed by one register block whoever takes it: the bits do not depend on the split. */
static void gemm_run(const float *A, const float *B, float *C, long M, long K, long N, int threads)
{
    long blocks = (M + ROWS - 1) / ROWS;
    if (threads > blocks)
        threads = (int)blocks;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if (threads < 2 || pthread_mutex_trylock(&pool.busy) != 0) {
        part all = {A, B, C, 0, M, K, N};
        gemm_rows(&all);
        return;
    }
    int helpers = pool_grow(threads - 1);
    /* about four chunks per thread: each reads B once, and a late worker leaves the rest */
    long per = blocks / (4L * (helpers + 1));
    if (per < (blocks + MAX_CHUNKS - 1) / MAX_CHUNKS)
        per = (blocks + MAX_CHUNKS - 1) / MAX_CHUNKS;
    if (per < 1)
        per = 1;
    long chunks = (blocks + per - 1) / per;
    long generation = atomic_load(&pool.generation) + 1;
    pool.job = (part){A, B, C, 0, M, K, N};
    pool.chunk_rows = per * ROWS;
    atomic_store(&pool.done, 0);
    atomic_store(&pool.helpers, helpers);
    atomic_store(&pool.claims, claims_word(generation, chunks));
    atomic_store(&pool.generation, generation);
    if (atomic_load(&pool.sleepers) > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
    take_chunks(generation);
    while (atomic_load(&pool.done) < chunks)
        _mm_pause(); /* at most the chunks workers hold: one register block each */
    pthread_mutex_unlock(&pool.busy);
}
#endif

static int gemm_supported(void)
{
#ifdef HAVE_GEMM
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

PyDoc_STRVAR(available_doc,
"gemm_available() -> bool\n\nTrue when gemm() runs here (x86-64 with AVX-512F).");

static PyObject *gemm_available(PyObject *self, PyObject *unused)
{
    return PyBool_FromLong(gemm_supported());
}

PyDoc_STRVAR(gemm_doc,
"gemm(a, b, out, m, k, n, threads) -> None\n\n"
"out[m, n] = a[m, k] @ b[k, n]: C-contiguous float32 buffers of exactly those sizes.\n"
"Raises RuntimeError where gemm_available() is False.");

static PyObject *gemm(PyObject *self, PyObject *args)
{
    PyObject *a, *b, *out;
    Py_ssize_t m, k, n;
    int threads;
    if (!PyArg_ParseTuple(args, "OOOnnni:gemm", &a, &b, &out, &m, &k, &n, &threads))
        return NULL;
    if (!gemm_supported()) {
        PyErr_SetString(PyExc_RuntimeError, "gemm needs x86-64 with AVX-512F");
        return NULL;
    }
    if (m < 0 || k < 0 || n < 0 || (k && m > PY_SSIZE_T_MAX / 4 / k) ||
        (n && k > PY_SSIZE_T_MAX / 4 / n) || (n && m > PY_SSIZE_T_MAX / 4 / n)) {
        PyErr_SetString(PyExc_ValueError, "gemm: bad sizes");
        return NULL;
    }
    if (threads < 1 || threads > 64) {
        PyErr_SetString(PyExc_ValueError, "gemm: threads must be 1 to 64");
        return NULL;
    }
    Py_buffer va, vb, vc;
    if (float_buffer(a, &va, m * k, 0, "gemm: a") < 0)
        return NULL;
    if (float_buffer(b, &vb, k * n, 0, "gemm: b") < 0) {
        PyBuffer_Release(&va);
        return NULL;
    }
    if (float_buffer(out, &vc, m * n, 1, "gemm: out") < 0) {
        PyBuffer_Release(&va);
        PyBuffer_Release(&vb);
        return NULL;
    }
#ifdef HAVE_GEMM
    if (m && n) {
        Py_BEGIN_ALLOW_THREADS
        if (k)
            gemm_run(va.buf, vb.buf, vc.buf, m, k, n, threads);
        else
            memset(vc.buf, 0, (size_t)(m * n) * 4);
        Py_END_ALLOW_THREADS
    }
#endif
    PyBuffer_Release(&va);
    PyBuffer_Release(&vb);
    PyBuffer_Release(&vc);
    Py_RETURN_NONE;
}

/* ---- fused_run: a chain of elementwise ops in one blocked pass ------------------------------
 * The simulator's optimizer updates and activations are long chains of elementwise ops over
 * the same tensor (fusion.py groups them at load). Run one by one, each op is a numpy pass
 * over memory, a rounding pass and ~2 us of Python. Here the whole chain runs block by block
 * (FUSED_BLOCK values, which stay in L1/L2): every op computes its block in float32 and, where
 * the op's result is an fp16 value, rounds it exactly as the simulator does (F16C, with NaNs
 * through the scalar conversion numpy's cast follows), so the bits are those of the unfused
 * run. Values only the chain reads live in per-block scratch; the rest are written out.
 *
 * Registers: inputs [0, ni), outputs [ni, ni + no), temporaries after. ``code`` holds int32
 * rows (op, round, destination, a, b, c). Inputs are float32 or bool arrays of any strides
 * that broadcast to the outputs' shape: float32 read in place when C-contiguous of that shape,
 * filled once when of one value, else gathered per block. A bool is 1.0f or 0.0f in a
 * register (comparisons, logical ops, select's condition); bool inputs are converted as they
 * are gathered, bool outputs as they are stored. Built with -ffp-contract=off (setup.py): no
 * a * b + c may become an FMA, which would round once instead of twice. */
#define FUSED_BLOCK 1024
#define FUSED_DIMS 32
enum { FUSED_ADD, FUSED_SUB, FUSED_MUL, FUSED_DIV, FUSED_MAX, FUSED_MIN, FUSED_SQRT, FUSED_ABS,
       FUSED_EQ, FUSED_NE, FUSED_LT, FUSED_LE, FUSED_GT, FUSED_GE, FUSED_AND, FUSED_OR,
       FUSED_XOR, FUSED_NOT, FUSED_SELECT, FUSED_OPS };

typedef struct {
    Py_buffer view;
    int kind;   /* 0: C-contiguous float32 of the full shape, 1: one value, 2: gathered */
    int is_bool; /* numpy bool (one byte, 0 or 1), read as 0.0f or 1.0f */
    int nd;
    Py_ssize_t shape[FUSED_DIMS], stride[FUSED_DIMS]; /* broadcast over the output, in bytes */
    float *buf;
} fused_input;

#if defined(__GNUC__) && defined(__x86_64__)
#include <math.h>

/* fp16 rounding as the simulator's conversion does it, one value (any value). */
static float fused_round(float r)
{
    uint32_t b;
    memcpy(&b, &r, sizeof b);
    b = bits_from_half(half_from_bits(b));
    memcpy(&r, &b, sizeof r);
    return r;
}

/* numpy's float32 ufuncs on one value: maximum and minimum return a NaN operand (x86's
 * max/min return the second operand then), and the second operand when both are zeros;
 * comparisons are false for a NaN except !=; logical ops take any nonzero as true. */
static float fused_scalar(int op, float x, float y)
{
    switch (op) {
    case FUSED_ADD: return x + y;
    case FUSED_SUB: return x - y;
    case FUSED_MUL: return x * y;
    case FUSED_DIV: return x / y;
    case FUSED_MAX: return x != x ? x : (x > y ? x : y);
    case FUSED_MIN: return x != x ? x : (x < y ? x : y);
    case FUSED_SQRT: return sqrtf(x);
    case FUSED_EQ: return x == y;
    case FUSED_NE: return x != y;
    case FUSED_LT: return x < y;
    case FUSED_LE: return x <= y;
    case FUSED_GT: return x > y;
    case FUSED_GE: return x >= y;
    case FUSED_AND: return x != 0 && y != 0;
    case FUSED_OR: return x != 0 || y != 0;
    case FUSED_XOR: return (x != 0) != (y != 0);
    case FUSED_NOT: return x == 0;
    default: {
        uint32_t b;
        memcpy(&b, &x, sizeof b);
        b &= ABS_MASK;
        memcpy(&x, &b, sizeof x);
        return x;
    }
    }
}

#define FUSED_LOOP(EXPR)                                                                        \
    for (; i + 8 <= n; i += 8) {                                                                \
        __m256 x = _mm256_loadu_ps(a + i);                                                      \
        __m256 y = _mm256_loadu_ps(b + i);                                                      \
        __m256 r = EXPR;                                                                        \
        (void)y;                                                                                \
        if (round) {                                                                            \
            __m256 nan = _mm256_cmp_ps(r, r, _CMP_UNORD_Q);                                     \
            __m256 q = _mm256_cvtph_ps(_mm256_cvtps_ph(r, ROUNDING));                           \
            if (_mm256_movemask_ps(nan)) {                                                      \
                float lanes[8];                                                                 \
                _mm256_storeu_ps(lanes, r);                                                     \
                for (int k = 0; k < 8; k++)                                                     \
                    lanes[k] = fused_round(lanes[k]);                                           \
                q = _mm256_loadu_ps(lanes);                                                     \
            }                                                                                   \
            r = q;                                                                              \
        }                                                                                       \
        _mm256_storeu_ps(d + i, r);                                                             \
    }

#define FUSED_TRUTH(MASK) _mm256_and_ps(MASK, one) /* a lane mask as 1.0f or 0.0f */

/* d[i] = a[i] (op) b[i] for n values (b unused by the unary ops, and then given as a);
 * select: d[i] = c[i] ? a[i] : b[i]. */
__attribute__((target("avx2,f16c"))) static void fused_op(int op, int round, const float *a,
                                                          const float *b, const float *c,
                                                          float *d, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    if (op == FUSED_SELECT) { /* np.where: the chosen operand's bits, NaN payloads and all */
        for (; i + 8 <= n; i += 8) {
            __m256 pick = _mm256_cmp_ps(_mm256_loadu_ps(c + i), zero, _CMP_NEQ_OQ);
            _mm256_storeu_ps(d + i, _mm256_blendv_ps(_mm256_loadu_ps(b + i),
                                                     _mm256_loadu_ps(a + i), pick));
        }
        for (; i < n; i++)
            memcpy(d + i, c[i] != 0 ? a + i : b + i, sizeof *d);
        return;
    }
    switch (op) {
    case FUSED_ADD: FUSED_LOOP(_mm256_add_ps(x, y)) break;
    case FUSED_SUB: FUSED_LOOP(_mm256_sub_ps(x, y)) break;
    case FUSED_MUL: FUSED_LOOP(_mm256_mul_ps(x, y)) break;
    case FUSED_DIV: FUSED_LOOP(_mm256_div_ps(x, y)) break;
    case FUSED_MAX:
        FUSED_LOOP(_mm256_blendv_ps(_mm256_max_ps(x, y), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
        break;
    case FUSED_MIN:
        FUSED_LOOP(_mm256_blendv_ps(_mm256_min_ps(x, y), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
        break;
    case FUSED_SQRT: FUSED_LOOP(_mm256_sqrt_ps(x)) break;
    case FUSED_ABS: FUSED_LOOP(_mm256_andnot_ps(sign, x)) break;
    case FUSED_EQ: FUSED_LOOP(FUSED_TRUTH(_mm256_cmp_ps(x, y, _CMP_EQ_OQ))) break;
    case FUSED_NE: FUSED_LOOP(FUSED_TRUTH(_mm256_cmp_ps(x, y, _CMP_NEQ_UQ))) break;
    case FUSED_LT: FUSED_LOOP(FUSED_TRUTH(_mm256_cmp_ps(x, y, _CMP_LT_OQ))) break;
    case FUSED_LE: FUSED_LOOP(FUSED_TRUTH(_mm256_cmp_ps(x, y, _CMP_LE_OQ))) break;
    case FUSED_GT: FUSED_LOOP(FUSED_TRUTH(_mm256_cmp_ps(x, y, _CMP_GT_OQ))) break;
    case FUSED_GE: FUSED_LOOP(FUSED_TRUTH(_mm256_cmp_ps(x, y, _CMP_GE_OQ))) break;
    case FUSED_AND:
        FUSED_LOOP(FUSED_TRUTH(_mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_NEQ_OQ),
                                             _mm256_cmp_ps(y, zero, _CMP_NEQ_OQ))))
        break;
    case FUSED_OR:
        FUSED_LOOP(FUSED_TRUTH(_mm256_or_ps(_mm256_cmp_ps(x, zero, _CMP_NEQ_OQ),
                                            _mm256_cmp_ps(y, zero, _CMP_NEQ_OQ))))
        break;
    case FUSED_XOR:
        FUSED_LOOP(FUSED_TRUTH(_mm256_xor_ps(_mm256_cmp_ps(x, zero, _CMP_NEQ_OQ),
                                             _mm256_cmp_ps(y, zero, _CMP_NEQ_OQ))))
        break;
    default: FUSED_LOOP(FUSED_TRUTH(_mm256_cmp_ps(x, zero, _CMP_EQ_OQ))) break; /* not */
    }
    for (; i < n; i++) {
        float r = fused_scalar(op, a[i], b[i]);
        d[i] = round ? fused_round(r) : r;
    }
}
#endif

#if defined(__GNUC__) && defined(__x86_64__)
/* A bool output's block: nonzero values as 1, zeros as 0, one byte each. */
__attribute__((target("avx2,f16c"))) static void fused_store_bools(const float *src,
                                                                   unsigned char *dst,
                                                                   Py_ssize_t n)
{
    Py_ssize_t i = 0;
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 t = _mm256_and_ps(_mm256_cmp_ps(_mm256_loadu_ps(src + i), zero, _CMP_NEQ_UQ), one);
        __m256i w = _mm256_cvttps_epi32(t);
        __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        _mm_storel_epi64((__m128i *)(dst + i), _mm_packus_epi16(h, h));
    }
    for (; i < n; i++)
        dst[i] = src[i] != 0;
}
#endif

/* Values [start, start + n) of a broadcast or strided input, in output order, into dst. */
static void fused_gather(const fused_input *in, Py_ssize_t start, Py_ssize_t n, float *dst)
{
    Py_ssize_t idx[FUSED_DIMS], rest = start;
    int last = in->nd - 1;
    for (int d = last; d >= 0; d--) {
        idx[d] = rest % in->shape[d];
        rest /= in->shape[d];
    }
    while (n > 0) {
        const char *p = in->view.buf;
        for (int d = 0; d <= last; d++)
            p += idx[d] * in->stride[d];
        Py_ssize_t run = in->shape[last] - idx[last], s = in->stride[last];
        if (run > n)
            run = n;
        if (in->is_bool) {
            for (Py_ssize_t i = 0; i < run; i++)
                dst[i] = p[i * s] != 0;
        } else if (s == 0) {
            float v;
            memcpy(&v, p, sizeof v);
            for (Py_ssize_t i = 0; i < run; i++)
                dst[i] = v;
        } else if (s == 4) {
            memcpy(dst, p, (size_t)run * 4);
        } else {
            for (Py_ssize_t i = 0; i < run; i++)
                memcpy(dst + i, p + i * s, sizeof *dst);
        }
        dst += run;
        n -= run;
        idx[last] += run;
        for (int d = last; d > 0 && idx[d] == in->shape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

/* An input's buffer, its strides broadcast over ``shape`` (ValueError when it does not
 * broadcast), size-1 axes dropped and mergeable axes merged, and how it is read. */
static int fused_input_open(PyObject *obj, fused_input *in, int nd, const Py_ssize_t *shape)
{
    if (PyObject_GetBuffer(obj, &in->view, PyBUF_RECORDS_RO) < 0)
        return -1;
    const char *fmt = in->view.format ? in->view.format : "B";
    if (*fmt == '<' || *fmt == '=' || *fmt == '@')
        fmt++;
    int ind = in->view.ndim;
    in->is_bool = in->view.itemsize == 1 && strcmp(fmt, "?") == 0;
    if (!(in->is_bool || (in->view.itemsize == 4 && strcmp(fmt, "f") == 0)) || ind > nd) {
        PyErr_SetString(PyExc_ValueError, "fused_run: inputs must be float32 or bool of at most "
                                          "the outputs' rank");
        PyBuffer_Release(&in->view);
        return -1;
    }
    in->nd = 0;
    for (int d = 0; d < nd; d++) {
        int k = d - (nd - ind);
        Py_ssize_t size = k < 0 ? 1 : in->view.shape[k];
        Py_ssize_t stride = (k < 0 || size == 1) ? 0 : in->view.strides[k];
        if (size != shape[d] && size != 1) {
            PyErr_SetString(PyExc_ValueError, "fused_run: an input does not broadcast to the "
                                              "outputs' shape");
            PyBuffer_Release(&in->view);
            return -1;
        }
        if (shape[d] == 1)
            continue;
        if (in->nd && in->stride[in->nd - 1] == stride * shape[d]) {
            in->shape[in->nd - 1] *= shape[d];
            in->stride[in->nd - 1] = stride;
        } else {
            in->shape[in->nd] = shape[d];
            in->stride[in->nd++] = stride;
        }
    }
    int all_zero = 1;
    for (int d = 0; d < in->nd; d++)
        all_zero &= in->stride[d] == 0;
    in->kind = in->is_bool ? 2 : all_zero ? 1 : (in->nd == 1 && in->stride[0] == 4) ? 0 : 2;
    if (in->nd == 0) { /* one value: a one-axis walk of stride 0 (gathered bools need one) */
        in->shape[0] = 1;
        in->stride[0] = 0;
        in->nd = 1;
    }
    in->buf = NULL;
    return 0;
}

PyDoc_STRVAR(fused_run_doc,
"fused_run(code, inputs, outputs, temps) -> int or None\n\n"
"Run a chain of elementwise ops (code: int32 rows op, round, dst, a, b, c over the registers\n"
"inputs, outputs, then ``temps`` temporaries) in one blocked pass; outputs are C-contiguous\n"
"float32 or bool arrays of one shape that every input (float32 or bool) broadcasts to.\n"
"Returns 0, or None where the CPU lacks AVX2 and F16C (nothing was computed).");

static PyObject *fused_run(PyObject *self, PyObject *args)
{
    PyObject *code_obj, *ins, *outs;
    Py_ssize_t temps;
    if (!PyArg_ParseTuple(args, "OO!O!n:fused_run", &code_obj, &PyTuple_Type, &ins,
                          &PyTuple_Type, &outs, &temps))
        return NULL;
    if (!(f16c_supported() && avx2_supported()))
        Py_RETURN_NONE;
    Py_ssize_t ni = PyTuple_GET_SIZE(ins), no = PyTuple_GET_SIZE(outs);
    if (no < 1 || temps < 0 || ni + no + temps > 1 << 20) {
        PyErr_SetString(PyExc_ValueError, "fused_run: bad register counts");
        return NULL;
    }
    Py_ssize_t nregs = ni + no + temps;
    Py_buffer code;
    if (PyObject_GetBuffer(code_obj, &code, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    const int32_t *rows = code.buf;
    Py_ssize_t nrows = code.len / 24;
    int bad = code.len % 24 != 0;
    for (Py_ssize_t r = 0; r < nrows && !bad; r++) {
        const int32_t *c = rows + 6 * r;
        bad = c[0] < 0 || c[0] >= FUSED_OPS || c[2] < ni || c[2] >= nregs || c[3] < 0 ||
              c[3] >= nregs || c[4] < 0 || c[4] >= nregs || c[5] < 0 || c[5] >= nregs;
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "fused_run: bad code");
        PyBuffer_Release(&code);
        return NULL;
    }
    Py_buffer *ov = PyMem_Calloc((size_t)no, sizeof *ov);
    fused_input *iv = PyMem_Calloc((size_t)(ni ? ni : 1), sizeof *iv);
    float **reg = PyMem_Calloc((size_t)nregs, sizeof *reg);
    float *scratch = NULL;
    Py_ssize_t opened_o = 0, opened_i = 0, n = 0;
    int failed = ov == NULL || iv == NULL || reg == NULL;
    if (failed)
        PyErr_NoMemory();
    Py_ssize_t bools = 0; /* bool outputs: computed in scratch, stored as bytes */
    for (Py_ssize_t k = 0; !failed && k < no; k++) {
        int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(outs, k), &ov[k], flags) < 0) {
            failed = 1;
            break;
        }
        opened_o++;
        const char *fmt = ov[k].format ? ov[k].format : "B";
        if (*fmt == '<' || *fmt == '=' || *fmt == '@')
            fmt++;
        int is_bool = ov[k].itemsize == 1 && strcmp(fmt, "?") == 0;
        bools += is_bool;
        if (!is_bool && !(ov[k].itemsize == 4 && strcmp(fmt, "f") == 0)) {
            PyErr_SetString(PyExc_ValueError, "fused_run: outputs must be float32 or bool");
            failed = 1;
        } else if (ov[k].len / ov[k].itemsize != ov[0].len / ov[0].itemsize) {
            PyErr_SetString(PyExc_ValueError, "fused_run: outputs of different sizes");
            failed = 1;
        }
    }
    n = failed ? 0 : ov[0].len / ov[0].itemsize;
    if (!failed && ov[0].ndim > FUSED_DIMS) {
        PyErr_SetString(PyExc_ValueError, "fused_run: too many dimensions");
        failed = 1;
    }
    for (Py_ssize_t k = 0; !failed && k < ni; k++) {
        if (fused_input_open(PyTuple_GET_ITEM(ins, k), &iv[k], ov[0].ndim, ov[0].shape) < 0)
            failed = 1;
        else
            opened_i++;
    }
    /* values per block: FUSED_BLOCK, or all of a small output (rounded up to whole vectors) */
    Py_ssize_t block = n < FUSED_BLOCK ? ((n + 7) & ~(Py_ssize_t)7) + 8 : FUSED_BLOCK;
    if (!failed) {
        Py_ssize_t blocks = temps + bools;
        for (Py_ssize_t k = 0; k < ni; k++)
            blocks += iv[k].kind != 0;
        scratch = PyMem_Malloc((size_t)(blocks ? blocks : 1) * (size_t)block * sizeof(float));
        if (scratch == NULL) {
            PyErr_NoMemory();
            failed = 1;
        }
    }
    if (!failed) {
        Py_BEGIN_ALLOW_THREADS
        float *next = scratch;
        for (Py_ssize_t k = 0; k < ni; k++) {
            if (iv[k].kind == 0)
                continue;
            iv[k].buf = next;
            next += block;
            if (iv[k].kind == 1) {
                float v;
                memcpy(&v, iv[k].view.buf, sizeof v);
                for (Py_ssize_t i = 0; i < block; i++)
                    iv[k].buf[i] = v;
            }
        }
        for (Py_ssize_t t = 0; t < temps; t++)
            reg[ni + no + t] = next + t * block;
        next += temps * block;
        for (Py_ssize_t k = 0; k < no; k++) {
            if (ov[k].itemsize == 1) { /* a bool output's block, stored after the rows */
                reg[ni + k] = next;
                next += block;
            }
        }
        for (Py_ssize_t start = 0; start < n; start += block) {
            Py_ssize_t len = n - start < block ? n - start : block;
            for (Py_ssize_t k = 0; k < ni; k++) {
                if (iv[k].kind == 0)
                    reg[k] = (float *)iv[k].view.buf + start;
                else if (iv[k].kind == 2)
                    fused_gather(&iv[k], start, len, iv[k].buf);
                if (iv[k].kind != 0)
                    reg[k] = iv[k].buf;
            }
            for (Py_ssize_t k = 0; k < no; k++)
                if (ov[k].itemsize == 4)
                    reg[ni + k] = (float *)ov[k].buf + start;
            for (Py_ssize_t r = 0; r < nrows; r++) {
                const int32_t *c = rows + 6 * r;
#if defined(__GNUC__) && defined(__x86_64__)
                fused_op(c[0], c[1], reg[c[3]], reg[c[4]], reg[c[5]], reg[c[2]], len);
#endif
            }
#if defined(__GNUC__) && defined(__x86_64__)
            for (Py_ssize_t k = 0; k < no; k++)
                if (ov[k].itemsize == 1)
                    fused_store_bools(reg[ni + k], (unsigned char *)ov[k].buf + start, len);
#endif
        }
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t k = 0; k < opened_i; k++)
        PyBuffer_Release(&iv[k].view);
    for (Py_ssize_t k = 0; k < opened_o; k++)
        PyBuffer_Release(&ov[k]);
    PyMem_Free(scratch);
    PyMem_Free(reg);
    PyMem_Free(iv);
    PyMem_Free(ov);
    PyBuffer_Release(&code);
    if (failed)
        return NULL;
    return PyLong_FromLong(0);
}
/* ---- end of fused_run ------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"round_in_place", round_in_place, METH_O, round_doc},
    {"gemm", gemm, METH_VARARGS, gemm_doc},
    {"gemm_available", gemm_available, METH_NOARGS, available_doc},
    {"to_fp16", to_fp16, METH_VARARGS, to_fp16_doc},
    {"from_fp16", from_fp16, METH_VARARGS, from_fp16_doc},
    {"gather", gather, METH_VARARGS, gather_doc},
    {"binary_round", binary_round, METH_VARARGS, binary_round_doc},
    {"fused_run", fused_run, METH_VARARGS, fused_run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "anekit's compiled kernels: fp16 rounding and conversion, a float32 GEMM.", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }

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

/* n float32 values (as bits) rounded to fp16 values in place; how many were left alone. Called
 * without the GIL. */
static Py_ssize_t round_values(uint32_t *bits, Py_ssize_t n, int fast)
{
    Py_ssize_t special = 0;
#if defined(__GNUC__) && defined(__x86_64__)
    if (fast)
        return round_f16c(bits, n);
#endif
    for (Py_ssize_t start = 0; start < n; start += BLOCK) {
        Py_ssize_t left = n - start;
        special += round_block(bits + start, (uint32_t)(left < BLOCK ? left : BLOCK));
    }
    (void)fast;
    return special;
}

static PyObject *round_in_place(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (float_buffer(arg, &view, -1, 1, "round_in_place: the buffer") < 0)
        return NULL;
    Py_ssize_t n = view.len / 4, special = 0;
    uint32_t *bits = (uint32_t *)view.buf;
    int fast = f16c_supported() && avx2_supported();
    Py_BEGIN_ALLOW_THREADS
    special = round_values(bits, n, fast);
    Py_END_ALLOW_THREADS
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

#if defined(__GNUC__) && defined(__x86_64__)
/* n float32 values rounded to fp16 values in place, every value exactly as round_in_place and
 * numpy's conversion for the values it leaves (F16C's round to nearest even, overflow to
 * infinity; a NaN through the scalar conversion, whose payload F16C may quiet): the epilogue
 * of a product whose result is fp16, run on each tile while it is in cache. */
__attribute__((target("avx512f,f16c"))) static void round_span(float *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        const __m512 r = _mm512_maskz_loadu_ps(m, p + i);
        _mm512_mask_storeu_ps(p + i, m, _mm512_cvtph_ps(_mm512_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
        __mmask16 nan = _mm512_mask_cmp_ps_mask(m, r, r, _CMP_UNORD_Q);
        for (int k = 0; nan; k++, nan >>= 1)
            if (nan & 1) {
                float lanes[16];
                uint32_t b;
                _mm512_storeu_ps(lanes, r);
                memcpy(&b, lanes + k, sizeof b);
                b = bits_from_half(half_from_bits(b));
                memcpy(p + i + k, &b, sizeof b);
            }
    }
}
#endif

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
#include <stdatomic.h>

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
    const uint16_t *W; /* fp16 weights (gemm_f16w) in place of A */
    long batch, M;     /* gemm_f16w_cols: B [batch, K, N] and C [batch, M, N] */
    atomic_int *failed; /* gemm_f16w_cols: set when a part's buffer could not be allocated */
    int round;          /* gemm: each finished tile of C rounded to fp16 values (round_span) */
} part;

#define KC 256 /* k per block: B's KC x 64 panel (64 KiB) stays in L2 across the rows */

/* Rows [row0, row1) of C: block of k by block of k, then column panel by panel, then row
 * block by row block, so one panel of B serves every row of the part from L2 (B read from
 * memory once per part, not once per six rows: 42 against ~14 MB of traffic for a
 * 32 x 12544 x 144 product) and the sums resume from C between blocks of k. */
#define PACK_ROWS 24 /* rows of a part from which each panel of B is packed first */
#define PACK_K 32     /* and k: a shorter product is bound by memory, not by B's reads */

/* B[k0:k0 + kc, j:j + 64] (the columns ``mask`` keeps) copied into ``panel`` [kc][64]: the
 * register blocks then read it in order, not N floats apart. */
__attribute__((target("avx512f"))) static void pack_panel(const float *B, long ldb, long kc,
    const __mmask16 *mask, float *panel)
{
    for (long k = 0; k < kc; k++, B += ldb, panel += COLS)
        for (int v = 0; v < 4; v++)
            _mm512_store_ps(panel + 16 * v, _mm512_maskz_loadu_ps(mask[v], B + 16 * v));
}

/* Rows [row0, row1) by columns [col0, col1) of C (col0 a multiple of COLS). */
static void gemm_tile(const part *p, long row0, long row1, long col0, long col1)
{
    const long K = p->K, N = p->N;
    /* tiles of many rows read each panel of B from a packed copy (the same values, so the
     * same sums): 1.2x on [480, 480] x [480, 978] */
    const int pack = row1 - row0 >= PACK_ROWS && K >= PACK_K;
    float *panel = pack ? aligned_alloc(64, KC * COLS * 4) : NULL;
    for (long k0 = 0; k0 < K; k0 += KC) {
        const long kc = K - k0 < KC ? K - k0 : KC;
        for (long j = col0; j < col1; j += COLS) {
            __mmask16 mask[4];
            for (int v = 0; v < 4; v++) {
                long left = col1 - j - 16 * v;
                mask[v] = left >= 16 ? (__mmask16)0xFFFF
                        : left <= 0  ? (__mmask16)0
                                     : (__mmask16)((1u << left) - 1u);
            }
            const float *B = p->B + k0 * N + j;
            long ldb = N;
            if (panel != NULL) {
                pack_panel(B, N, kc, mask, panel);
                B = panel;
                ldb = COLS;
            }
            for (long r = row0; r < row1;) {
                int rows = row1 - r >= ROWS ? ROWS : 1;
                const float *A = p->A + r * K + k0;
                float *C = p->C + r * N + j;
                if (rows == ROWS)
                    block6(A, K, B, ldb, C, N, kc, mask, k0 > 0);
                else
                    block1(A, K, B, ldb, C, N, kc, mask, k0 > 0);
                r += rows;
            }
            if (p->round && k0 + kc == K) /* the panel's sums are final */
                for (long r = row0; r < row1; r++)
                    round_span(p->C + r * N + j, col1 - j < COLS ? col1 - j : COLS);
        }
    }
    free(panel);
}

static void *gemm_rows(void *arg)
{
    const part *p = arg;
    gemm_tile(p, p->row0, p->row1, 0, p->N);
    return NULL;
}

/* Every row of C by the column panels [row0, row1) (the pool hands out its chunks as rows;
 * here they count panels of COLS columns). */
static void *gemm_panels(void *arg)
{
    const part *p = arg;
    const long col1 = p->row1 * COLS < p->N ? p->row1 * COLS : p->N;
    gemm_tile(p, 0, p->M, p->row0 * COLS, col1);
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
    void *(*rows)(void *);     /* computes rows [row0, row1) of ``job`` */
    long chunk_rows;           /* rows per chunk: a multiple of the kernel's row block */
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
        pool.rows(&p);
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

/* The caller and up to ``threads - 1`` workers take the rows of ``job`` (whole blocks of
 * ``unit`` rows) chunk by chunk through ``rows``. Every output row is computed by one register
 * block whoever takes it: the bits do not depend on the split. */
static void pool_run(part job, long unit, void *(*rows)(void *), int threads)
{
    long blocks = (job.row1 + unit - 1) / unit;
    if (threads > blocks)
        threads = (int)blocks;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if (threads < 2 || pthread_mutex_trylock(&pool.busy) != 0) {
        rows(&job);
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
    pool.job = job;
    pool.rows = rows;
    pool.chunk_rows = per * unit;
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

/* A product with fewer rows than columns (a convolution's output channels by its positions)
 * is shared out by column panels: a chunk of rows would read all of B, the larger operand,
 * again (64 x 64 x 30400 ran slower on two threads than on one), a chunk of panels reads
 * its part of B once and all of A, which stays in cache. Each output is the same chain of
 * FMAs over k either way, so the split never changes the bits. */
static void gemm_run(const float *A, const float *B, float *C, long M, long K, long N, int threads,
                     int round)
{
    if (threads > 1 && M < N) {
        part job = {A, B, C, 0, (N + COLS - 1) / COLS, K, N, NULL};
        job.M = M;
        job.round = round;
        pool_run(job, 1, gemm_panels, threads);
        return;
    }
    part job = {A, B, C, 0, M, K, N, NULL};
    job.round = round;
    pool_run(job, ROWS, gemm_rows, threads);
}

/* ---- gemm_f16w: fp16 weights times float32 activations ----
 * A language model's projections read every weight once per token; holding the weights as
 * fp16 (not widened to a float32 copy) halves both the memory and the bytes each decode step
 * streams. A register block of F16W_ROWS weight rows by one or two activation columns: each
 * 8 fp16 weights are widened by F16C (exact) and multiplied into float32 sums by FMA, the
 * activations' column read contiguously (the caller hands them transposed, [N][K]). */
#define F16W_ROWS 4

__attribute__((target("avx2,f16c,fma"))) static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* C[r, c] for rows W[0..R) (row stride K) and columns X[0..S) (column stride K), S = 1 or 2:
 * rows past R repeat the last row and are not stored. */
__attribute__((target("avx2,f16c,fma"))) static inline void f16w_block(const uint16_t *W,
    const float *X, float *C, long K, long ldc, int R, const int S)
{
    const uint16_t *w[F16W_ROWS];
    for (int r = 0; r < F16W_ROWS; r++)
        w[r] = W + (r < R ? r : R - 1) * K;
    const float *x0 = X, *x1 = X + (S > 1 ? K : 0);
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
           a30 = a00, a31 = a00;
    long k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 v0 = _mm256_loadu_ps(x0 + k);
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w[0] + k)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w[1] + k)));
        __m256 w2 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w[2] + k)));
        __m256 w3 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w[3] + k)));
        a00 = _mm256_fmadd_ps(w0, v0, a00);
        a10 = _mm256_fmadd_ps(w1, v0, a10);
        a20 = _mm256_fmadd_ps(w2, v0, a20);
        a30 = _mm256_fmadd_ps(w3, v0, a30);
        if (S > 1) {
            __m256 v1 = _mm256_loadu_ps(x1 + k);
            a01 = _mm256_fmadd_ps(w0, v1, a01);
            a11 = _mm256_fmadd_ps(w1, v1, a11);
            a21 = _mm256_fmadd_ps(w2, v1, a21);
            a31 = _mm256_fmadd_ps(w3, v1, a31);
        }
    }
    float s[F16W_ROWS][2] = {{hsum8(a00), hsum8(a01)}, {hsum8(a10), hsum8(a11)},
                             {hsum8(a20), hsum8(a21)}, {hsum8(a30), hsum8(a31)}};
    for (; k < K; k++)
        for (int r = 0; r < F16W_ROWS; r++) {
            uint32_t b = bits_from_half(w[r][k]);
            float h;
            memcpy(&h, &b, sizeof h);
            s[r][0] += h * x0[k];
            if (S > 1)
                s[r][1] += h * x1[k];
        }
    for (int r = 0; r < R; r++) {
        C[r * ldc] = s[r][0];
        if (S > 1)
            C[r * ldc + 1] = s[r][1];
    }
}

__attribute__((target("avx2,f16c,fma"))) static void *f16w_rows(void *arg)
{
    const part *p = arg;
    const long K = p->K, N = p->N;
    for (long i = p->row0; i < p->row1; i += F16W_ROWS) {
        int R = p->row1 - i >= F16W_ROWS ? F16W_ROWS : (int)(p->row1 - i);
        long j = 0;
        for (; j + 2 <= N; j += 2)
            f16w_block(p->W + i * K, p->B + j * K, p->C + i * N + j, K, N, R, 2);
        if (j < N)
            f16w_block(p->W + i * K, p->B + j * K, p->C + i * N + j, K, N, R, 1);
    }
    return NULL;
}

/* gemm_f16w_cols: the same sums as f16w_block, with the activations as they come ([K, N]
 * rows, not transposed) and the columns in the lanes: 16 columns of F16WC_ROWS weight rows
 * at a time, each output's eight partial sums (k = l mod 8 for the whole blocks of 8 k, lane
 * l of f16w_block's accumulator) in eight vectors, added as hsum8 adds them ((0+4) + (2+6))
 * + ((1+5) + (3+7)), then the last K % 8 products one by one (multiply, then add: the file
 * is built without contraction, as f16w_block's tail is). So every output has
 * gemm_f16w's bits; a block of 8 x 16 products costs one load of x per row and k where
 * f16w_block's horizontal sums dominated short K (a 1x1 conv over a small feature map).
 * Each block of rows is widened once into ``wide`` (exact). */
#define F16WC_ROWS 3
#define F16WC_ACC(r)                                                                           \
    __m512 a##r##0 = _mm512_setzero_ps(), a##r##1 = a##r##0, a##r##2 = a##r##0,              \
           a##r##3 = a##r##0, a##r##4 = a##r##0, a##r##5 = a##r##0, a##r##6 = a##r##0,       \
           a##r##7 = a##r##0;
#define F16WC_FMA(r, l)                                                                        \
    a##r##l = _mm512_fmadd_ps(_mm512_set1_ps(w##r[k + l]), v, a##r##l);
#define F16WC_STEP(l)                                                                          \
    {                                                                                           \
        const __m512 v = _mm512_maskz_loadu_ps(mask, X + (k + l) * N);                        \
        F16WC_FMA(0, l) F16WC_FMA(1, l) F16WC_FMA(2, l)                                         \
    }
#define F16WC_SUM(r)                                                                           \
    {                                                                                           \
        __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a##r##0, a##r##4),                 \
                                               _mm512_add_ps(a##r##2, a##r##6)),                \
                                 _mm512_add_ps(_mm512_add_ps(a##r##1, a##r##5),                 \
                                               _mm512_add_ps(a##r##3, a##r##7)));               \
        for (long t = k; t < K; t++)                                                            \
            s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_set1_ps(w##r[t]),                        \
                                               _mm512_maskz_loadu_ps(mask, X + t * N)));        \
        if (r < R)                                                                              \
            _mm512_mask_storeu_ps(C + (r) * N, mask, s);                                        \
    }

__attribute__((target("avx512f"))) static void f16wc_block(const float *wide, const float *X,
    float *C, long K, long N, int R, __mmask16 mask)
{
    const float *w0 = wide, *w1 = wide + (R > 1 ? K : 0), *w2 = wide + (R > 2 ? 2 * K : 0);
    F16WC_ACC(0) F16WC_ACC(1) F16WC_ACC(2)
    long k = 0;
    for (; k + 8 <= K; k += 8) {
        F16WC_STEP(0) F16WC_STEP(1) F16WC_STEP(2) F16WC_STEP(3)
        F16WC_STEP(4) F16WC_STEP(5) F16WC_STEP(6) F16WC_STEP(7)
    }
    F16WC_SUM(0) F16WC_SUM(1) F16WC_SUM(2)
}

#define F16WC_WIDE 32768 /* widened weights per chunk of rows: 128 KiB, kept in L2 */

__attribute__((target("avx512f,f16c"))) static void *f16wc_rows(void *arg)
{
    const part *p = arg;
    const long K = p->K, N = p->N, M = p->M;
    /* rows widened a chunk at a time, then each strip of 16 columns of x (which stays in
     * L1) multiplied by every row block of the chunk in turn */
    long chunk = K ? F16WC_WIDE / K / F16WC_ROWS * F16WC_ROWS : F16WC_ROWS;
    if (chunk < F16WC_ROWS)
        chunk = F16WC_ROWS;
    float *wide = malloc((size_t)(chunk * K > 0 ? chunk * K : 1) * sizeof(float));
    if (wide == NULL) {
        atomic_store(p->failed, 1);
        return NULL;
    }
    for (long r0 = p->row0; r0 < p->row1; r0 += chunk) {
        const long rows = p->row1 - r0 < chunk ? p->row1 - r0 : chunk;
        const uint16_t *W = p->W + r0 * K;
        long t = 0;
        for (; t + 16 <= rows * K; t += 16)
            _mm512_storeu_ps(wide + t,
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(W + t))));
        for (; t < rows * K; t++) {
            uint32_t bits = bits_from_half(W[t]);
            memcpy(wide + t, &bits, sizeof bits);
        }
        for (long b = 0; b < p->batch; b++)
            for (long j = 0; j < N; j += 16) {
                long left = N - j;
                __mmask16 mask = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
                for (long i = 0; i < rows; i += F16WC_ROWS) {
                    int R = rows - i >= F16WC_ROWS ? F16WC_ROWS : (int)(rows - i);
                    f16wc_block(wide + i * K, p->B + b * K * N + j,
                                p->C + (b * M + r0 + i) * N + j, K, N, R, mask);
                }
            }
    }
    free(wide);
    return NULL;
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

/* 1 when m, k, n and threads are sizes a product of float32 buffers can have (each of m * k,
 * k * n and m * n bytes fits a Py_ssize_t, 1 to 64 threads), else 0 with a ValueError
 * naming ``name``. */
static int product_args_ok(Py_ssize_t m, Py_ssize_t k, Py_ssize_t n, int threads,
                           const char *name)
{
    if (m < 0 || k < 0 || n < 0 || (k && m > PY_SSIZE_T_MAX / 4 / k) ||
        (n && k > PY_SSIZE_T_MAX / 4 / n) || (n && m > PY_SSIZE_T_MAX / 4 / n)) {
        PyErr_Format(PyExc_ValueError, "%s: bad sizes", name);
        return 0;
    }
    if (threads < 1 || threads > 64) {
        PyErr_Format(PyExc_ValueError, "%s: threads must be 1 to 64", name);
        return 0;
    }
    return 1;
}

/* ``w`` as a C-contiguous buffer of exactly ``count`` fp16 values (2 bytes each), or -1 with
 * a ValueError naming ``name``. */
static int half_weights(PyObject *w, Py_buffer *view, Py_ssize_t count, const char *name)
{
    if (PyObject_GetBuffer(w, view, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->len != count * 2) {
        PyErr_Format(PyExc_ValueError, "%s: w must hold %zd fp16 values", name, count);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(gemm_doc,
"gemm(a, b, out, m, k, n, threads, round=False) -> None\n\n"
"out[m, n] = a[m, k] @ b[k, n]: C-contiguous float32 buffers of exactly those sizes.\n"
"With round, every value is then rounded to fp16 (round_in_place's bits, NaN and\n"
"infinity included), tile by tile while in cache.\n"
"Raises RuntimeError where gemm_available() is False.");

static PyObject *gemm(PyObject *self, PyObject *args)
{
    PyObject *a, *b, *out;
    Py_ssize_t m, k, n;
    int threads, round = 0;
    if (!PyArg_ParseTuple(args, "OOOnnni|p:gemm", &a, &b, &out, &m, &k, &n, &threads, &round))
        return NULL;
    if (!gemm_supported()) {
        PyErr_SetString(PyExc_RuntimeError, "gemm needs x86-64 with AVX-512F");
        return NULL;
    }
    if (!product_args_ok(m, k, n, threads, "gemm"))
        return NULL;
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
            gemm_run(va.buf, vb.buf, vc.buf, m, k, n, threads, round);
        else
            memset(vc.buf, 0, (size_t)(m * n) * 4); /* sums of nothing: +0, an fp16 value */
        Py_END_ALLOW_THREADS
    }
#endif
    PyBuffer_Release(&va);
    PyBuffer_Release(&vb);
    PyBuffer_Release(&vc);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(gemm_f16w_cols_doc,
"gemm_f16w_cols(w, x, out, batch, m, k, n, threads) -> None\n\n"
"out[b] = w[m, k] @ x[b] for b < batch: w C-contiguous float16 (as uint16 bits or float16),\n"
"x [batch, k, n] and out [batch, m, n] C-contiguous float32; each output summed as\n"
"gemm_f16w sums it (the same bits). Raises RuntimeError where gemm_available() is False\n"
"or the CPU lacks F16C.");

static int f16w_supported(void);

static PyObject *gemm_f16w_cols(PyObject *self, PyObject *args)
{
    PyObject *w, *x, *out;
    Py_ssize_t batch, m, k, n;
    int threads;
    if (!PyArg_ParseTuple(args, "OOOnnnni:gemm_f16w_cols", &w, &x, &out, &batch, &m, &k, &n,
                          &threads))
        return NULL;
    if (!gemm_supported() || !f16w_supported()) {
        PyErr_SetString(PyExc_RuntimeError, "gemm_f16w_cols needs x86-64 with AVX-512F and F16C");
        return NULL;
    }
    if (batch < 0) {
        PyErr_SetString(PyExc_ValueError, "gemm_f16w_cols: bad sizes");
        return NULL;
    }
    if (!product_args_ok(m, k, n, threads, "gemm_f16w_cols"))
        return NULL;
    /* k * n and m * n fit (checked above); times the batch too */
    if (batch && (k * n > PY_SSIZE_T_MAX / 4 / batch || m * n > PY_SSIZE_T_MAX / 4 / batch)) {
        PyErr_SetString(PyExc_ValueError, "gemm_f16w_cols: bad sizes");
        return NULL;
    }
    Py_buffer vw, vx, vc;
    if (half_weights(w, &vw, m * k, "gemm_f16w_cols") < 0)
        return NULL;
    if (float_buffer(x, &vx, batch * k * n, 0, "gemm_f16w_cols: x") < 0) {
        PyBuffer_Release(&vw);
        return NULL;
    }
    if (float_buffer(out, &vc, batch * m * n, 1, "gemm_f16w_cols: out") < 0) {
        PyBuffer_Release(&vw);
        PyBuffer_Release(&vx);
        return NULL;
    }
#ifdef HAVE_GEMM
    atomic_int failed = 0;
    if (batch && m && n) {
        Py_BEGIN_ALLOW_THREADS
        pool_run((part){NULL, vx.buf, vc.buf, 0, m, k, n, vw.buf, batch, m, &failed},
                 F16WC_ROWS, f16wc_rows, threads);
        Py_END_ALLOW_THREADS
    }
#endif
    PyBuffer_Release(&vw);
    PyBuffer_Release(&vx);
    PyBuffer_Release(&vc);
#ifdef HAVE_GEMM
    if (atomic_load(&failed))
        return PyErr_NoMemory();
#endif
    Py_RETURN_NONE;
}

static int f16w_supported(void)
{
#ifdef HAVE_GEMM
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
           __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* The portable kernel: the same products, one value at a time. */
static void f16w_scalar(const uint16_t *W, const float *X, float *C, long M, long K, long N)
{
    for (long i = 0; i < M; i++)
        for (long j = 0; j < N; j++) {
            float s = 0.0f;
            for (long k = 0; k < K; k++) {
                uint32_t b = bits_from_half(W[i * K + k]);
                float h;
                memcpy(&h, &b, sizeof h);
                s += h * X[j * K + k];
            }
            C[i * N + j] = s;
        }
}

PyDoc_STRVAR(gemm_f16w_doc,
"gemm_f16w(w, xt, out, m, k, n, threads, portable=False) -> None\n\n"
"out[m, n] = w[m, k] @ xt[n, k].T: w C-contiguous float16 (as uint16 bits or float16),\n"
"xt and out C-contiguous float32. Sums in float32 (FMA with AVX2/F16C, else scalar;\n"
"``portable`` takes the scalar loop everywhere).");

static PyObject *gemm_f16w(PyObject *self, PyObject *args)
{
    PyObject *w, *x, *out;
    Py_ssize_t m, k, n;
    int threads, portable = 0;
    if (!PyArg_ParseTuple(args, "OOOnnni|p:gemm_f16w", &w, &x, &out, &m, &k, &n, &threads,
                          &portable))
        return NULL;
    if (!product_args_ok(m, k, n, threads, "gemm_f16w"))
        return NULL;
    Py_buffer vw, vx, vc;
    if (half_weights(w, &vw, m * k, "gemm_f16w") < 0)
        return NULL;
    if (float_buffer(x, &vx, k * n, 0, "gemm_f16w: xt") < 0) {
        PyBuffer_Release(&vw);
        return NULL;
    }
    if (float_buffer(out, &vc, m * n, 1, "gemm_f16w: out") < 0) {
        PyBuffer_Release(&vw);
        PyBuffer_Release(&vx);
        return NULL;
    }
    int fast = !portable && f16w_supported();
    Py_BEGIN_ALLOW_THREADS
    if (!fast) {
        f16w_scalar(vw.buf, vx.buf, vc.buf, m, k, n);
    } else {
#ifdef HAVE_GEMM
        pool_run((part){NULL, vx.buf, vc.buf, 0, m, k, n, vw.buf}, F16W_ROWS, f16w_rows,
                 threads);
#endif
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&vw);
    PyBuffer_Release(&vx);
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
 * a * b + c may become an FMA, which would round once instead of twice. Where the CPU has
 * AVX512-FP16 a block may run in fp16 lanes instead, with the same bits (half_block). */
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
/* fused_op on 16 lanes where the CPU has AVX-512F (the same operations per value: IEEE
 * arithmetic, the same NaN and zero rules as the blends above, the same F16C rounding and
 * scalar NaN path), then fused_op for the last n % 16 values. */
#define FUSED_LOOP512(EXPR)                                                                     \
    for (; i + 16 <= n; i += 16) {                                                              \
        __m512 x = _mm512_loadu_ps(a + i);                                                      \
        __m512 y = _mm512_loadu_ps(b + i);                                                      \
        __m512 r = EXPR;                                                                        \
        (void)y;                                                                                \
        if (round) {                                                                            \
            __m512 q = _mm512_cvtph_ps(_mm512_cvtps_ph(r, ROUNDING));                           \
            if (_mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q)) {                                       \
                float lanes[16];                                                                \
                _mm512_storeu_ps(lanes, r);                                                     \
                for (int k = 0; k < 16; k++)                                                    \
                    lanes[k] = fused_round(lanes[k]);                                           \
                q = _mm512_loadu_ps(lanes);                                                     \
            }                                                                                   \
            r = q;                                                                              \
        }                                                                                       \
        _mm512_storeu_ps(d + i, r);                                                             \
    }
#define FUSED_TRUTH512(MASK) _mm512_maskz_mov_ps(MASK, one)
#define FUSED_NONZERO512(V) _mm512_cmp_ps_mask(V, zero, _CMP_NEQ_OQ)

__attribute__((target("avx512f,avx2,f16c"))) static void fused_op512(int op, int round,
    const float *a, const float *b, const float *c, float *d, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
    switch (op) {
    case FUSED_SELECT:
        for (; i + 16 <= n; i += 16) {
            __mmask16 pick = FUSED_NONZERO512(_mm512_loadu_ps(c + i));
            _mm512_storeu_ps(d + i, _mm512_mask_blend_ps(pick, _mm512_loadu_ps(b + i),
                                                         _mm512_loadu_ps(a + i)));
        }
        break;
    case FUSED_ADD: FUSED_LOOP512(_mm512_add_ps(x, y)) break;
    case FUSED_SUB: FUSED_LOOP512(_mm512_sub_ps(x, y)) break;
    case FUSED_MUL: FUSED_LOOP512(_mm512_mul_ps(x, y)) break;
    case FUSED_DIV: FUSED_LOOP512(_mm512_div_ps(x, y)) break;
    case FUSED_MAX:
        FUSED_LOOP512(_mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q),
                                           _mm512_max_ps(x, y), x))
        break;
    case FUSED_MIN:
        FUSED_LOOP512(_mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q),
                                           _mm512_min_ps(x, y), x))
        break;
    case FUSED_SQRT: FUSED_LOOP512(_mm512_sqrt_ps(x)) break;
    case FUSED_ABS:
        FUSED_LOOP512(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), abs_mask)))
        break;
    case FUSED_EQ: FUSED_LOOP512(FUSED_TRUTH512(_mm512_cmp_ps_mask(x, y, _CMP_EQ_OQ))) break;
    case FUSED_NE: FUSED_LOOP512(FUSED_TRUTH512(_mm512_cmp_ps_mask(x, y, _CMP_NEQ_UQ))) break;
    case FUSED_LT: FUSED_LOOP512(FUSED_TRUTH512(_mm512_cmp_ps_mask(x, y, _CMP_LT_OQ))) break;
    case FUSED_LE: FUSED_LOOP512(FUSED_TRUTH512(_mm512_cmp_ps_mask(x, y, _CMP_LE_OQ))) break;
    case FUSED_GT: FUSED_LOOP512(FUSED_TRUTH512(_mm512_cmp_ps_mask(x, y, _CMP_GT_OQ))) break;
    case FUSED_GE: FUSED_LOOP512(FUSED_TRUTH512(_mm512_cmp_ps_mask(x, y, _CMP_GE_OQ))) break;
    case FUSED_AND:
        FUSED_LOOP512(FUSED_TRUTH512(FUSED_NONZERO512(x) & FUSED_NONZERO512(y)))
        break;
    case FUSED_OR:
        FUSED_LOOP512(FUSED_TRUTH512(FUSED_NONZERO512(x) | FUSED_NONZERO512(y)))
        break;
    case FUSED_XOR:
        FUSED_LOOP512(FUSED_TRUTH512(FUSED_NONZERO512(x) ^ FUSED_NONZERO512(y)))
        break;
    default: FUSED_LOOP512(FUSED_TRUTH512(_mm512_cmp_ps_mask(x, zero, _CMP_EQ_OQ))) break; /* not */
    }
    if (i < n)
        fused_op(op, round, a + i, b + i, c + i, d + i, n - i);
}
#endif

/* ---- the chain in fp16 lanes, where the CPU has AVX512-FP16 ----------------------------------
 * When every op of the chain rounds its result to fp16 (or returns one of its operands, or a
 * truth value) and the inputs hold fp16 values, the chain can run on fp16 values with the
 * same bits: float32 carries 24 bits, at least 2 * 11 + 2, so rounding the float32 result of
 * +, -, *, / or sqrt of two fp16 values to fp16 gives the exact result rounded once, which is
 * what the fp16 instruction computes (overflow to infinity and fp16 subnormals included).
 * NaNs: an arithmetic op returns its first NaN operand quieted or the default NaN in both
 * widths, and the F16C conversions keep a quiet NaN's payload (the top 10 bits) both ways; a
 * block whose inputs are not all fp16 values converted and back bit for bit (a signalling NaN,
 * which F16C would quiet, or an unrounded value) runs in float32 as above. 32 lanes per
 * instruction and no conversion between ops: about 4x fewer instructions per op. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && defined(__x86_64__)
#define HAVE_HALF_FUSED 1
#define HALF_TARGET __attribute__((target("avx512fp16,avx512bw,avx512vl,avx512f,avx2,f16c")))

static int half_fused_on = 1; /* fused_half(False) turns the fp16 lanes off (tests compare) */

static int half_supported(void)
{
    __builtin_cpu_init();
    return half_fused_on && __builtin_cpu_supports("avx512fp16");
}

/* True when a chain's rows run in fp16 lanes: every +, -, *, / and sqrt is rounded (the
 * other ops return an operand, its magnitude or a truth value, exact in fp16). */
static int half_code(const int32_t *rows, Py_ssize_t nrows)
{
    for (Py_ssize_t r = 0; r < nrows; r++) {
        int op = rows[6 * r];
        if (op <= FUSED_SQRT && op != FUSED_MAX && op != FUSED_MIN && !rows[6 * r + 1])
            return 0;
    }
    return 1;
}

static __mmask16 half_tail16(Py_ssize_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* n float32 values as fp16 into dst (whole vectors of 16 written); 0 when one of them is not
 * an fp16 value (its conversion and back differs in a bit), dst then partly written. */
HALF_TARGET static int half_narrow(const float *src, uint16_t *dst, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i += 16) {
        __mmask16 m = half_tail16(n - i);
        __m512 x = _mm512_maskz_loadu_ps(m, src + i);
        __m256i h = _mm512_cvtps_ph(x, ROUNDING);
        __m512i back = _mm512_castps_si512(_mm512_cvtph_ps(h));
        if (_mm512_mask_cmpneq_epi32_mask(m, back, _mm512_castps_si512(x)))
            return 0;
        _mm256_storeu_si256((__m256i *)(dst + i), h);
    }
    return 1;
}

/* n fp16 values as float32 (exact) into dst. */
HALF_TARGET static void half_widen(const uint16_t *src, float *dst, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i += 16) {
        __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_mask_storeu_ps(dst + i, half_tail16(n - i), x);
    }
}

/* A bool output from fp16 lanes: nonzero (NaN included, as fused_store_bools) as 1. */
HALF_TARGET static void half_store_bools(const uint16_t *src, unsigned char *dst, Py_ssize_t n)
{
    const __m512i magnitude = _mm512_set1_epi16(0x7FFF);
    const __m256i ones = _mm256_set1_epi8(1);
    for (Py_ssize_t i = 0; i < n; i += 32) {
        __mmask32 m = n - i >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (n - i)) - 1u);
        __mmask32 t = _mm512_test_epi16_mask(_mm512_loadu_si512(src + i), magnitude);
        _mm256_mask_storeu_epi8(dst + i, m, _mm256_maskz_mov_epi8(t, ones));
    }
}

#define HALF_LOOP(EXPR)                                                                         \
    for (Py_ssize_t i = 0; i < n; i += 32) {                                                    \
        __m512h x = _mm512_loadu_ph(a + i);                                                     \
        __m512h y = _mm512_loadu_ph(b + i);                                                     \
        (void)y;                                                                                \
        _mm512_storeu_ph(d + i, EXPR);                                                          \
    }
#define HALF_TRUTH(MASK) _mm512_castsi512_ph(_mm512_maskz_mov_epi16(MASK, one))
#define HALF_NONZERO(V) _mm512_cmp_ph_mask(V, zero, _CMP_NEQ_OQ)

/* fused_op512 on fp16 lanes, n a multiple of 32 (the same comparisons, NaN and zero rules). */
HALF_TARGET static void half_op(int op, const uint16_t *a, const uint16_t *b, const uint16_t *c,
                                uint16_t *d, Py_ssize_t n)
{
    const __m512i one = _mm512_set1_epi16(0x3C00), magnitude = _mm512_set1_epi16(0x7FFF);
    const __m512h zero = _mm512_setzero_ph();
    switch (op) {
    case FUSED_SELECT:
        for (Py_ssize_t i = 0; i < n; i += 32) {
            __mmask32 pick = HALF_NONZERO(_mm512_loadu_ph(c + i));
            _mm512_storeu_ph(d + i, _mm512_mask_blend_ph(pick, _mm512_loadu_ph(b + i),
                                                         _mm512_loadu_ph(a + i)));
        }
        break;
    case FUSED_ADD: HALF_LOOP(_mm512_add_ph(x, y)) break;
    case FUSED_SUB: HALF_LOOP(_mm512_sub_ph(x, y)) break;
    case FUSED_MUL: HALF_LOOP(_mm512_mul_ph(x, y)) break;
    case FUSED_DIV: HALF_LOOP(_mm512_div_ph(x, y)) break;
    case FUSED_MAX:
        HALF_LOOP(_mm512_mask_blend_ph(_mm512_cmp_ph_mask(x, x, _CMP_UNORD_Q), _mm512_max_ph(x, y), x))
        break;
    case FUSED_MIN:
        HALF_LOOP(_mm512_mask_blend_ph(_mm512_cmp_ph_mask(x, x, _CMP_UNORD_Q), _mm512_min_ph(x, y), x))
        break;
    case FUSED_SQRT: HALF_LOOP(_mm512_sqrt_ph(x)) break;
    case FUSED_ABS:
        HALF_LOOP(_mm512_castsi512_ph(_mm512_and_si512(_mm512_castph_si512(x), magnitude)))
        break;
    case FUSED_EQ: HALF_LOOP(HALF_TRUTH(_mm512_cmp_ph_mask(x, y, _CMP_EQ_OQ))) break;
    case FUSED_NE: HALF_LOOP(HALF_TRUTH(_mm512_cmp_ph_mask(x, y, _CMP_NEQ_UQ))) break;
    case FUSED_LT: HALF_LOOP(HALF_TRUTH(_mm512_cmp_ph_mask(x, y, _CMP_LT_OQ))) break;
    case FUSED_LE: HALF_LOOP(HALF_TRUTH(_mm512_cmp_ph_mask(x, y, _CMP_LE_OQ))) break;
    case FUSED_GT: HALF_LOOP(HALF_TRUTH(_mm512_cmp_ph_mask(x, y, _CMP_GT_OQ))) break;
    case FUSED_GE: HALF_LOOP(HALF_TRUTH(_mm512_cmp_ph_mask(x, y, _CMP_GE_OQ))) break;
    case FUSED_AND: HALF_LOOP(HALF_TRUTH(HALF_NONZERO(x) & HALF_NONZERO(y))) break;
    case FUSED_OR: HALF_LOOP(HALF_TRUTH(HALF_NONZERO(x) | HALF_NONZERO(y))) break;
    case FUSED_XOR: HALF_LOOP(HALF_TRUTH(HALF_NONZERO(x) ^ HALF_NONZERO(y))) break;
    default: HALF_LOOP(HALF_TRUTH(_mm512_cmp_ph_mask(x, zero, _CMP_EQ_OQ))) break; /* not */
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

#ifdef HAVE_HALF_FUSED
/* A gathered float32 input whose last axis repeats one value: runs of one value (a
 * per-channel bias or scale over [N, C, H, W]). */
static int fused_runs(const fused_input *in)
{
    return in->kind == 2 && !in->is_bool && in->stride[in->nd - 1] == 0;
}

/* Values [start, start + n) of an input whose last axis repeats one value (a per-channel bias
 * or scale seen over [N, C, H, W]) as fp16 straight into dst, a run of one value at a time;
 * 0 when one of them is not an fp16 value. */
HALF_TARGET static int half_gather_runs(const fused_input *in, Py_ssize_t start, Py_ssize_t n,
                                        uint16_t *dst)
{
    Py_ssize_t idx[FUSED_DIMS], rest = start;
    int last = in->nd - 1;
    for (int d = last; d >= 0; d--) {
        idx[d] = rest % in->shape[d];
        rest /= in->shape[d];
    }
    while (n > 0) {
        const char *p = in->view.buf;
        for (int d = 0; d < last; d++)
            p += idx[d] * in->stride[d];
        Py_ssize_t run = in->shape[last] - idx[last];
        if (run > n)
            run = n;
        float v;
        memcpy(&v, p, sizeof v);
        __m128i h = _mm_cvtps_ph(_mm_set_ss(v), ROUNDING);
        __m128i back = _mm_castps_si128(_mm_cvtph_ps(h)), bits = _mm_castps_si128(_mm_set_ss(v));
        if (_mm_cvtsi128_si32(back) != _mm_cvtsi128_si32(bits))
            return 0;
        const __m512i fill = _mm512_set1_epi16((short)_mm_extract_epi16(h, 0));
        Py_ssize_t i = 0;
        for (; i + 32 <= run; i += 32)
            _mm512_storeu_si512(dst + i, fill);
        if (i < run)
            _mm512_mask_storeu_epi16(dst + i, (__mmask32)((1u << (run - i)) - 1u), fill);
        dst += run;
        n -= run;
        idx[last] = 0;
        for (int d = last - 1; d >= 0; d--) {
            if (++idx[d] < in->shape[d])
                break;
            idx[d] = 0;
        }
    }
    return 1;
}

/* One block of the pass in fp16 lanes (half_code's chains): 0, with nothing written, when an
 * input value of the block is not an fp16 value (the caller then runs the block in float32).
 * Inputs of one value were converted before the first block. */
HALF_TARGET static int half_block(fused_input *iv, Py_ssize_t ni, Py_buffer *ov, Py_ssize_t no,
                                  const int32_t *rows, Py_ssize_t nrows, uint16_t **hreg,
                                  Py_ssize_t start, Py_ssize_t len)
{
    for (Py_ssize_t k = 0; k < ni; k++) {
        const fused_input *in = &iv[k];
        int exact = 1;
        if (in->kind == 0) {
            exact = half_narrow((const float *)in->view.buf + start, hreg[k], len);
        } else if (fused_runs(in)) {
            exact = half_gather_runs(in, start, len, hreg[k]);
        } else if (in->kind == 2) {
            fused_gather(in, start, len, in->buf);
            exact = half_narrow(in->buf, hreg[k], len);
        }
        if (!exact)
            return 0;
    }
    Py_ssize_t lanes = (len + 31) & ~(Py_ssize_t)31;
    for (Py_ssize_t r = 0; r < nrows; r++) {
        const int32_t *c = rows + 6 * r;
        half_op(c[0], hreg[c[3]], hreg[c[4]], hreg[c[5]], hreg[c[2]], lanes);
    }
    for (Py_ssize_t k = 0; k < no; k++) {
        if (ov[k].itemsize == 4)
            half_widen(hreg[ni + k], (float *)ov[k].buf + start, len);
        else
            half_store_bools(hreg[ni + k], (unsigned char *)ov[k].buf + start, len);
    }
    return 1;
}
#endif

PyDoc_STRVAR(fused_run_doc,
"fused_run(code, inputs, outputs, temps, start=0, stop=-1) -> int or None\n\n"
"Run a chain of elementwise ops (code: int32 rows op, round, dst, a, b, c over the registers\n"
"inputs, outputs, then ``temps`` temporaries) in one blocked pass; outputs are C-contiguous\n"
"float32 or bool arrays of one shape that every input (float32 or bool) broadcasts to.\n"
"Only the values [start, stop) in C order are computed (stop -1: to the end); a range that\n"
"starts on a multiple of 1024 walks the same blocks as the whole pass, so callers may run\n"
"ranges on several threads. Returns how many blocks ran in fp16 lanes (AVX512-FP16; 0 where\n"
"none did), or None where the CPU lacks AVX2 and F16C (nothing was computed).");

static PyObject *fused_run(PyObject *self, PyObject *args)
{
    PyObject *code_obj, *ins, *outs;
    Py_ssize_t temps, first = 0, stop = -1;
    if (!PyArg_ParseTuple(args, "OO!O!n|nn:fused_run", &code_obj, &PyTuple_Type, &ins,
                          &PyTuple_Type, &outs, &temps, &first, &stop))
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
    Py_ssize_t opened_o = 0, opened_i = 0, n = 0, halved = 0; /* blocks in fp16 lanes */
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
    if (!failed && (first < 0 || first > n || stop < -1 || stop > n || (stop >= 0 && stop < first))) {
        PyErr_SetString(PyExc_ValueError, "fused_run: start and stop must be 0 <= start <= stop <= size");
        failed = 1;
    }
    const Py_ssize_t last = stop < 0 ? n : stop;
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
#ifdef HAVE_HALF_FUSED
    /* one op over plain inputs is quicker in float32: the conversions in and out cost more
     * than the op; a broadcast input filled in fp16 runs (half_gather_runs) is quicker still */
    int half = !failed && half_supported() && half_code(rows, nrows);
    if (half && nrows < 2) {
        half = 0;
        for (Py_ssize_t k = 0; k < ni; k++)
            half |= fused_runs(&iv[k]);
    }
    Py_ssize_t hblock = (block + 31) & ~(Py_ssize_t)31; /* fp16 lanes: whole vectors of 32 */
    uint16_t *hscratch = NULL, **hreg = NULL;
    if (half) {
        hscratch = PyMem_Calloc((size_t)nregs * (size_t)hblock, sizeof *hscratch);
        hreg = PyMem_Calloc((size_t)nregs, sizeof *hreg);
        if (hscratch == NULL || hreg == NULL) {
            PyErr_NoMemory();
            failed = 1;
        }
        for (Py_ssize_t r = 0; !failed && r < nregs; r++)
            hreg[r] = hscratch + r * hblock;
    }
#endif
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
        const int wide = gemm_supported(); /* AVX-512F: fused_op512 */
        (void)wide;
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
#ifdef HAVE_HALF_FUSED
                if (half) /* one value, not an fp16 one: every block runs in float32 */
                    half = half_narrow(iv[k].buf, hreg[k], block);
#endif
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
        for (Py_ssize_t start = first; start < last; start += block) {
            Py_ssize_t len = last - start < block ? last - start : block;
#ifdef HAVE_HALF_FUSED
            if (half && half_block(iv, ni, ov, no, rows, nrows, hreg, start, len)) {
                halved++;
                continue;
            }
#endif
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
                if (wide)
                    fused_op512(c[0], c[1], reg[c[3]], reg[c[4]], reg[c[5]], reg[c[2]], len);
                else
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
#ifdef HAVE_HALF_FUSED
    PyMem_Free(hscratch);
    PyMem_Free(hreg);
#endif
    PyMem_Free(reg);
    PyMem_Free(iv);
    PyMem_Free(ov);
    PyBuffer_Release(&code);
    if (failed)
        return NULL;
    return PyLong_FromSsize_t(halved);
}
PyDoc_STRVAR(fused_half_doc,
"fused_half(on) -> bool\n\n"
"Let fused_run compute in fp16 lanes where it may (on True, the default) or never (tests run\n"
"both paths); returns whether it now may: False where the CPU lacks AVX512-FP16.");

static PyObject *fused_half(PyObject *self, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
#ifdef HAVE_HALF_FUSED
    half_fused_on = on;
    return PyBool_FromLong(half_supported());
#else
    return PyBool_FromLong(0);
#endif
}
/* ---- end of fused_run ------------------------------------------------------------------- */

/* ---- mean_rows: float32 means of contiguous rows, numpy's summation order -----------------
 * A global average pool (reduce_mean over H and W of [N, C, H, W]) hands numpy rows of a
 * few hundred values; its pairwise sum runs 8 scalar accumulators at ~0.25 ns per value.
 * These are the same additions in the same order (numpy's FLOAT_pairwise_sum: fewer than 8
 * values summed from -0 one by one; up to 128 in 8 accumulators, combined as
 * ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the rest one by one; more split in
 * two halves of a multiple of 8), added to the reduction's 0, then divided as np.mean's
 * division by an intp count does it: in float64, cast back to float32. The 8 accumulators
 * are 8 lanes of one vector. */
static float pairwise_sum(const float *a, Py_ssize_t n)
{
    if (n < 8) {
        float res = -0.0f;
        for (Py_ssize_t i = 0; i < n; i++)
            res += a[i];
        return res;
    }
    if (n <= 128) {
        float r[8];
        memcpy(r, a, sizeof r);
        Py_ssize_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i];
        return res;
    }
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

PyDoc_STRVAR(mean_rows_doc,
"mean_rows(x, out) -> None\n\n"
"out[r] = the mean of row r of x (C-contiguous float32, out.size rows of x.size / out.size\n"
"values) with numpy's float32 pairwise sum and np.mean's float64 division.");

static PyObject *mean_rows(PyObject *self, PyObject *args)
{
    PyObject *x_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OO:mean_rows", &x_obj, &out_obj))
        return NULL;
    Py_buffer x, out;
    if (items_buffer(x_obj, &x, 4, 0, "x") < 0)
        return NULL;
    if (items_buffer(out_obj, &out, 4, 1, "out") < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    Py_ssize_t rows = out.len / 4, n = rows ? x.len / 4 / rows : 0;
    if (rows == 0 || n == 0 || n * rows * 4 != x.len) {
        PyErr_SetString(PyExc_ValueError, "mean_rows: x must hold out.size nonempty rows");
        PyBuffer_Release(&x);
        PyBuffer_Release(&out);
        return NULL;
    }
    const float *src = x.buf;
    float *dst = out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < rows; r++)
        dst[r] = (float)((double)(0.0f + pairwise_sum(src + r * n, n)) / (double)n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&x);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}
/* ---- end of mean_rows ------------------------------------------------------------------- */

/* ---- window kernels: picking convolutions, their scatter, window maxima, clamps ----------
 *
 * A compiled training step gathers windows with convolutions whose weights only pick inputs
 * (im2col, the max-pool backward's window picks) and scatters gradients back with their
 * transposes (col2im); the simulator copies those instead of multiplying (ops/conv.py). In
 * numpy the copies walk short strided rows (14 or 28 values); these loops do the same
 * arithmetic element by element, in the same order, so the bits are the same (where two
 * NaNs meet in a scatter's sum the accumulator's is kept; numpy's loops keep either):
 *   window_gather: out = 0 + x (a picked value plus the sum's +0; +0 in the padding);
 *   taps_scatter:  out = 0, then out += tap for each kernel tap in index order;
 *   window_max:    acc = first tap, then acc = maximum(acc, tap) tap by tap (max pooling);
 *   clamp:         minimum(maximum(x, lo), hi).
 * maximum and minimum follow numpy's float loops: a NaN operand is the result (the first
 * when both are), otherwise the second operand unless the first is strictly larger
 * (smaller), so maximum(-0, +0) is +0 and maximum(+0, -0) is -0.
 * Arrays are [N, C, three spatial axes] (callers pad lower ranks with 1s); inputs may have
 * any strides. With AVX-512F, rows of up to 16 (a scatter's up to 32) values are masked
 * vector loads and stores, and a scatter's output row is summed in registers tap by tap.
 * window_gather and taps_scatter report whether every value they read was finite: the
 * picked copy equals the GEMM's sum only then (0 * inf is NaN). */

#define EXPONENT_BITS 0x7F800000u

static inline uint32_t not_finite(float v)
{
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    return (b & EXPONENT_BITS) == EXPONENT_BITS;
}

static inline float np_maximum(float a, float b)
{
    return (a != a) ? a : ((b != b) ? b : (a > b ? a : b));
}

static inline float np_minimum(float a, float b)
{
    return (a != a) ? a : ((b != b) ? b : (a < b ? a : b));
}

/* One row of each kernel: n values of src, `step` floats apart (gather), or to dst `step`
 * floats apart (scatter). The AVX-512 versions do the same fp32 operation per element
 * (masked loads and stores cover a row's tail, so nothing past it is touched). */
static uint32_t gather_row(const char *src, Py_ssize_t step, float *dst, Py_ssize_t n)
{
    uint32_t bad = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, src + i * step, sizeof v);
        bad |= not_finite(v);
        dst[i] = 0.0f + v;
    }
    return bad;
}

/* acc + v, and where both are NaN acc's (quieted): the choice written out, as the compiler
 * may swap an add's operands (numpy's own loops differ here: the first operand's NaN in
 * their vector body, the second's in some tails). */
static inline float quieted(float v)
{
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    b |= 0x00400000u;
    memcpy(&v, &b, sizeof v);
    return v;
}

static inline float tap_sum(float acc, float v)
{
    return acc != acc ? quieted(acc) : acc + v;
}

static uint32_t scatter_row(const char *src, Py_ssize_t step, float *dst, Py_ssize_t stride,
                            Py_ssize_t n)
{
    uint32_t bad = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, src + i * step, sizeof v);
        bad |= not_finite(v);
        dst[i * stride] = tap_sum(dst[i * stride], v);
    }
    return bad;
}

#ifdef HAVE_GEMM
static inline __mmask16 lanes(Py_ssize_t count)
{
    return count >= 16 ? (__mmask16)0xFFFF : count <= 0 ? 0 : (__mmask16)((1u << count) - 1);
}

/* gather_row for step 4 or 8 bytes (contiguous, every other value) */
__attribute__((target("avx512f"))) static inline uint32_t gather_row512(const float *src, int two,
                                                                  float *dst, Py_ssize_t n)
{
    const __m512 zero = _mm512_setzero_ps();
    const __m512i expo = _mm512_set1_epi32((int)EXPONENT_BITS);
    const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                            28, 30);
    __mmask16 bad = 0;
    for (Py_ssize_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes(n - i);
        __m512 v;
        if (!two) {
            v = _mm512_maskz_loadu_ps(m, src + i);
        } else {
            Py_ssize_t span = 2 * (n - i < 16 ? n - i : 16) - 1;
            __m512 lo = _mm512_maskz_loadu_ps(lanes(span), src + 2 * i);
            __m512 hi = _mm512_maskz_loadu_ps(lanes(span - 16), src + 2 * i + 16);
            v = _mm512_permutex2var_ps(lo, evens, hi);
        }
        __m512i e = _mm512_and_si512(_mm512_castps_si512(v), expo);
        bad |= _mm512_mask_cmpeq_epi32_mask(m, e, expo);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_add_ps(zero, v));
    }
    return bad != 0;
}

/* tap_sum on 16 lanes */
__attribute__((target("avx512f"))) static inline __m512 tap_sum512(__m512 acc, __m512 v,
                                                                  __m512i quiet)
{
    __mmask16 nan = _mm512_cmp_ps_mask(acc, acc, _CMP_UNORD_Q);
    __m512 q = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(acc), quiet));
    return _mm512_mask_mov_ps(_mm512_add_ps(acc, v), nan, q);
}

/* scatter_row from contiguous src to dst 1 or 2 floats apart: dst + v, dst first */
__attribute__((target("avx512f"))) static inline uint32_t scatter_row512(const float *src, float *dst,
                                                                   int two, Py_ssize_t n)
{
    const __m512i expo = _mm512_set1_epi32((int)EXPONENT_BITS);
    const __m512i quiet = _mm512_set1_epi32(0x00400000);
    const __m512i low = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i high = _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14,
                                           15, 15);
    __mmask16 bad = 0;
    for (Py_ssize_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, src + i);
        __m512i e = _mm512_and_si512(_mm512_castps_si512(v), expo);
        bad |= _mm512_mask_cmpeq_epi32_mask(m, e, expo);
        if (!two) {
            __m512 d = _mm512_maskz_loadu_ps(m, dst + i);
            _mm512_mask_storeu_ps(dst + i, m, tap_sum512(d, v, quiet));
        } else {
            Py_ssize_t span = 2 * (n - i < 16 ? n - i : 16) - 1;
            __mmask16 m0 = lanes(span) & 0x5555, m1 = lanes(span - 16) & 0x5555;
            float *d0 = dst + 2 * i, *d1 = dst + 2 * i + 16;
            __m512 a = _mm512_maskz_loadu_ps(m0, d0);
            _mm512_mask_storeu_ps(d0, m0, tap_sum512(a, _mm512_permutexvar_ps(low, v), quiet));
            __m512 b = _mm512_maskz_loadu_ps(m1, d1);
            _mm512_mask_storeu_ps(d1, m1, tap_sum512(b, _mm512_permutexvar_ps(high, v), quiet));
        }
    }
    return bad != 0;
}
#endif

/* A float32 buffer of ``ndim`` dimensions with any strides (writable and C-contiguous if
 * asked); ValueError naming ``what`` otherwise. */
static int window_buffer(PyObject *obj, Py_buffer *view, int ndim, int output, const char *what)
{
    int flags = PyBUF_FORMAT | (output ? (PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) : PyBUF_STRIDED_RO);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    const char *fmt = view->format ? view->format : "B";
    if (*fmt == '<' || *fmt == '=' || *fmt == '@')
        fmt++;
    if (view->itemsize != 4 || strcmp(fmt, "f") != 0 || view->ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "%s must be a %d-D float32 array", what, ndim);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* A window kernel's input (any strides) and output (C-contiguous, writable) buffers, both
 * float32 of the given ranks; on failure neither is held. */
static int window_buffers(PyObject *in, Py_buffer *vi, int ni, const char *in_what, PyObject *out,
                          Py_buffer *vo, int no, const char *out_what)
{
    if (window_buffer(in, vi, ni, 0, in_what) < 0)
        return -1;
    if (window_buffer(out, vo, no, 1, out_what) < 0) {
        PyBuffer_Release(vi);
        return -1;
    }
    return 0;
}

static int positive3(const Py_ssize_t v[3], Py_ssize_t least, const char *what)
{
    for (int i = 0; i < 3; i++)
        if (v[i] < least) {
            PyErr_Format(PyExc_ValueError, "%s must be at least %zd", what, least);
            return -1;
        }
    return 0;
}

/* The first output position (of ``count``) whose input index o * s + base is >= 0, and the
 * end of those whose index is < size. */
static void inside(Py_ssize_t count, Py_ssize_t s, Py_ssize_t base, Py_ssize_t size,
                   Py_ssize_t *lo, Py_ssize_t *hi)
{
    Py_ssize_t a = 0, b = count;
    while (a < count && a * s + base < 0)
        a++;
    while (b > a && (b - 1) * s + base >= size)
        b--;
    *lo = a;
    *hi = b;
}

struct gather_job {
    const char *x;
    Py_ssize_t batch, batch_stride; /* x's leading axis */
    const Py_ssize_t *xs, *st; /* the rest of x: shape [C, S0, S1, S2] and byte strides */
    float *out;
    Py_ssize_t o[3], k[3], s[3], d[3], pad[3];
};

/* window_gather's loop; ``wide`` (a constant where it is inlined) takes the AVX-512 rows. */
static inline __attribute__((always_inline)) uint32_t gather_loop(const struct gather_job *j,
                                                                  int wide)
{
    uint32_t bad = 0;
    float *out = j->out;
    const Py_ssize_t *xs = j->xs, *st = j->st, *s = j->s, *d = j->d, *pad = j->pad;
    const Py_ssize_t o0 = j->o[0], o1 = j->o[1], o2 = j->o[2], step = s[2] * st[3];
    for (Py_ssize_t b = 0; b < j->batch; b++)
    for (Py_ssize_t p = 0; p < xs[0]; p++) {
        const char *plane = j->x + b * j->batch_stride + p * st[0];
        for (Py_ssize_t k0 = 0; k0 < j->k[0]; k0++)
        for (Py_ssize_t k1 = 0; k1 < j->k[1]; k1++)
        for (Py_ssize_t k2 = 0; k2 < j->k[2]; k2++) {
            Py_ssize_t lo0, hi0, lo1, hi1, lo2, hi2;
            inside(o0, s[0], k0 * d[0] - pad[0], xs[1], &lo0, &hi0);
            inside(o1, s[1], k1 * d[1] - pad[1], xs[2], &lo1, &hi1);
            inside(o2, s[2], k2 * d[2] - pad[2], xs[3], &lo2, &hi2);
            for (Py_ssize_t i0 = 0; i0 < o0; i0++)
            for (Py_ssize_t i1 = 0; i1 < o1; i1++, out += o2) {
                if (i0 < lo0 || i0 >= hi0 || i1 < lo1 || i1 >= hi1 || lo2 >= hi2) {
                    for (Py_ssize_t i2 = 0; i2 < o2; i2++)
                        out[i2] = 0.0f; /* 0 + 0 is +0 */
                    continue;
                }
                const char *row = plane + (i0 * s[0] + k0 * d[0] - pad[0]) * st[1] +
                                  (i1 * s[1] + k1 * d[1] - pad[1]) * st[2] +
                                  (lo2 * s[2] + k2 * d[2] - pad[2]) * st[3];
                for (Py_ssize_t i2 = 0; i2 < lo2; i2++)
                    out[i2] = 0.0f;
                for (Py_ssize_t i2 = hi2; i2 < o2; i2++)
                    out[i2] = 0.0f;
#ifdef HAVE_GEMM
                if (wide && (step == 4 || step == 8)) {
                    bad |= gather_row512((const float *)row, step == 8, out + lo2, hi2 - lo2);
                    continue;
                }
#endif
                bad |= gather_row(row, step, out + lo2, hi2 - lo2);
            }
        }
    }
    return bad;
}

static uint32_t gather_plain(const struct gather_job *j) { return gather_loop(j, 0); }
#ifdef HAVE_GEMM
__attribute__((target("avx512f"))) static uint32_t gather_wide(const struct gather_job *j)
{
    return gather_loop(j, 1);
}

/* gather_loop for output rows of at most 16 values read from adjacent floats or every other
 * one (a small image's im2col, a 2-stride pooling window: the usual cases): each row is
 * one or two masked loads, the padding's lanes masked off (read as +0, never touched), and
 * one store. Rows cost the general loop ~6 ns. */
__attribute__((target("avx512f"))) static uint32_t gather_short_rows(const struct gather_job *j)
{
    const __m512 zero = _mm512_setzero_ps();
    const __m512i expo = _mm512_set1_epi32((int)EXPONENT_BITS);
    const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                            28, 30);
    __mmask16 bad = 0;
    float *out = j->out;
    const Py_ssize_t *xs = j->xs, *st = j->st, *s = j->s, *d = j->d, *pad = j->pad;
    const Py_ssize_t o0 = j->o[0], o1 = j->o[1], o2 = j->o[2];
    const __mmask16 row = lanes(o2);
    for (Py_ssize_t b = 0; b < j->batch; b++)
    for (Py_ssize_t p = 0; p < xs[0]; p++) {
        const char *plane = j->x + b * j->batch_stride + p * st[0];
        for (Py_ssize_t k0 = 0; k0 < j->k[0]; k0++)
        for (Py_ssize_t k1 = 0; k1 < j->k[1]; k1++)
        for (Py_ssize_t k2 = 0; k2 < j->k[2]; k2++) {
            Py_ssize_t lo0, hi0, lo1, hi1, lo2, hi2;
            inside(o0, s[0], k0 * d[0] - pad[0], xs[1], &lo0, &hi0);
            inside(o1, s[1], k1 * d[1] - pad[1], xs[2], &lo1, &hi1);
            inside(o2, s[2], k2 * d[2] - pad[2], xs[3], &lo2, &hi2);
            const __mmask16 take = (__mmask16)(lanes(hi2) & ~lanes(lo2));
            /* with stride 2, output i reads source lane 2i of two 16-lane loads */
            uint32_t spread = 0;
            for (int i = 0; i < 16; i++)
                spread |= ((uint32_t)(take >> i) & 1u) << (2 * i);
            /* where output 0 of each row reads (before the row when padded: masked off) */
            const Py_ssize_t shift = (k2 * d[2] - pad[2]) * 4;
            for (Py_ssize_t i0 = 0; i0 < o0; i0++)
            for (Py_ssize_t i1 = 0; i1 < o1; i1++, out += o2) {
                if (i0 < lo0 || i0 >= hi0 || i1 < lo1 || i1 >= hi1 || !take) {
                    _mm512_mask_storeu_ps(out, row, zero);
                    continue;
                }
                const char *first = plane + (i0 * s[0] + k0 * d[0] - pad[0]) * st[1] +
                                    (i1 * s[1] + k1 * d[1] - pad[1]) * st[2];
                const float *at = (const float *)(first + shift);
                __m512 v = s[2] == 1 ? _mm512_maskz_loadu_ps(take, at)
                                     : _mm512_permutex2var_ps(
                                           _mm512_maskz_loadu_ps((__mmask16)spread, at), evens,
                                           _mm512_maskz_loadu_ps((__mmask16)(spread >> 16), at + 16));
                __m512i e = _mm512_and_si512(_mm512_castps_si512(v), expo);
                bad |= _mm512_mask_cmpeq_epi32_mask(take, e, expo);
                _mm512_mask_storeu_ps(out, row, _mm512_add_ps(zero, v));
            }
        }
    }
    return bad != 0;
}
#endif

struct scatter_job {
    const char *cols;
    Py_ssize_t batch, batch_stride; /* cols' leading axis */
    const Py_ssize_t *cs, *st; /* the rest: shape [C, K0, K1, K2, D0, D1, D2], byte strides */
    float *out;
    Py_ssize_t f[3], s[3], d[3];
};

/* One tap of one (batch, channel) plane of taps_scatter. */
static inline __attribute__((always_inline)) uint32_t scatter_tap(const struct scatter_job *j,
    Py_ssize_t b, Py_ssize_t p, Py_ssize_t k0, Py_ssize_t k1, Py_ssize_t k2, int wide)
{
    uint32_t bad = 0;
    const Py_ssize_t *cs = j->cs, *st = j->st, *s = j->s, *d = j->d;
    const Py_ssize_t f1 = j->f[1], f2 = j->f[2];
    float *plane = j->out + (b * cs[0] + p) * j->f[0] * f1 * f2;
    const char *tap = j->cols + b * j->batch_stride + p * st[0] + k0 * st[1] + k1 * st[2] +
                      k2 * st[3];
    for (Py_ssize_t i0 = 0; i0 < cs[4]; i0++)
    for (Py_ssize_t i1 = 0; i1 < cs[5]; i1++) {
        const char *src = tap + i0 * st[4] + i1 * st[5];
        float *dst = plane + ((k0 * d[0] + i0 * s[0]) * f1 + k1 * d[1] + i1 * s[1]) * f2 +
                     k2 * d[2];
#ifdef HAVE_GEMM
        if (wide && st[6] == 4 && (s[2] == 1 || s[2] == 2)) {
            bad |= scatter_row512((const float *)src, dst, s[2] == 2, cs[6]);
            continue;
        }
#endif
        bad |= scatter_row(src, st[6], dst, s[2], cs[6]);
    }
    return bad;
}

/* taps_scatter's loop (out already zero); ``wide`` as in gather_loop. Each output's taps
 * are added in index order either way; when cols' batch axis has the smaller stride (a
 * transposed layout) it is walked innermost, so the reads run through memory in order. */
static inline __attribute__((always_inline)) uint32_t scatter_loop(const struct scatter_job *j,
                                                                   int wide)
{
    uint32_t bad = 0;
    const Py_ssize_t *cs = j->cs;
    if (j->batch_stride < j->st[0]) {
        for (Py_ssize_t p = 0; p < cs[0]; p++)
        for (Py_ssize_t k0 = 0; k0 < cs[1]; k0++)
        for (Py_ssize_t k1 = 0; k1 < cs[2]; k1++)
        for (Py_ssize_t k2 = 0; k2 < cs[3]; k2++)
        for (Py_ssize_t b = 0; b < j->batch; b++)
            bad |= scatter_tap(j, b, p, k0, k1, k2, wide);
    } else {
        for (Py_ssize_t b = 0; b < j->batch; b++)
        for (Py_ssize_t p = 0; p < cs[0]; p++)
        for (Py_ssize_t k0 = 0; k0 < cs[1]; k0++)
        for (Py_ssize_t k1 = 0; k1 < cs[2]; k1++)
        for (Py_ssize_t k2 = 0; k2 < cs[3]; k2++)
            bad |= scatter_tap(j, b, p, k0, k1, k2, wide);
    }
    return bad;
}

#ifdef HAVE_GEMM
/* scatter_loop for output rows of at most 32 values from input rows of at most 16 adjacent
 * floats (a small image's col2im or pooling gradient), turned around: each output row is
 * summed in registers over the taps that reach it, in tap order (lanes a tap does not
 * reach are left alone, as the loop never adds to them), and stored once; a tap's row is
 * put in place by a permutation computed once per kernel column. */
__attribute__((target("avx512f"))) static uint32_t scatter_short_rows(const struct scatter_job *j)
{
    const __m512i expo = _mm512_set1_epi32((int)EXPONENT_BITS);
    const __m512i quiet = _mm512_set1_epi32(0x00400000);
    const Py_ssize_t *cs = j->cs, *st = j->st, *s = j->s, *d = j->d;
    const Py_ssize_t f0 = j->f[0], f1 = j->f[1], f2 = j->f[2], k2n = cs[3];
    __m512i place[16][2];   /* per kernel column (at most 16) and half row: source lanes */
    __mmask16 reach[16][2]; /* and the output lanes they reach */
    for (Py_ssize_t k2 = 0; k2 < k2n; k2++)
        for (int h = 0; h < 2; h++) {
            int32_t idx[16];
            reach[k2][h] = 0;
            for (int lane = 0; lane < 16; lane++) {
                Py_ssize_t f = 16 * h + lane, at = f - k2 * d[2];
                idx[lane] = 0;
                if (f < f2 && at >= 0 && at % s[2] == 0 && at / s[2] < cs[6]) {
                    idx[lane] = (int32_t)(at / s[2]);
                    reach[k2][h] |= (__mmask16)(1u << lane);
                }
            }
            place[k2][h] = _mm512_loadu_si512(idx);
        }
    const __mmask16 row_in = lanes(cs[6]), out0 = lanes(f2), out1 = lanes(f2 - 16);
    /* planes in the order of cols' strides (batch innermost for a transposed layout) */
    const int batch_inner = j->batch_stride < st[0];
    const Py_ssize_t outer = batch_inner ? cs[0] : j->batch, inner = batch_inner ? j->batch : cs[0];
    __mmask16 bad = 0;
    for (Py_ssize_t slow = 0; slow < outer; slow++)
    for (Py_ssize_t fast = 0; fast < inner; fast++) {
        const Py_ssize_t b = batch_inner ? fast : slow, p = batch_inner ? slow : fast;
        const char *taps = j->cols + b * j->batch_stride + p * st[0];
        float *out = j->out + (b * cs[0] + p) * f0 * f1 * f2;
        for (Py_ssize_t o0 = 0; o0 < f0; o0++)
        for (Py_ssize_t o1 = 0; o1 < f1; o1++, out += f2) {
            __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
            for (Py_ssize_t k0 = 0; k0 < cs[1]; k0++) {
                Py_ssize_t a0 = o0 - k0 * d[0];
                if (a0 < 0 || a0 % s[0] || a0 / s[0] >= cs[4])
                    continue;
                for (Py_ssize_t k1 = 0; k1 < cs[2]; k1++) {
                    Py_ssize_t a1 = o1 - k1 * d[1];
                    if (a1 < 0 || a1 % s[1] || a1 / s[1] >= cs[5])
                        continue;
                    const char *row = taps + k0 * st[1] + k1 * st[2] + (a0 / s[0]) * st[4] +
                                      (a1 / s[1]) * st[5];
                    for (Py_ssize_t k2 = 0; k2 < k2n; k2++) {
                        __m512 v = _mm512_maskz_loadu_ps(row_in, (const float *)(row + k2 * st[3]));
                        __m512i e = _mm512_and_si512(_mm512_castps_si512(v), expo);
                        bad |= _mm512_mask_cmpeq_epi32_mask(row_in, e, expo);
                        __m512 v0 = _mm512_permutexvar_ps(place[k2][0], v);
                        acc0 = _mm512_mask_mov_ps(acc0, reach[k2][0], tap_sum512(acc0, v0, quiet));
                        if (reach[k2][1]) {
                            __m512 v1 = _mm512_permutexvar_ps(place[k2][1], v);
                            acc1 = _mm512_mask_mov_ps(acc1, reach[k2][1],
                                                      tap_sum512(acc1, v1, quiet));
                        }
                    }
                }
            }
            _mm512_mask_storeu_ps(out, out0, acc0);
            if (out1)
                _mm512_mask_storeu_ps(out + 16, out1, acc1);
        }
    }
    return bad != 0;
}
#endif

static uint32_t scatter_plain(const struct scatter_job *j) { return scatter_loop(j, 0); }
#ifdef HAVE_GEMM
__attribute__((target("avx512f"))) static uint32_t scatter_wide(const struct scatter_job *j)
{
    return scatter_loop(j, 1);
}
#endif

PyDoc_STRVAR(window_gather_doc,
"window_gather(x, out, kernel, strides, dilations, pad_before) -> bool\n\n"
"x [N, C, S0, S1, S2] (any strides) -> out [N, C, K0, K1, K2, O0, O1, O2] (C-contiguous):\n"
"out = 0 + x[n, c, o * stride + k * dilation - pad_before], +0 outside x. True when every\n"
"value read was finite.");

static PyObject *window_gather(PyObject *self, PyObject *args)
{
    PyObject *xo, *oo;
    Py_ssize_t k[3], s[3], d[3], pad[3];
    if (!PyArg_ParseTuple(args, "OO(nnn)(nnn)(nnn)(nnn):window_gather", &xo, &oo, &k[0], &k[1],
                          &k[2], &s[0], &s[1], &s[2], &d[0], &d[1], &d[2], &pad[0], &pad[1],
                          &pad[2]))
        return NULL;
    if (positive3(k, 1, "kernel") < 0 || positive3(s, 1, "strides") < 0 ||
        positive3(d, 1, "dilations") < 0 || positive3(pad, 0, "pad_before") < 0)
        return NULL;
    Py_buffer vx, vo;
    if (window_buffers(xo, &vx, 5, "window_gather: x", oo, &vo, 8, "window_gather: out") < 0)
        return NULL;
    /* past the batch axis (same in both) */
    const Py_ssize_t *os = vo.shape + 1, *xs = vx.shape + 1, *st = vx.strides + 1;
    int ok = vo.shape[0] == vx.shape[0] && os[0] == xs[0];
    for (int i = 0; i < 3; i++) /* reads outside x are padding: any output size is safe */
        ok = ok && os[1 + i] == k[i];
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "window_gather: out does not fit x and the kernel");
        PyBuffer_Release(&vx);
        PyBuffer_Release(&vo);
        return NULL;
    }
    uint32_t bad;
    struct gather_job job = {vx.buf, vx.shape[0], vx.strides[0], xs, st, vo.buf, {os[4], os[5], os[6]}, {k[0], k[1], k[2]},
                             {s[0], s[1], s[2]}, {d[0], d[1], d[2]}, {pad[0], pad[1], pad[2]}};
    int wide = gemm_supported();
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_GEMM
    if (wide && (s[2] == 1 || s[2] == 2) && st[3] == 4 && os[6] <= 16)
        bad = gather_short_rows(&job);
    else if (wide)
        bad = gather_wide(&job);
    else
#endif
        bad = gather_plain(&job);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&vx);
    PyBuffer_Release(&vo);
    return PyBool_FromLong(!bad);
}

PyDoc_STRVAR(taps_scatter_doc,
"taps_scatter(cols, out, strides, dilations) -> bool\n\n"
"cols [N, C, K0, K1, K2, D0, D1, D2] (any strides) into out [N, C, F0, F1, F2]\n"
"(C-contiguous): "
"out = 0, then for each tap k in index order out[n, c, k * dilation + i * stride] +=\n"
"cols[n, c, k, i]. True when every value read was finite.");

static PyObject *taps_scatter(PyObject *self, PyObject *args)
{
    PyObject *co, *oo;
    Py_ssize_t s[3], d[3];
    if (!PyArg_ParseTuple(args, "OO(nnn)(nnn):taps_scatter", &co, &oo, &s[0], &s[1], &s[2],
                          &d[0], &d[1], &d[2]))
        return NULL;
    if (positive3(s, 1, "strides") < 0 || positive3(d, 1, "dilations") < 0)
        return NULL;
    Py_buffer vc, vo;
    if (window_buffers(co, &vc, 8, "taps_scatter: cols", oo, &vo, 5, "taps_scatter: out") < 0)
        return NULL;
    const Py_ssize_t *cs = vc.shape + 1, *os = vo.shape + 1, *st = vc.strides + 1;
    int ok = vc.shape[0] == vo.shape[0] && cs[0] == os[0];
    for (int i = 0; i < 3; i++)
        ok = ok && (cs[4 + i] == 0 || cs[1 + i] == 0 ||
                    (cs[1 + i] - 1) * d[i] + (cs[4 + i] - 1) * s[i] < os[1 + i]);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "taps_scatter: out does not fit cols");
        PyBuffer_Release(&vc);
        PyBuffer_Release(&vo);
        return NULL;
    }
    uint32_t bad;
    struct scatter_job job = {vc.buf, vc.shape[0], vc.strides[0], cs, st, vo.buf, {os[1], os[2], os[3]}, {s[0], s[1], s[2]},
                              {d[0], d[1], d[2]}};
    int wide = gemm_supported();
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_GEMM
    if (wide && st[6] == 4 && os[3] <= 32 && cs[6] <= 16 && cs[3] <= 16) {
        bad = scatter_short_rows(&job); /* writes every output: no zeros first */
    } else if (wide) {
        memset(vo.buf, 0, (size_t)vo.len);
        bad = scatter_wide(&job);
    } else
#endif
    {
        memset(vo.buf, 0, (size_t)vo.len);
        bad = scatter_plain(&job);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&vc);
    PyBuffer_Release(&vo);
    return PyBool_FromLong(!bad);
}

/* ---- window_max: max pooling ---- */

struct max_job {
    const char *x;
    Py_ssize_t batch, batch_stride;
    const Py_ssize_t *xs, *st; /* x past the batch axis: [C, S0, S1, S2], byte strides */
    float *out;
    Py_ssize_t o[3], k[3], s[3];
};

#ifdef HAVE_GEMM
/* numpy's maximum on 16 lanes: a NaN a, else a NaN b, else a if a > b, else b */
__attribute__((target("avx512f"))) static inline __m512 maximum512(__m512 a, __m512 b)
{
    __m512 r = _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), a);
    r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q), b);
    return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}

/* 16 values (fewer at a row's end: ``m``) from src, 1 or 2 floats apart */
__attribute__((target("avx512f"))) static inline __m512 load16(const float *src, int two,
                                                              Py_ssize_t left)
{
    if (!two)
        return _mm512_maskz_loadu_ps(lanes(left), src);
    const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                            28, 30);
    Py_ssize_t span = 2 * (left < 16 ? left : 16) - 1;
    __m512 lo = _mm512_maskz_loadu_ps(lanes(span), src);
    __m512 hi = _mm512_maskz_loadu_ps(lanes(span - 16), src + 16);
    return _mm512_permutex2var_ps(lo, evens, hi);
}
#endif

#ifdef HAVE_GEMM
/* One output row of window_max: 16 outputs at a time, their taps in index order. */
__attribute__((target("avx512f"))) static inline void max_row512(const char *corner,
    const Py_ssize_t *st, const Py_ssize_t *k, int two, float *out, Py_ssize_t o2)
{
    const Py_ssize_t step = two ? 8 : 4;
    for (Py_ssize_t i2 = 0; i2 < o2; i2 += 16) {
        __m512 acc = _mm512_setzero_ps();
        for (Py_ssize_t k0 = 0; k0 < k[0]; k0++)
        for (Py_ssize_t k1 = 0; k1 < k[1]; k1++)
        for (Py_ssize_t k2 = 0; k2 < k[2]; k2++) {
            const char *tap = corner + k0 * st[1] + k1 * st[2] + k2 * st[3];
            __m512 v = load16((const float *)(tap + i2 * step), two, o2 - i2);
            acc = (k0 | k1 | k2) ? maximum512(acc, v) : v;
        }
        _mm512_mask_storeu_ps(out + i2, lanes(o2 - i2), acc);
    }
}
#endif

static inline __attribute__((always_inline)) void max_loop(const struct max_job *j, int wide)
{
    const Py_ssize_t *xs = j->xs, *st = j->st, *k = j->k, *s = j->s;
    const Py_ssize_t o2 = j->o[2], step = s[2] * st[3];
    float *out = j->out;
    (void)wide;
    for (Py_ssize_t b = 0; b < j->batch; b++)
    for (Py_ssize_t p = 0; p < xs[0]; p++)
    for (Py_ssize_t i0 = 0; i0 < j->o[0]; i0++)
    for (Py_ssize_t i1 = 0; i1 < j->o[1]; i1++, out += o2) {
        const char *corner = j->x + b * j->batch_stride + p * st[0] + i0 * s[0] * st[1] +
                             i1 * s[1] * st[2];
#ifdef HAVE_GEMM
        if (wide && (step == 4 || step == 8)) {
            max_row512(corner, st, k, step == 8, out, o2);
            continue;
        }
#endif
        for (Py_ssize_t i2 = 0; i2 < o2; i2++) {
            float acc = 0.0f;
            for (Py_ssize_t k0 = 0; k0 < k[0]; k0++)
            for (Py_ssize_t k1 = 0; k1 < k[1]; k1++)
            for (Py_ssize_t k2 = 0; k2 < k[2]; k2++) {
                float v;
                memcpy(&v, corner + k0 * st[1] + k1 * st[2] + k2 * st[3] + i2 * step, sizeof v);
                acc = (k0 | k1 | k2) ? np_maximum(acc, v) : v;
            }
            out[i2] = acc;
        }
    }
}

static void max_plain(const struct max_job *j) { max_loop(j, 0); }
#ifdef HAVE_GEMM
__attribute__((target("avx512f"))) static void max_wide(const struct max_job *j)
{
    max_loop(j, 1);
}
#endif

PyDoc_STRVAR(window_max_doc,
"window_max(x, out, kernel, strides) -> None\n\n"
"x [N, C, S0, S1, S2] (any strides; padded already) -> out [N, C, O0, O1, O2]\n"
"(C-contiguous): each window's first tap, then numpy's maximum with each further tap in\n"
"index order.");

static PyObject *window_max(PyObject *self, PyObject *args)
{
    PyObject *xo, *oo;
    Py_ssize_t k[3], s[3];
    if (!PyArg_ParseTuple(args, "OO(nnn)(nnn):window_max", &xo, &oo, &k[0], &k[1], &k[2],
                          &s[0], &s[1], &s[2]))
        return NULL;
    if (positive3(k, 1, "kernel") < 0 || positive3(s, 1, "strides") < 0)
        return NULL;
    Py_buffer vx, vo;
    if (window_buffers(xo, &vx, 5, "window_max: x", oo, &vo, 5, "window_max: out") < 0)
        return NULL;
    const Py_ssize_t *xs = vx.shape + 1, *os = vo.shape + 1;
    int ok = vx.shape[0] == vo.shape[0] && xs[0] == os[0];
    for (int i = 0; i < 3; i++)
        ok = ok && (os[1 + i] == 0 || (os[1 + i] - 1) * s[i] + k[i] <= xs[1 + i]);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "window_max: out does not fit x and the kernel");
        PyBuffer_Release(&vx);
        PyBuffer_Release(&vo);
        return NULL;
    }
    struct max_job job = {vx.buf, vx.shape[0], vx.strides[0], xs, vx.strides + 1, vo.buf,
                          {os[1], os[2], os[3]}, {k[0], k[1], k[2]}, {s[0], s[1], s[2]}};
    int wide = gemm_supported();
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_GEMM
    if (wide)
        max_wide(&job);
    else
#endif
        max_plain(&job);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&vx);
    PyBuffer_Release(&vo);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(clamp_doc,
"clamp(x, out, lo, hi) -> None\n\n"
"out = numpy.minimum(numpy.maximum(x, lo), hi) for C-contiguous float32 buffers of one size\n"
"(out may be x); lo and hi are float32 values.");

#ifdef HAVE_GEMM
/* numpy's minimum on 16 lanes: a NaN a, else a NaN b, else a if a < b, else b */
__attribute__((target("avx512f"))) static inline __m512 minimum512(__m512 a, __m512 b)
{
    __m512 r = _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), a);
    r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q), b);
    return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}

__attribute__((target("avx512f"))) static void clamp_wide(const float *x, float *out,
                                                          Py_ssize_t n, float lo, float hi)
{
    const __m512 l = _mm512_set1_ps(lo), h = _mm512_set1_ps(hi);
    for (Py_ssize_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        _mm512_mask_storeu_ps(out + i, m, minimum512(maximum512(v, l), h));
    }
}
#endif

static void clamp_block(const float *restrict x, float *restrict out, Py_ssize_t n, float lo,
                        float hi)
{
#ifdef HAVE_GEMM
    if (gemm_supported()) {
        clamp_wide(x, out, n, lo, hi);
        return;
    }
#endif
    for (Py_ssize_t i = 0; i < n; i++)
        out[i] = np_minimum(np_maximum(x[i], lo), hi);
}

static PyObject *clamp(PyObject *self, PyObject *args)
{
    PyObject *xo, *oo;
    float lo, hi;
    if (!PyArg_ParseTuple(args, "OOff:clamp", &xo, &oo, &lo, &hi))
        return NULL;
    Py_buffer vx, vo;
    if (float_buffer(xo, &vx, -1, 0, "clamp: x") < 0)
        return NULL;
    if (float_buffer(oo, &vo, vx.len / 4, 1, "clamp: out") < 0) {
        PyBuffer_Release(&vx);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (vx.buf == vo.buf) { /* in place: restrict does not hold, copy-free blocks do */
        float block[1024];
        for (Py_ssize_t i = 0; i < vx.len / 4; i += 1024) {
            Py_ssize_t m = vx.len / 4 - i < 1024 ? vx.len / 4 - i : 1024;
            clamp_block((const float *)vx.buf + i, block, m, lo, hi);
            memcpy((float *)vo.buf + i, block, (size_t)m * 4);
        }
    } else {
        clamp_block(vx.buf, vo.buf, vx.len / 4, lo, hi);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&vx);
    PyBuffer_Release(&vo);
    Py_RETURN_NONE;
}

/* ---- end of window kernels --------------------------------------------------------------- */

/* ---- direct convolution ------------------------------------------------------------------
 * conv_rows: a 2-D convolution (groups, strides, dilations, zero padding) without the im2col
 * matrix. For each output row and each 64-wide tile of it, the tile's windows are a [K, 64]
 * panel (K = C/groups * KH * KW in (c, ky, kx) order, zeros outside x) whose rows are read
 * from x in place where they lie inside it (column stride 1) and gathered otherwise, and
 * the GEMM's register blocks multiply the group's weight rows by it, in blocks of KC values
 * of k whose sums resume from the output. Every output is then
 * gemm()'s sum over the im2col matrix: one FMA chain over k in order, from +0 (a -0 read as
 * is, where window_gather writes 0 + x, changes no sum: the chain never holds -0), whatever
 * the tiling and whichever rows a call covers, so the caller may split the rows between
 * threads. A depthwise 3x3 over 16 x 368 x 1184 takes ~15 ms where im2col and a batched
 * matrix-vector product took ~300. */
#ifdef HAVE_GEMM
typedef struct {
    const float *x, *w;
    float *out;
    Py_ssize_t c, h, wd, co, groups, kh, kw, sy, sx, dy, dx, py, px, oh, ow;
} conv_job;

/* The t in [lo, hi) of a panel row whose reads x[iy][(ox0 + t) * sx + off] fall inside
 * the row (0 <= index < wd); the others are padding. */
static void conv_range(Py_ssize_t wd, Py_ssize_t ox0, Py_ssize_t sx, Py_ssize_t off,
                       Py_ssize_t cols, Py_ssize_t *lo_out, Py_ssize_t *hi_out)
{
    Py_ssize_t lo = 0, hi = cols;
    if (off < 0) {
        Py_ssize_t first = (-off + sx - 1) / sx - ox0;
        lo = first > 0 ? first : 0;
    }
    Py_ssize_t last = wd - 1 - off; /* (ox0 + t) * sx <= last */
    if (last < 0)
        hi = 0;
    else if (last / sx - ox0 + 1 < hi)
        hi = last / sx - ox0 + 1;
    if (lo > cols)
        lo = cols;
    if (hi < lo)
        hi = lo;
    *lo_out = lo;
    *hi_out = hi;
}

#define CONV_KW_MAX 64 /* taps of a kernel row whose ranges are worked out once per tile */

/* Lanes [a, b) of a 16-lane vector (clipped to it). */
static inline __mmask16 conv_lanes(Py_ssize_t a, Py_ssize_t b)
{
    if (a < 0)
        a = 0;
    if (b > 16)
        b = 16;
    return b <= a ? (__mmask16)0 : (__mmask16)(((1u << (b - a)) - 1u) << a);
}

/* A depthwise convolution (one input and one output channel per group) of column stride 1
 * or 2:
 * no panel, each tap's inputs loaded straight from the input row, the lanes outside it
 * loaded as zeros, so every output is the panel's FMA chain (padding taps included: w * 0
 * is added as there), 64 outputs of DW_ROWS output rows at a time. The input rows are
 * walked top to bottom and each loaded vector is multiplied into every output row whose
 * window holds it, so each output still takes its taps in (ky, kx) order, while a load
 * serves up to DW_ROWS FMAs (the kernel was bound by its loads and lane masks: a 5x5 over
 * 128 x 100 x 76 took 3.6 ms). */
#define DW_ROWS 4
#define DW_ZERO(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = c##i##0, c##i##2 = c##i##0, \
                          c##i##3 = c##i##0;
#define DW_FMA(i)                                                                               \
    if (ky##i >= 0) {                                                                           \
        const __m512 w = _mm512_set1_ps(wg[ky##i * j->kw + kx]);                               \
        c##i##0 = _mm512_fmadd_ps(w, v0, c##i##0);                                              \
        if (vectors > 1)                                                                        \
            c##i##1 = _mm512_fmadd_ps(w, v1, c##i##1);                                          \
        if (vectors > 2)                                                                        \
            c##i##2 = _mm512_fmadd_ps(w, v2, c##i##2);                                          \
        if (vectors > 3)                                                                        \
            c##i##3 = _mm512_fmadd_ps(w, v3, c##i##3);                                          \
    }
#define DW_STORE(i)                                                                             \
    if (i < q) {                                                                                \
        float *o = out + (i) * j->ow + ox0;                                                     \
        _mm512_mask_storeu_ps(o, conv_lanes(0, cols), c##i##0);                                 \
        _mm512_mask_storeu_ps(o + 16, conv_lanes(0, cols - 16), c##i##1);                       \
        _mm512_mask_storeu_ps(o + 32, conv_lanes(0, cols - 32), c##i##2);                       \
        _mm512_mask_storeu_ps(o + 48, conv_lanes(0, cols - 48), c##i##3);                       \
    }

/* The 16 even values of in[0:32], each half's lanes outside ``a`` / ``b`` read as zeros. */
__attribute__((target("avx512f"))) static inline __m512 dw_evens(const float *in, __mmask16 a,
                                                                 __mmask16 b)
{
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                          2, 0);
    return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(a, in), even,
                                  _mm512_maskz_loadu_ps(b, in + 16));
}

/* The tap row of output row ``i`` of a group of ``q`` that reads input row ``d`` of the
 * group's span, or -1. */
static inline Py_ssize_t dw_tap(const conv_job *j, Py_ssize_t d, Py_ssize_t i, Py_ssize_t q)
{
    const Py_ssize_t t = d - i * j->sy;
    if (i >= q || t < 0 || t % j->dy)
        return -1;
    return t / j->dy < j->kh ? t / j->dy : -1;
}

/* One 64-wide tile of conv_depthwise_rows' output rows (see there); ``vectors`` and
 * ``stride1`` are constants where it is inlined for full tiles of stride 1. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void dw_tile(
    const conv_job *j, const float *xg, const float *wg, float *out, Py_ssize_t ox0,
    Py_ssize_t cols, Py_ssize_t top, Py_ssize_t span, const Py_ssize_t *taps, int finite,
    Py_ssize_t q, __mmask16 (*lanes)[8], const int vectors, const int stride1)
{
    const __mmask16 none[8] = {0};
    DW_ZERO(0) DW_ZERO(1) DW_ZERO(2) DW_ZERO(3)
    for (Py_ssize_t d = 0; d < span; d++) {
        const Py_ssize_t *tap = taps + d * DW_ROWS;
        const Py_ssize_t ky0 = tap[0], ky1 = tap[1], ky2 = tap[2], ky3 = tap[3];
        if (ky0 < 0 && ky1 < 0 && ky2 < 0 && ky3 < 0)
            continue;
        const Py_ssize_t iy = top + d;
        const int inside = iy >= 0 && iy < j->h;
        if (!inside && finite)
            continue;
        const float *src = xg + (inside ? iy : 0) * j->wd;
        for (Py_ssize_t kx = 0; kx < j->kw; kx++) {
            const Py_ssize_t start = ox0 * j->sx + kx * j->dx - j->px; /* t = 0 reads */
            const float *in = src + start;
            /* the lanes inside the row (none for a row outside x) */
            __mmask16 wide_kx[8];
            const __mmask16 *m = !inside ? none : kx < CONV_KW_MAX ? lanes[kx] : wide_kx;
            if (inside && kx >= CONV_KW_MAX) {
                /* the inputs start + i inside the row: i in [lo, hi), and the
                 * ones the tile's outputs read (i = t * sx for t < cols) */
                Py_ssize_t lo = -start, hi = j->wd - start;
                if (hi > (cols - 1) * j->sx + 1)
                    hi = (cols - 1) * j->sx + 1;
                for (int h = 0; h < 8; h++)
                    wide_kx[h] = conv_lanes(lo - 16 * h, hi - 16 * h);
            }
            __m512 v0, v1 = _mm512_setzero_ps(), v2 = v1, v3 = v1;
            /* vectors past the tile's last output are skipped (narrow rows) */
            if (stride1) {
                v0 = _mm512_maskz_loadu_ps(m[0], in);
                if (vectors > 1)
                    v1 = _mm512_maskz_loadu_ps(m[1], in + 16);
                if (vectors > 2)
                    v2 = _mm512_maskz_loadu_ps(m[2], in + 32);
                if (vectors > 3)
                    v3 = _mm512_maskz_loadu_ps(m[3], in + 48);
            } else { /* stride 2: output t reads input 2t, the even lanes of 32 */
                v0 = dw_evens(in, m[0], m[1]);
                if (vectors > 1)
                    v1 = dw_evens(in + 32, m[2], m[3]);
                if (vectors > 2)
                    v2 = dw_evens(in + 64, m[4], m[5]);
                if (vectors > 3)
                    v3 = dw_evens(in + 96, m[6], m[7]);
            }
            DW_FMA(0) DW_FMA(1) DW_FMA(2) DW_FMA(3)
        }
    }
    DW_STORE(0) DW_STORE(1) DW_STORE(2) DW_STORE(3)
}

/* Returns -1 when its table cannot be allocated (nothing computed), else 0. */
__attribute__((target("avx512f"))) static int conv_depthwise_rows(const conv_job *j,
    Py_ssize_t row0, Py_ssize_t row1, Py_ssize_t co0, Py_ssize_t co1)
{
    /* the tap rows of each input row of a group's span, worked out once per group size */
    const Py_ssize_t most = (DW_ROWS - 1) * j->sy + (j->kh - 1) * j->dy + 1;
    Py_ssize_t *taps = malloc((size_t)most * DW_ROWS * sizeof *taps), made = 0;
    if (taps == NULL)
        return -1;
    for (Py_ssize_t r = row0; r < row1;) {
        const Py_ssize_t n = r / j->oh, oy = r % j->oh;
        Py_ssize_t q = row1 - r < DW_ROWS ? row1 - r : DW_ROWS;
        if (q > j->oh - oy)
            q = j->oh - oy;
        const Py_ssize_t top = oy * j->sy - j->py, span = (q - 1) * j->sy + (j->kh - 1) * j->dy + 1;
        if (made != q) {
            for (Py_ssize_t d = 0; d < span; d++)
                for (Py_ssize_t i = 0; i < DW_ROWS; i++)
                    taps[d * DW_ROWS + i] = dw_tap(j, d, i, q);
            made = q;
        }
        for (Py_ssize_t g = co0; g < co1; g++) { /* a group is an output channel */
            const float *xg = j->x + (n * j->c + g) * j->h * j->wd, *wg = j->w + g * j->kh * j->kw;
            /* with finite weights a row above or below x adds w * 0 = +-0 to sums that are
             * never -0 (they start at +0, and an FMA gives -0 only from two -0s), so it
             * changes no bit and is skipped; an infinite or NaN weight makes it NaN */
            int finite = 1;
            for (Py_ssize_t t = 0; t < j->kh * j->kw; t++)
                finite &= wg[t] - wg[t] == 0.0f;
            float *out = j->out + ((n * j->co + g) * j->oh + oy) * j->ow;
            for (Py_ssize_t ox0 = 0; ox0 < j->ow; ox0 += COLS) {
                const Py_ssize_t cols = j->ow - ox0 < COLS ? j->ow - ox0 : COLS;
                const int vectors = (int)((cols + 15) / 16);
                /* each tap column's lanes inside the row, the same for every row: vector v
                 * reads lanes 16v (stride 1) or 32v and 32v + 16 (stride 2, two halves) */
                __mmask16 lanes[CONV_KW_MAX][8];
                for (Py_ssize_t kx = 0; kx < j->kw && kx < CONV_KW_MAX; kx++) {
                    const Py_ssize_t start = ox0 * j->sx + kx * j->dx - j->px;
                    Py_ssize_t lo = -start, hi = j->wd - start;
                    if (hi > (cols - 1) * j->sx + 1)
                        hi = (cols - 1) * j->sx + 1;
                    for (int h = 0; h < 8; h++)
                        lanes[kx][h] = conv_lanes(lo - 16 * h, hi - 16 * h);
                }
                /* full tiles of stride 1 (most of a feature map) without the branches on
                 * the vector count and the stride */
                if (j->sx == 1 && vectors == 4)
                    dw_tile(j, xg, wg, out, ox0, cols, top, span, taps, finite, q, lanes, 4, 1);
                else if (j->sx == 1)
                    dw_tile(j, xg, wg, out, ox0, cols, top, span, taps, finite, q, lanes, vectors, 1);
                else
                    dw_tile(j, xg, wg, out, ox0, cols, top, span, taps, finite, q, lanes, vectors, 0);
            }
        }
        r += q;
    }
    free(taps);
    return 0;
}

/* The GEMM's register blocks (block6, block1) with each row k of the panel at its own address
 * Bp[k] (a row of x itself, or of the gathered panel): the same FMA chains. */
__attribute__((target("avx512f"))) static void block6p(const float *A, long lda,
    const float *const *Bp, float *C, long ldc, long K, const __mmask16 *mask, int resume)
{
    MASKS
    ZERO(0) ZERO(1) ZERO(2) ZERO(3) ZERO(4) ZERO(5)
    if (resume) {
        RESUME(0) RESUME(1) RESUME(2) RESUME(3) RESUME(4) RESUME(5)
    }
    for (long k = 0; k < K; k++) {
        const float *b = Bp[k];
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);
        __m512 b2 = _mm512_maskz_loadu_ps(m2, b + 32), b3 = _mm512_maskz_loadu_ps(m3, b + 48);
        FMA(0) FMA(1) FMA(2) FMA(3) FMA(4) FMA(5)
    }
    STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5)
}

__attribute__((target("avx512f"))) static void block1p(const float *A, long lda,
    const float *const *Bp, float *C, long ldc, long K, const __mmask16 *mask, int resume)
{
    MASKS
    ZERO(0)
    if (resume) {
        RESUME(0)
    }
    for (long k = 0; k < K; k++) {
        const float *b = Bp[k];
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);
        __m512 b2 = _mm512_maskz_loadu_ps(m2, b + 32), b3 = _mm512_maskz_loadu_ps(m3, b + 48);
        FMA(0)
    }
    STORE(0)
    (void)lda;
}

/* Eight rows of a panel at most 16 columns wide (``mask``): one vector per row, where
 * block6 would multiply four, three of them masked off. The same FMA chain per output. */
__attribute__((target("avx512f"))) static void block8_narrowp(const float *A, long lda,
    const float *const *Bp, float *C, long ldc, long K, __mmask16 mask, int resume)
{
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
           c7 = c0;
    if (resume) {
        c0 = _mm512_maskz_loadu_ps(mask, C);
        c1 = _mm512_maskz_loadu_ps(mask, C + ldc);
        c2 = _mm512_maskz_loadu_ps(mask, C + 2 * ldc);
        c3 = _mm512_maskz_loadu_ps(mask, C + 3 * ldc);
        c4 = _mm512_maskz_loadu_ps(mask, C + 4 * ldc);
        c5 = _mm512_maskz_loadu_ps(mask, C + 5 * ldc);
        c6 = _mm512_maskz_loadu_ps(mask, C + 6 * ldc);
        c7 = _mm512_maskz_loadu_ps(mask, C + 7 * ldc);
    }
    for (long k = 0; k < K; k++) {
        __m512 b = _mm512_maskz_loadu_ps(mask, Bp[k]);
        c0 = _mm512_fmadd_ps(_mm512_set1_ps(A[k]), b, c0);
        c1 = _mm512_fmadd_ps(_mm512_set1_ps(A[lda + k]), b, c1);
        c2 = _mm512_fmadd_ps(_mm512_set1_ps(A[2 * lda + k]), b, c2);
        c3 = _mm512_fmadd_ps(_mm512_set1_ps(A[3 * lda + k]), b, c3);
        c4 = _mm512_fmadd_ps(_mm512_set1_ps(A[4 * lda + k]), b, c4);
        c5 = _mm512_fmadd_ps(_mm512_set1_ps(A[5 * lda + k]), b, c5);
        c6 = _mm512_fmadd_ps(_mm512_set1_ps(A[6 * lda + k]), b, c6);
        c7 = _mm512_fmadd_ps(_mm512_set1_ps(A[7 * lda + k]), b, c7);
    }
    _mm512_mask_storeu_ps(C, mask, c0);
    _mm512_mask_storeu_ps(C + ldc, mask, c1);
    _mm512_mask_storeu_ps(C + 2 * ldc, mask, c2);
    _mm512_mask_storeu_ps(C + 3 * ldc, mask, c3);
    _mm512_mask_storeu_ps(C + 4 * ldc, mask, c4);
    _mm512_mask_storeu_ps(C + 5 * ldc, mask, c5);
    _mm512_mask_storeu_ps(C + 6 * ldc, mask, c6);
    _mm512_mask_storeu_ps(C + 7 * ldc, mask, c7);
}

/* The panel of output row oy's tile [ox0, ox0 + cols) for group input ``xg`` of ``cg``
 * channels, as one pointer per row k = (c, ky, kx) in ``bp``: with column stride 1, a tap
 * whose reads all fall inside x points at x's row where it is (no copy: the kx taps of one
 * row are the same memory shifted by one), a row above or below x points at ``zeros``, and
 * the rest (padding at the row's ends, other strides) is gathered into ``panel`` (zeros
 * outside x). Only where a row is read from changes, so the sums are the same. */
__attribute__((target("avx512f"))) static void conv_rows_panel(const conv_job *j,
    const float *xg, Py_ssize_t cg, Py_ssize_t oy, Py_ssize_t ox0, Py_ssize_t cols, float *panel,
    const float **bp, const float *zeros)
{
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                          2, 0);
    /* the inside range of each tap column, the same for every channel and row */
    Py_ssize_t lo[CONV_KW_MAX], hi[CONV_KW_MAX];
    for (Py_ssize_t kx = 0; kx < j->kw && kx < CONV_KW_MAX; kx++)
        conv_range(j->wd, ox0, j->sx, kx * j->dx - j->px, cols, &lo[kx], &hi[kx]);
    float *row = panel;
    const float **ptr = bp;
    for (Py_ssize_t ci = 0; ci < cg; ci++)
        for (Py_ssize_t ky = 0; ky < j->kh; ky++) {
            const Py_ssize_t iy = oy * j->sy - j->py + ky * j->dy;
            const float *src = xg + (ci * j->h + iy) * j->wd;
            for (Py_ssize_t kx = 0; kx < j->kw; kx++, row += COLS, ptr++) {
                if (iy < 0 || iy >= j->h) {
                    *ptr = zeros;
                    continue;
                }
                Py_ssize_t a, b; /* wider kernels: worked out per row */
                if (kx < CONV_KW_MAX)
                    a = lo[kx], b = hi[kx];
                else
                    conv_range(j->wd, ox0, j->sx, kx * j->dx - j->px, cols, &a, &b);
                const Py_ssize_t base = ox0 * j->sx + kx * j->dx - j->px;
                if (j->sx == 1 && a == 0 && b == cols) {
                    *ptr = src + base;
                    continue;
                }
                *ptr = row;
                for (Py_ssize_t t = 0; t < a; t++)
                    row[t] = 0.0f;
                if (j->sx == 1) {
                    const float *in = src + base;
                    for (Py_ssize_t t = a; t < b; t++)
                        row[t] = in[t];
                } else if (j->sx == 2) {
                    /* 16 outputs from the even values of 31 inputs (a stem conv's windows:
                     * PicoDet's 3x3 stride-2 first layer was bound by this copy) */
                    Py_ssize_t t = a;
                    for (; t + 16 <= b; t += 16) {
                        const float *in = src + base + 2 * t;
                        _mm512_storeu_ps(row + t, _mm512_permutex2var_ps(
                            _mm512_loadu_ps(in), even, _mm512_maskz_loadu_ps(0x7FFF, in + 16)));
                    }
                    for (; t < b; t++)
                        row[t] = src[base + 2 * t];
                } else {
                    for (Py_ssize_t t = a; t < b; t++)
                        row[t] = src[base + t * j->sx];
                }
                for (Py_ssize_t t = b; t < cols; t++)
                    row[t] = 0.0f;
            }
        }
}

/* Output channels [co0, co1) of rows [row0, row1), each tile's panel rows as pointers
 * (conv_rows_panel). */
static void conv_rows_run(const conv_job *j, Py_ssize_t row0, Py_ssize_t row1, Py_ssize_t co0,
                          Py_ssize_t co1, float *panel, const float **bp, const float *zeros)
{
    const Py_ssize_t cg = j->c / j->groups, og = j->co / j->groups;
    const Py_ssize_t K = cg * j->kh * j->kw, plane = j->oh * j->ow;
    for (Py_ssize_t r = row0; r < row1; r++) {
        const Py_ssize_t n = r / j->oh, oy = r % j->oh;
        for (Py_ssize_t g = 0; g < j->groups; g++) {
            /* this group's output channels inside [co0, co1) */
            const Py_ssize_t first = co0 > g * og ? co0 - g * og : 0;
            const Py_ssize_t last = co1 < (g + 1) * og ? co1 - g * og : og;
            if (first >= last)
                continue;
            const float *xg = j->x + (n * j->c + g * cg) * j->h * j->wd;
            const float *A = j->w + g * og * K;
            float *out = j->out + ((n * j->co + g * og) * j->oh + oy) * j->ow;
            for (Py_ssize_t ox0 = 0; ox0 < j->ow; ox0 += COLS) {
                const Py_ssize_t cols = j->ow - ox0 < COLS ? j->ow - ox0 : COLS;
                conv_rows_panel(j, xg, cg, oy, ox0, cols, panel, bp, zeros);
                __mmask16 mask[4];
                for (int v = 0; v < 4; v++) {
                    long left = cols - 16 * v;
                    mask[v] = left >= 16 ? (__mmask16)0xFFFF
                            : left <= 0  ? (__mmask16)0
                                         : (__mmask16)((1u << left) - 1u);
                }
                for (Py_ssize_t k0 = 0; k0 < K; k0 += KC) {
                    const Py_ssize_t kc = K - k0 < KC ? K - k0 : KC;
                    for (Py_ssize_t o = first; o < last;) {
                        int rows = last - o >= ROWS ? ROWS : 1;
                        if (cols <= 16 && last - o >= 8) {
                            block8_narrowp(A + o * K + k0, K, bp + k0, out + o * plane + ox0,
                                           plane, kc, mask[0], k0 > 0);
                            rows = 8;
                        } else if (rows == ROWS)
                            block6p(A + o * K + k0, K, bp + k0, out + o * plane + ox0, plane, kc,
                                    mask, k0 > 0);
                        else
                            block1p(A + o * K + k0, K, bp + k0, out + o * plane + ox0, plane, kc,
                                    mask, k0 > 0);
                        o += rows;
                    }
                }
            }
        }
    }
}

/* conv_rows with ``transposed``: one group, the weights as wt [K, C_out], for output rows a few
 * values wide (a streaming model's convolutions over 1 to 8 positions), where the usual
 * vectors run along the row and use a quarter of their lanes: here they run along the output
 * channels, up to four positions at a time. The panel is conv_rows_panel's and each output the
 * same FMA chain over k in order from +0, so the bits are the same.
 * ``P`` positions by ``V`` vectors of channels, constants where it is inlined: only the FMAs
 * whose sums are stored run (a full 4 x 4 block spent up to 15 of every 16 on the discarded
 * lanes of one position or of a 129th channel); one or two positions take up to 8 vectors,
 * so that at least 8 independent FMA chains hide the FMA's latency; the weights load
 * unmasked except a last partial vector (``TAIL``: a masked load costs more here). */
#define NARROW_WIDE 8 /* channel vectors of a block of one or two positions */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
conv_narrow_block(const float **bp, Py_ssize_t t0, const float *wt, Py_ssize_t K, Py_ssize_t co,
                  Py_ssize_t o0, Py_ssize_t o1, float *out, Py_ssize_t plane, const int P,
                  const int V, const int TAIL)
{
    const __mmask16 last = conv_lanes(0, o1 - o0 - 16 * (V - 1));
    __m512 acc[4][NARROW_WIDE];
    for (int t = 0; t < P; t++)
        for (int v = 0; v < V; v++)
            acc[t][v] = _mm512_setzero_ps();
    for (Py_ssize_t k = 0; k < K; k++) {
        const float *w = wt + k * co + o0, *p = bp[k] + t0;
        __m512 wv[NARROW_WIDE];
        for (int v = 0; v < V; v++)
            wv[v] = TAIL && v == V - 1 ? _mm512_maskz_loadu_ps(last, w + 16 * v)
                                       : _mm512_loadu_ps(w + 16 * v);
        for (int t = 0; t < P; t++) {
            const __m512 x = _mm512_set1_ps(p[t]);
            for (int v = 0; v < V; v++)
                acc[t][v] = _mm512_fmadd_ps(x, wv[v], acc[t][v]);
        }
    }
    /* lanes are output channels: each position's values go down a column of out */
    const __m512i down = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
                                                             5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)plane));
    for (int t = 0; t < P; t++)
        for (int v = 0; v < V; v++)
            _mm512_mask_i32scatter_ps(out + (o0 + 16 * v) * plane + t0 + t,
                                      v == V - 1 ? last : (__mmask16)0xFFFF, down, acc[t][v], 4);
}

#define NARROW_CALL(P, V)                                                                       \
    (tail ? conv_narrow_block(bp, t0, wt, K, co, o0, o1, out, plane, P, V, 1)                   \
          : conv_narrow_block(bp, t0, wt, K, co, o0, o1, out, plane, P, V, 0))
#define NARROW_CASE(P, V) case V: NARROW_CALL(P, V); break;

/* One block of ``ncols`` (1 to 4) positions by channels [o0, o1) (at most 16 * NARROW_WIDE
 * for one or two positions, 64 for more). */
__attribute__((target("avx512f"))) static void conv_narrow_tile(const float **bp,
    Py_ssize_t t0, const float *wt, Py_ssize_t K, Py_ssize_t co, Py_ssize_t o0, Py_ssize_t o1,
    float *out, Py_ssize_t plane, Py_ssize_t ncols)
{
    const Py_ssize_t V = (o1 - o0 + 15) / 16;
    const int tail = (o1 - o0) % 16 != 0;
    if (ncols == 1) {
        switch (V) {
            NARROW_CASE(1, 1) NARROW_CASE(1, 2) NARROW_CASE(1, 3) NARROW_CASE(1, 4)
            NARROW_CASE(1, 5) NARROW_CASE(1, 6) NARROW_CASE(1, 7) default: NARROW_CALL(1, 8);
        }
    } else if (ncols == 2) {
        switch (V) {
            NARROW_CASE(2, 1) NARROW_CASE(2, 2) NARROW_CASE(2, 3) NARROW_CASE(2, 4)
            NARROW_CASE(2, 5) NARROW_CASE(2, 6) NARROW_CASE(2, 7) default: NARROW_CALL(2, 8);
        }
    } else if (ncols == 3) {
        switch (V) {
            NARROW_CASE(3, 1) NARROW_CASE(3, 2) NARROW_CASE(3, 3) default: NARROW_CALL(3, 4);
        }
    } else {
        switch (V) {
            NARROW_CASE(4, 1) NARROW_CASE(4, 2) NARROW_CASE(4, 3) default: NARROW_CALL(4, 4);
        }
    }
}
#undef NARROW_CASE
#undef NARROW_CALL

/* conv_rows_panel's panel (the same rows: x's values inside it, zeros outside) for a narrow
 * tile, worked out per tap (ky, kx) and then walked over the channels: where a tap reads from
 * and which of its columns are padding are the same for every channel, and the per-row
 * work of conv_rows_panel (ranges, branches, a memset call per padded row) cost more than
 * the FMAs of a few positions. Gathered rows are ``cols`` floats apart. */
static void conv_narrow_panel(const conv_job *j, const float *xg, Py_ssize_t oy, Py_ssize_t ox0,
                              Py_ssize_t cols, float *panel, const float **bp, const float *zeros)
{
    const Py_ssize_t taps = j->kh * j->kw, plane = j->h * j->wd;
    for (Py_ssize_t ky = 0; ky < j->kh; ky++) {
        const Py_ssize_t iy = oy * j->sy - j->py + ky * j->dy;
        for (Py_ssize_t kx = 0; kx < j->kw; kx++) {
            const Py_ssize_t tap = ky * j->kw + kx;
            if (iy < 0 || iy >= j->h) {
                for (Py_ssize_t ci = 0; ci < j->c; ci++)
                    bp[ci * taps + tap] = zeros;
                continue;
            }
            Py_ssize_t a, b;
            conv_range(j->wd, ox0, j->sx, kx * j->dx - j->px, cols, &a, &b);
            const Py_ssize_t base = ox0 * j->sx + kx * j->dx - j->px;
            const float *src = xg + iy * j->wd;
            if (j->sx == 1 && a == 0 && b == cols) {
                for (Py_ssize_t ci = 0; ci < j->c; ci++)
                    bp[ci * taps + tap] = src + ci * plane + base;
                continue;
            }
            for (Py_ssize_t ci = 0; ci < j->c; ci++) {
                float *row = panel + (ci * taps + tap) * cols;
                const float *in = src + ci * plane;
                bp[ci * taps + tap] = row;
                for (Py_ssize_t t = 0; t < cols; t++)
                    row[t] = t >= a && t < b ? in[base + t * j->sx] : 0.0f;
            }
        }
    }
}

static void conv_narrow_run(const conv_job *j, Py_ssize_t row0, Py_ssize_t row1, Py_ssize_t co0,
                            Py_ssize_t co1, float *panel, const float **bp, const float *zeros)
{
    const Py_ssize_t K = j->c * j->kh * j->kw, plane = j->oh * j->ow;
    for (Py_ssize_t r = row0; r < row1; r++) {
        const Py_ssize_t n = r / j->oh, oy = r % j->oh;
        const float *xg = j->x + n * j->c * j->h * j->wd;
        float *out = j->out + (n * j->co * j->oh + oy) * j->ow;
        for (Py_ssize_t ox0 = 0; ox0 < j->ow; ox0 += COLS) {
            const Py_ssize_t cols = j->ow - ox0 < COLS ? j->ow - ox0 : COLS;
            conv_narrow_panel(j, xg, oy, ox0, cols, panel, bp, zeros);
            for (Py_ssize_t t0 = 0; t0 < cols; t0 += 4) {
                const Py_ssize_t ncols = cols - t0 < 4 ? cols - t0 : 4;
                const Py_ssize_t width = ncols <= 2 ? 16 * NARROW_WIDE : 64;
                for (Py_ssize_t o0 = co0; o0 < co1; o0 += width)
                    conv_narrow_tile(bp, t0, j->w, K, j->co, o0,
                                     o0 + width < co1 ? o0 + width : co1, out + ox0, plane, ncols);
            }
        }
    }
}
#undef NARROW_WIDE
#endif

/* A C-contiguous float32 buffer of ``ndim`` dimensions (writable if asked). */
static int conv_buffer(PyObject *obj, Py_buffer *view, int ndim, int writable, const char *what)
{
    if (window_buffer(obj, view, ndim, writable, what) < 0)
        return -1;
    if (!PyBuffer_IsContiguous(view, 'C')) {
        PyErr_Format(PyExc_ValueError, "%s must be C-contiguous", what);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(conv_rows_doc,
"conv_rows(x, w, out, groups, kernel, strides, dilations, pad_before, row0, row1, co0=0,\n"
"          co1=C_out, transposed=False, round=False) -> None\n\n"
"x [N, C, H, W], w [C_out, C/groups * KH * KW], out [N, C_out, OH, OW], all C-contiguous\n"
"float32: out[n, o, oy, ox] = sum over (c, ky, kx) of w * x[n, c, oy * sy + ky * dy - py,\n"
"ox * sx + kx * dx - px] (0 outside x), as gemm() sums (one FMA chain over k in order),\n"
"for the output rows (n * OH + oy) in [row0, row1) and output channels [co0, co1).\n"
"transposed: one group and w given as its transpose [C * KH * KW, C_out], for rows a few\n"
"values wide (vectors along the output channels; the same bits). round: those outputs then\n"
"rounded to fp16 values (round_in_place's bits). Raises RuntimeError where\n"
"gemm_available() is False.");

static PyObject *conv_rows(PyObject *self, PyObject *args)
{
    PyObject *xo, *wo, *oo;
    Py_ssize_t groups, kh, kw, sy, sx, dy, dx, py, px, row0, row1, co0 = 0, co1 = -1;
    int transposed = 0, round = 0;
    if (!PyArg_ParseTuple(args, "OOOn(nn)(nn)(nn)(nn)nn|nnpp:conv_rows", &xo, &wo, &oo, &groups,
                          &kh, &kw, &sy, &sx, &dy, &dx, &py, &px, &row0, &row1, &co0, &co1,
                          &transposed, &round))
        return NULL;
    if (!gemm_supported()) {
        PyErr_SetString(PyExc_RuntimeError, "conv_rows needs x86-64 with AVX-512F");
        return NULL;
    }
    Py_buffer vx, vw, vo;
    if (conv_buffer(xo, &vx, 4, 0, "conv_rows: x") < 0)
        return NULL;
    if (conv_buffer(wo, &vw, 2, 0, "conv_rows: w") < 0) {
        PyBuffer_Release(&vx);
        return NULL;
    }
    if (conv_buffer(oo, &vo, 4, 1, "conv_rows: out") < 0) {
        PyBuffer_Release(&vx);
        PyBuffer_Release(&vw);
        return NULL;
    }
    const Py_ssize_t n = vx.shape[0], c = vx.shape[1], co = vo.shape[1];
    /* w's rows and columns: [C_out, K], or [K, C_out] transposed (one group) */
    const Py_ssize_t w_out = transposed ? vw.shape[1] : vw.shape[0];
    const Py_ssize_t w_k = transposed ? vw.shape[0] : vw.shape[1];
    int ok = groups >= 1 && kh >= 1 && kw >= 1 && sy >= 1 && sx >= 1 && dy >= 1 && dx >= 1 &&
             py >= 0 && px >= 0 && vo.shape[0] == n && c % groups == 0 && co % groups == 0 &&
             w_out == co && w_k == c / groups * kh * kw && w_k > 0 &&
             (!transposed || groups == 1) && 0 <= row0 && row0 <= row1 &&
             row1 <= n * vo.shape[2];
    if (co1 == -1)
        co1 = co;
    ok = ok && 0 <= co0 && co0 <= co1 && co1 <= co;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "conv_rows: x, w, out and the geometry do not fit");
        PyBuffer_Release(&vx);
        PyBuffer_Release(&vw);
        PyBuffer_Release(&vo);
        return NULL;
    }
#ifdef HAVE_GEMM
    /* reads outside x are padding, so any output size is safe */
    conv_job job = {vx.buf, vw.buf, vo.buf, c, vx.shape[2], vx.shape[3], co, groups, kh, kw,
                    sy, sx, dy, dx, py, px, vo.shape[2], vo.shape[3]};
    float *panel = NULL, *zeros = NULL;
    const float **bp = NULL;
    if (row1 > row0 && co1 > co0 && vo.shape[3] > 0) {
        panel = aligned_alloc(64, (size_t)w_k * COLS * 4);
        bp = malloc((size_t)w_k * sizeof *bp);
        zeros = calloc(COLS, sizeof *zeros);
        if (panel == NULL || bp == NULL || zeros == NULL) {
            free(panel);
            free(bp);
            free(zeros);
            PyBuffer_Release(&vx);
            PyBuffer_Release(&vw);
            PyBuffer_Release(&vo);
            return PyErr_NoMemory();
        }
        const int depthwise = groups == c && groups == co && (sx == 1 || sx == 2);
        int status = 0;
        Py_BEGIN_ALLOW_THREADS
        if (transposed)
            conv_narrow_run(&job, row0, row1, co0, co1, panel, bp, zeros);
        else if (depthwise)
            status = conv_depthwise_rows(&job, row0, row1, co0, co1);
        else
            conv_rows_run(&job, row0, row1, co0, co1, panel, bp, zeros);
        if (round && status == 0) /* this call's outputs, just written: mostly still in cache */
            for (Py_ssize_t r = row0; r < row1; r++)
                for (Py_ssize_t o = co0; o < co1; o++)
                    round_span(job.out + ((r / job.oh * co + o) * job.oh + r % job.oh) * job.ow,
                               job.ow);
        Py_END_ALLOW_THREADS
        free(panel);
        free(bp);
        free(zeros);
        if (status < 0) {
            PyBuffer_Release(&vx);
            PyBuffer_Release(&vw);
            PyBuffer_Release(&vo);
            return PyErr_NoMemory();
        }
    }
#endif
    PyBuffer_Release(&vx);
    PyBuffer_Release(&vw);
    PyBuffer_Release(&vo);
    Py_RETURN_NONE;
}
/* ---- end of direct convolution ----------------------------------------------------------- */

/* ---- run_steps: the simulator's run loop over its common steps -------------------------------
 * SimProgram._execute (simulator/program.py) spends about a microsecond of Python on each step
 * besides the kernel: a streaming model of 44 small steps (silero-vad, ~90 us in onnxruntime)
 * spent 50 us of its 200 there. Here the common step is run as that loop runs it: its kernel
 * called on the values of the run's slots (or constants), the result checked (an ndarray of the
 * declared dtype object and static shape), rounded to fp16 in place where the kernel made it
 * (writable and C-contiguous: the same rounding as round_in_place), marked read-only, stored
 * in its slot, and the values no later step reads dropped. Everything else returns to the
 * Python loop at that step: a step without a spec (None), a result that needs the Python
 * checks or the exact conversion of |x| >= 65520, infinities and NaNs (handed back; rounding
 * it again there changes no bit), and a kernel's exception (handed back, for the message that
 * names the op). */
PyDoc_STRVAR(run_steps_doc,
"run_steps(specs, env, start, ndarray) -> (index, result, exception)\n\n"
"Run specs[start:] in order on the list env until a spec is None or a step needs the\n"
"Python loop; returns that step's index (len(specs) when all ran) with its kernel's result\n"
"or exception when it got that far (else None). A spec is (kernel, slots, values, slot,\n"
"dtype, shape, round, frees, gather): argument i is env[slots[i]], or values[i] where\n"
"slots[i] is -1; the result, checked, rounded to fp16 if round, and made read-only, goes to\n"
"env[slot]; env[s] = None for each s in frees. A step whose gather is above 0 and one of\n"
"whose arguments is an ndarray of at least that many values, not C-contiguous, is left to\n"
"the Python loop (which gathers it first).");

#define RUN_ARGS 8 /* positional arguments of a step run here */

static PyObject *str_dtype, *str_flags, *str_writeable;

/* 1: ``out`` checked, rounded and made read-only; 0: the Python loop takes it; -1: error. */
static int run_finish(PyObject *out, PyObject *spec, PyObject *ndarray, int fast)
{
    PyObject *dtype = PyTuple_GET_ITEM(spec, 4), *shape = PyTuple_GET_ITEM(spec, 5);
    const int rounds = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 6));
    if ((PyObject *)Py_TYPE(out) != ndarray || rounds < 0)
        return rounds < 0 ? -1 : 0;
    PyObject *got = PyObject_GetAttr(out, str_dtype);
    if (got == NULL)
        return -1;
    Py_DECREF(got); /* compared by identity only: the array holds its own reference */
    if (got != dtype)
        return 0;
    Py_buffer view;
    if (PyObject_GetBuffer(out, &view, PyBUF_STRIDES) < 0) {
        PyErr_Clear();
        return 0;
    }
    int ok = view.ndim == PyTuple_GET_SIZE(shape);
    for (Py_ssize_t d = 0; ok && d < view.ndim; d++)
        ok = view.shape[d] == PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, d));
    if (ok && rounds) {
        ok = !view.readonly && view.itemsize == 4 && PyBuffer_IsContiguous(&view, 'C');
        if (ok) {
            Py_ssize_t special;
            Py_BEGIN_ALLOW_THREADS
            special = round_values((uint32_t *)view.buf, view.len / 4, fast);
            Py_END_ALLOW_THREADS
            ok = special == 0;
        }
    }
    PyBuffer_Release(&view);
    if (PyErr_Occurred())
        return -1;
    if (!ok)
        return 0;
    PyObject *flags = PyObject_GetAttr(out, str_flags);
    if (flags == NULL)
        return -1;
    const int set = PyObject_SetAttr(flags, str_writeable, Py_False);
    Py_DECREF(flags);
    return set < 0 ? -1 : 1;
}

/* Whether an ndarray among ``args`` holds at least ``least`` values and is not C-contiguous
 * (program.py's gathered() would copy it). */
static int run_strided(PyObject *const *args, Py_ssize_t nargs, PyObject *ndarray,
                       Py_ssize_t least)
{
    for (Py_ssize_t a = 0; a < nargs; a++) {
        Py_buffer view;
        if ((PyObject *)Py_TYPE(args[a]) != ndarray)
            continue;
        if (PyObject_GetBuffer(args[a], &view, PyBUF_STRIDES) < 0) {
            PyErr_Clear();
            return 1; /* the Python loop finds out */
        }
        const int strided = view.itemsize > 0 && view.len / view.itemsize >= least &&
                            !PyBuffer_IsContiguous(&view, 'C');
        PyBuffer_Release(&view);
        if (strided)
            return 1;
    }
    return 0;
}

/* env[slot], checked: the specs come from program.py, but a wrong slot must not crash. */
static int run_slot(PyObject *env, PyObject *item, Py_ssize_t *slot)
{
    *slot = PyLong_AsSsize_t(item);
    if (*slot == -1 && PyErr_Occurred())
        return -1;
    if (*slot < -1 || *slot >= PyList_GET_SIZE(env)) {
        PyErr_SetString(PyExc_IndexError, "run_steps: a slot outside env");
        return -1;
    }
    return 0;
}

static PyObject *run_steps(PyObject *self, PyObject *args)
{
    PyObject *specs, *env, *ndarray;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "O!O!nO:run_steps", &PyTuple_Type, &specs, &PyList_Type, &env,
                          &i, &ndarray))
        return NULL;
    if (str_dtype == NULL) {
        str_dtype = PyUnicode_InternFromString("dtype");
        str_flags = PyUnicode_InternFromString("flags");
        str_writeable = PyUnicode_InternFromString("writeable");
        if (str_dtype == NULL || str_flags == NULL || str_writeable == NULL)
            return NULL;
    }
    const int fast = f16c_supported() && avx2_supported();
    const Py_ssize_t n = PyTuple_GET_SIZE(specs);
    if (i < 0)
        i = 0;
    for (; i < n; i++) {
        PyObject *spec = PyTuple_GET_ITEM(specs, i);
        if (spec == Py_None)
            break;
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 9) {
            PyErr_SetString(PyExc_TypeError, "run_steps: a spec is a 9-tuple");
            return NULL;
        }
        PyObject *slots = PyTuple_GET_ITEM(spec, 1), *values = PyTuple_GET_ITEM(spec, 2);
        PyObject *frees = PyTuple_GET_ITEM(spec, 7);
        if (!PyTuple_Check(slots) || !PyTuple_Check(values) || !PyTuple_Check(frees) ||
            !PyTuple_Check(PyTuple_GET_ITEM(spec, 5)) ||
            PyTuple_GET_SIZE(slots) != PyTuple_GET_SIZE(values) ||
            PyTuple_GET_SIZE(slots) > RUN_ARGS) {
            PyErr_SetString(PyExc_TypeError, "run_steps: a malformed spec");
            return NULL;
        }
        PyObject *stack[RUN_ARGS];
        const Py_ssize_t nargs = PyTuple_GET_SIZE(slots);
        for (Py_ssize_t a = 0; a < nargs; a++) {
            Py_ssize_t s;
            if (run_slot(env, PyTuple_GET_ITEM(slots, a), &s) < 0)
                return NULL;
            /* borrowed: env holds them, and nothing changes env during the call */
            stack[a] = s >= 0 ? PyList_GET_ITEM(env, s) : PyTuple_GET_ITEM(values, a);
        }
        const Py_ssize_t gather = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 8));
        if (gather == -1 && PyErr_Occurred())
            return NULL;
        if (gather > 0 && run_strided(stack, nargs, ndarray, gather))
            break;
        PyObject *out = PyObject_Vectorcall(PyTuple_GET_ITEM(spec, 0), stack, nargs, NULL);
        if (out == NULL) {
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyErr_NormalizeException(&type, &value, &tb);
            if (value == NULL) /* pragma: no cover - an exception always has a value */
                return NULL;
            if (tb != NULL)
                PyException_SetTraceback(value, tb);
            Py_XDECREF(type);
            Py_XDECREF(tb);
            return Py_BuildValue("(nON)", i, Py_None, value);
        }
        const int done = run_finish(out, spec, ndarray, fast);
        if (done <= 0) {
            if (done < 0) {
                Py_DECREF(out);
                return NULL;
            }
            return Py_BuildValue("(nNO)", i, out, Py_None);
        }
        Py_ssize_t slot;
        if (run_slot(env, PyTuple_GET_ITEM(spec, 3), &slot) < 0 || slot < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_IndexError, "run_steps: a result needs a slot");
            Py_DECREF(out);
            return NULL;
        }
        PyList_SetItem(env, slot, out); /* steals out, drops what the slot held */
        for (Py_ssize_t f = 0; f < PyTuple_GET_SIZE(frees); f++) {
            Py_ssize_t s;
            if (run_slot(env, PyTuple_GET_ITEM(frees, f), &s) < 0)
                return NULL;
            if (s >= 0) {
                Py_INCREF(Py_None);
                PyList_SetItem(env, s, Py_None);
            }
        }
    }
    return Py_BuildValue("(nOO)", i, Py_None, Py_None);
}
#undef RUN_ARGS
/* ---- end of run_steps ----------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"round_in_place", round_in_place, METH_O, round_doc},
    {"gemm_f16w_cols", gemm_f16w_cols, METH_VARARGS, gemm_f16w_cols_doc},
    {"gemm", gemm, METH_VARARGS, gemm_doc},
    {"gemm_available", gemm_available, METH_NOARGS, available_doc},
    {"gemm_f16w", gemm_f16w, METH_VARARGS, gemm_f16w_doc},
    {"to_fp16", to_fp16, METH_VARARGS, to_fp16_doc},
    {"from_fp16", from_fp16, METH_VARARGS, from_fp16_doc},
    {"gather", gather, METH_VARARGS, gather_doc},
    {"binary_round", binary_round, METH_VARARGS, binary_round_doc},
    {"fused_run", fused_run, METH_VARARGS, fused_run_doc},
    {"fused_half", fused_half, METH_O, fused_half_doc},
    {"mean_rows", mean_rows, METH_VARARGS, mean_rows_doc},

    /* window kernels */
    {"window_gather", window_gather, METH_VARARGS, window_gather_doc},
    {"taps_scatter", taps_scatter, METH_VARARGS, taps_scatter_doc},
    {"window_max", window_max, METH_VARARGS, window_max_doc},
    {"clamp", clamp, METH_VARARGS, clamp_doc},
    /* end of window kernels */

    /* direct convolution */
    {"conv_rows", conv_rows, METH_VARARGS, conv_rows_doc},
    /* end of direct convolution */
    {"run_steps", run_steps, METH_VARARGS, run_steps_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "anekit's compiled kernels: fp16 rounding and conversion, a float32 GEMM, fp16-weight products.", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }

/* The FP4 scaled MFMA (v_mfma_scale_f32_16x16x128_f8f6f4, cbsz = blgp = 4) in C, on the
 * register file in place, bit for bit the numpy code of f4pipe.emu.ops_mfma, which stays the
 * model (its docstring has the register maps and the arithmetic). Two paths, as there: a
 * batch whose sums are exact in float64 (ops_mfma.exact_in_float64, over all blocks or the
 * live ones) sums in any order and rounds once; any other (a NaN scale, a non-finite C,
 * scales too far apart) takes round_sum_to_f32's TwoSum cascade, operation for operation.
 *
 * Why C: numpy's floor for the per-call gathers and the 16x32x16 matmuls is about 250
 * microseconds an instruction; here a wave's 32768 products take a few microseconds.
 *
 * The values come from the caller's tables (f4pipe.core.numerics): fp4_twice[code] is twice
 * the e2m1 value (an integer, |x| <= 12), e8m0[byte] is 2^(byte - 127). Twice the values
 * make every product an integer: a block's dot product of 32 is at most 32 * 144 in size,
 * exact in int32, and a quarter of it is the partial sum.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__) && !defined(F4PIPE_PORTABLE)
#include <emmintrin.h>
#endif
/* AVX2's dot products (twice as wide) where the CPU running the library has it, chosen at run
 * time: the library is built once and kept in a cache a cluster's nodes may share.
 * F4PIPE_NO_AVX2 leaves them out (the tests build that too, to test the SSE2 path). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(F4PIPE_PORTABLE) && \
    !defined(F4PIPE_NO_AVX2)
#define F4PIPE_AVX2 1
#include <immintrin.h>
#endif

#define LANES 64
#define ROWS 16
#define BLOCKS 4
#define PAIRS 16 /* a block's 32 items, two to a byte */

typedef struct {
    int all_min_a, all_max_a, all_min_b, all_max_b;
    int live_min_a, live_max_a, live_min_b, live_max_b;
    int any_live_a, any_live_b, all_live;
    double c_max; /* max |C| */
    int c_low;    /* least exponent of a set bit over the nonzero C (1000: every C is zero) */
} Stats;

static inline const uint32_t *reg(const uint32_t *vgpr, int64_t W, int64_t r, int64_t w) {
    return vgpr + (r * W + w) * LANES;
}

static inline int min_int(int a, int b) { return a < b ? a : b; }
static inline int max_int(int a, int b) { return a > b ? a : b; }

/* The exponent of the lowest set bit of a finite nonzero float32's value. */
static int lowest_bit_exponent(uint32_t bits) {
    uint32_t exponent = (bits >> 23) & 0xFF, significand = bits & 0x7FFFFF;
    if (exponent) significand |= 0x800000;
    else exponent = 1; /* subnormal: significand x 2^-149 */
    return (int)exponent - 150 + __builtin_ctz(significand);
}

/* Scale bytes, live blocks, max |C| and C's grid over every wave; 0 when a NaN scale or a
 * non-finite C rules exactness out. A block (lane 16g + r) is live when one of its 32
 * values is nonzero (sign bits masked). */
static int gather_stats(const uint32_t *vgpr, int64_t W, const int64_t *waves, int64_t n,
                        int64_t a_reg, int64_t b_reg, int64_t c_reg, int64_t sa_reg,
                        int sa_shift, int64_t sb_reg, int sb_shift, Stats *s) {
    Stats t = {1000, -1000, 1000, -1000, 1000, -1000, 1000, -1000, 0, 0, 1, 0.0, 1000};
    for (int64_t k = 0; k < n; k++) {
        int64_t w = waves[k];
        const uint32_t *sa = reg(vgpr, W, sa_reg, w), *sb = reg(vgpr, W, sb_reg, w);
        uint32_t bits_a[LANES] = {0}, bits_b[LANES] = {0};
        for (int q = 0; q < 4; q++) {
            const uint32_t *a = reg(vgpr, W, a_reg + q, w), *b = reg(vgpr, W, b_reg + q, w);
            for (int lane = 0; lane < LANES; lane++) {
                bits_a[lane] |= a[lane];
                bits_b[lane] |= b[lane];
            }
        }
        for (int lane = 0; lane < LANES; lane++) {
            int ea = (sa[lane] >> sa_shift) & 0xFF, eb = (sb[lane] >> sb_shift) & 0xFF;
            if (ea == 0xFF || eb == 0xFF) return 0;
            t.all_min_a = min_int(t.all_min_a, ea);
            t.all_max_a = max_int(t.all_max_a, ea);
            t.all_min_b = min_int(t.all_min_b, eb);
            t.all_max_b = max_int(t.all_max_b, eb);
            int live_a = (bits_a[lane] & 0x77777777u) != 0;
            int live_b = (bits_b[lane] & 0x77777777u) != 0;
            t.all_live &= live_a & live_b;
            if (live_a) {
                t.any_live_a = 1;
                t.live_min_a = min_int(t.live_min_a, ea);
                t.live_max_a = max_int(t.live_max_a, ea);
            }
            if (live_b) {
                t.any_live_b = 1;
                t.live_min_b = min_int(t.live_min_b, eb);
                t.live_max_b = max_int(t.live_max_b, eb);
            }
        }
        for (int q = 0; q < 4; q++) {
            const uint32_t *c = reg(vgpr, W, c_reg + q, w);
            for (int lane = 0; lane < LANES; lane++) {
                uint32_t bits = c[lane];
                if (((bits >> 23) & 0xFF) == 0xFF) return 0; /* inf or NaN */
                if (!(bits & 0x7FFFFFFF)) continue;          /* +-0: on every grid */
                float value;
                memcpy(&value, &bits, sizeof value);
                double magnitude = fabs((double)value);
                if (magnitude > t.c_max) t.c_max = magnitude;
                t.c_low = min_int(t.c_low, lowest_bit_exponent(bits));
            }
        }
    }
    *s = t;
    return 1;
}

/* exact_in_float64's test for one choice of blocks: products are multiples of 2^low below
 * 36 * 2^high each, C must be a multiple of 2^low too. */
static int exact_for(const Stats *s, int min_a, int max_a, int min_b, int max_b) {
    int low = min_a + min_b - 254 - 2, high = max_a + max_b - 254;
    if (4608.0 * ldexp(1.0, high) + s->c_max >= ldexp(1.0, low + 53)) return 0;
    return s->c_low >= low;
}

static int batch_exact(const Stats *s) {
    if (exact_for(s, s->all_min_a, s->all_max_a, s->all_min_b, s->all_max_b)) return 1;
    if (s->all_live) return 0;
    if (!s->any_live_a || !s->any_live_b) return 1; /* every product is zero: the sum is C */
    return exact_for(s, s->live_min_a, s->live_max_a, s->live_min_b, s->live_max_b);
}

/* Twice the FP4 values of B's columns, two items per byte (`pairs` maps a byte to its two
 * values, low nibble first), as [g][t / 2][r][t % 2]: a pair of A's items (one byte of its
 * row) meets four columns' pairs in one multiply-add of int16 pairs. */
static void decode_columns(const uint32_t *vgpr, int64_t W, int64_t base, int64_t w,
                           const int16_t pairs[256][2],
                           int16_t out[BLOCKS][PAIRS][ROWS][2]) {
    for (int q = 0; q < 4; q++) {
        const uint32_t *words = reg(vgpr, W, base + q, w);
        for (int g = 0; g < BLOCKS; g++) {
            for (int e = 0; e < 4; e++) {
                int16_t(*column)[2] = out[g][4 * q + e];
                for (int r = 0; r < ROWS; r++)
                    memcpy(column[r], pairs[(words[ROWS * g + r] >> (8 * e)) & 0xFF],
                           2 * sizeof(int16_t));
            }
        }
    }
}

/* Items 2k and 2k + 1 of an A row (byte k of its four registers), twice their values, as
 * one int32 of two int16: what each multiply-add of the dot products broadcasts. */
static inline int32_t item_pair(const uint32_t row[4], const int16_t pairs[256][2], int k) {
    int32_t pair;
    memcpy(&pair, pairs[(row[k / 4] >> (8 * (k % 4))) & 0xFF], sizeof pair);
    return pair;
}

/* dot[j] = sum over t of row item t * column j's item t (all 16 columns of one block); the
 * row is A's four registers of its lane, each byte a pair of items. */
static void row_dots(const uint32_t row[4], const int16_t pairs[256][2],
                     const int16_t columns[PAIRS][ROWS][2], int32_t dot[ROWS]) {
#if defined(__SSE2__) && !defined(F4PIPE_PORTABLE)
    /* four named sums: the compiler keeps them in registers */
    __m128i sum0 = _mm_setzero_si128(), sum1 = sum0, sum2 = sum0, sum3 = sum0;
    for (int k = 0; k < PAIRS; k++) {
        __m128i items = _mm_set1_epi32(item_pair(row, pairs, k));
        const __m128i *four = (const __m128i *)columns[k];
        sum0 = _mm_add_epi32(sum0, _mm_madd_epi16(items, _mm_loadu_si128(four)));
        sum1 = _mm_add_epi32(sum1, _mm_madd_epi16(items, _mm_loadu_si128(four + 1)));
        sum2 = _mm_add_epi32(sum2, _mm_madd_epi16(items, _mm_loadu_si128(four + 2)));
        sum3 = _mm_add_epi32(sum3, _mm_madd_epi16(items, _mm_loadu_si128(four + 3)));
    }
    _mm_storeu_si128((__m128i *)dot, sum0);
    _mm_storeu_si128((__m128i *)(dot + 4), sum1);
    _mm_storeu_si128((__m128i *)(dot + 8), sum2);
    _mm_storeu_si128((__m128i *)(dot + 12), sum3);
#else
    for (int j = 0; j < ROWS; j++) dot[j] = 0;
    for (int k = 0; k < PAIRS; k++) {
        int16_t items[2];
        int32_t pair = item_pair(row, pairs, k);
        memcpy(items, &pair, sizeof items);
        for (int j = 0; j < ROWS; j++)
            dot[j] += items[0] * columns[k][j][0] + items[1] * columns[k][j][1];
    }
#endif
}

#ifdef F4PIPE_AVX2
/* row_dots with eight columns to a multiply-add: two per pair of items instead of four */
__attribute__((target("avx2"))) static void row_dots_avx2(const uint32_t row[4],
                                                          const int16_t pairs[256][2],
                                                          const int16_t columns[PAIRS][ROWS][2],
                                                          int32_t dot[ROWS]) {
    __m256i low = _mm256_setzero_si256(), high = low;
    for (int k = 0; k < PAIRS; k++) {
        __m256i items = _mm256_set1_epi32(item_pair(row, pairs, k));
        const __m256i *eight = (const __m256i *)columns[k];
        low = _mm256_add_epi32(low, _mm256_madd_epi16(items, _mm256_loadu_si256(eight)));
        high = _mm256_add_epi32(high, _mm256_madd_epi16(items, _mm256_loadu_si256(eight + 1)));
    }
    _mm256_storeu_si256((__m256i *)dot, low);
    _mm256_storeu_si256((__m256i *)(dot + 8), high);
}
#endif

typedef void (*RowDots)(const uint32_t[4], const int16_t[256][2], const int16_t[PAIRS][ROWS][2],
                        int32_t[ROWS]);

/* s + t as numpy's add gives it on its arrays: when both are NaN, the first one's payload
 * (x86's and Arm's rule for the first source; a compiler may swap the operands of +). */
static inline double add_as_numpy(double s, double t) { return isnan(s) ? s : s + t; }

/* ops_mfma.round_sum_to_f32 for one element, operation for operation (every operation
 * IEEE binary64 or binary32, so the result is numpy's bit for bit): the TwoSum cascade over
 * the four block terms and C, rounded once to f32 with the tie decided by the error term. */
static float round_sum_to_f32(const double parts[BLOCKS + 1]) {
    double s = parts[0], e = 0.0;
    for (int k = 1; k <= BLOCKS; k++) {
        double t = parts[k], s2 = add_as_numpy(s, t);
        double bv = s2 - s;
        e = e + ((s - (s2 - bv)) + (t - bv));
        s = s2;
    }
    if (!isfinite(s)) return (float)s;
    double hi = s + e, lo = (s - hi) + e;
    float r = (float)hi;
    double d = hi - (double)r;
    float other = nextafterf(r, d > 0 ? INFINITY : -INFINITY);
    int tie = d != 0 && hi == ((double)r + (double)other) / 2;
    int away = tie && lo != 0 && ((lo > 0) == (d > 0));
    return away && isfinite(hi) ? other : r;
}

static void one_wave(uint32_t *vgpr, int64_t W, int64_t w, int64_t a_reg, int64_t b_reg,
                     int64_t c_reg, int64_t d_reg, int64_t sa_reg, int sa_shift,
                     int64_t sb_reg, int sb_shift, const int16_t pairs[256][2],
                     const double *e8m0, int exact, RowDots dots) {
    int16_t b[BLOCKS][PAIRS][ROWS][2];
    uint32_t a[LANES][4]; /* A's row r of block g: lane 16g + r of its four registers */
    double scale_a[BLOCKS][ROWS], scale_b[BLOCKS][ROWS], sum[ROWS][ROWS];
    double parts[ROWS][ROWS][BLOCKS + 1]; /* the general path's terms, then C */
    for (int q = 0; q < 4; q++) {
        const uint32_t *words = reg(vgpr, W, a_reg + q, w);
        for (int lane = 0; lane < LANES; lane++) a[lane][q] = words[lane];
    }
    decode_columns(vgpr, W, b_reg, w, pairs, b);
    const uint32_t *sa = reg(vgpr, W, sa_reg, w), *sb = reg(vgpr, W, sb_reg, w);
    for (int lane = 0; lane < LANES; lane++) {
        /* 0.25: the products of twice the values are four times the products */
        scale_a[lane / ROWS][lane % ROWS] = 0.25 * e8m0[(sa[lane] >> sa_shift) & 0xFF];
        scale_b[lane / ROWS][lane % ROWS] = e8m0[(sb[lane] >> sb_shift) & 0xFF];
    }
    /* D[i][j] sits in register d + i%4 of lane j + 16*(i//4), C likewise */
    for (int i = 0; i < ROWS; i++) {
        const uint32_t *c = reg(vgpr, W, c_reg + i % 4, w) + ROWS * (i / 4);
        for (int j = 0; j < ROWS; j++) {
            float value;
            memcpy(&value, &c[j], sizeof value);
            sum[i][j] = parts[i][j][BLOCKS] = (double)value;
        }
    }
    for (int g = 0; g < BLOCKS; g++) {
        for (int i = 0; i < ROWS; i++) {
            int32_t dot[ROWS];
            dots(a[ROWS * g + i], pairs, (const int16_t(*)[ROWS][2])b[g], dot);
            /* every finite term is exact; a NaN scale's term is the table's NaN */
            if (exact) {
                for (int j = 0; j < ROWS; j++)
                    sum[i][j] += dot[j] * scale_a[g][i] * scale_b[g][j];
            } else {
                for (int j = 0; j < ROWS; j++)
                    parts[i][j][g] = dot[j] * scale_a[g][i] * scale_b[g][j];
            }
        }
    }
    for (int i = 0; i < ROWS; i++) {
        uint32_t *d = vgpr + ((d_reg + i % 4) * W + w) * LANES + ROWS * (i / 4);
        for (int j = 0; j < ROWS; j++) {
            /* exact: every partial sum is, so one conversion rounds the exact sum */
            float rounded = exact ? (float)sum[i][j] : round_sum_to_f32(parts[i][j]);
            memcpy(&d[j], &rounded, sizeof rounded);
        }
    }
}

/* D for waves `waves` (n of W) of the register file vgpr[register][W][64], written in place;
 * returns 1 when the batch's sums were exact (the fast path), 0 when they took the general
 * path (for tests: both write D). */
int f4pipe_mfma_fp4(uint32_t *vgpr, int64_t W, const int64_t *waves, int64_t n,
                    int64_t a_reg, int64_t b_reg, int64_t c_reg, int64_t d_reg,
                    int64_t sa_reg, int sa_byte, int64_t sb_reg, int sb_byte,
                    const int8_t *fp4_twice, const double *e8m0) {
    int sa_shift = 8 * sa_byte, sb_shift = 8 * sb_byte;
    Stats s;
    int exact = gather_stats(vgpr, W, waves, n, a_reg, b_reg, c_reg, sa_reg, sa_shift, sb_reg,
                             sb_shift, &s) &&
                batch_exact(&s);
    int16_t pairs[256][2];
    for (int byte = 0; byte < 256; byte++) {
        pairs[byte][0] = fp4_twice[byte & 0xF];
        pairs[byte][1] = fp4_twice[byte >> 4];
    }
    RowDots dots = row_dots;
#ifdef F4PIPE_AVX2
    if (__builtin_cpu_supports("avx2")) dots = row_dots_avx2;
#endif
    for (int64_t k = 0; k < n; k++)
        one_wave(vgpr, W, waves[k], a_reg, b_reg, c_reg, d_reg, sa_reg, sa_shift, sb_reg,
                 sb_shift, (const int16_t(*)[2])pairs, e8m0, exact, dots);
    return exact;
}

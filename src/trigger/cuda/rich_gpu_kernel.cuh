/* The GPU ring finder's kernels, running the CPU's ring finder source (rich_hist_core.h,
 * rich_fit_core.h). A warp per event (the default): the event's finder state in shared memory,
 * the lanes sharing the histogram (four centres' counts per 32-bit word) and the per-hit
 * kernels, in the CPU's summation order. Or a thread per event, its state in local or shared
 * memory, with the CPU's portable byte loops or the same counts as SWAR words. Every choice
 * does the same integer counts and float operations, so every one gives the CPU's rings bit
 * for bit. */
#ifndef SDDAQ_TRIGGER_RICH_GPU_KERNEL_CUH
#define SDDAQ_TRIGGER_RICH_GPU_KERNEL_CUH

#include "trigger/rich_hist_core.h"

#define GPU_ROWS  (RICH_BIN_HI - RICH_BIN_LO) /* the histogram rows the search reads */
#define GPU_WORDS (RICH_CENTRES / 4)          /* four centres' counts per word */

/* What every thread starts from: the finder's options, tables and the batch. */
struct rich_gpu_params {
    sdd_rich_find_opts opts;
    float r_max;
    const sdd_rich_pmtab *tab;
    uint8_t (*pm_bins)[RICH_CENTRES];
    const uint32_t *first;
    const uint8_t *nhits;
    const uint16_t *hits;
    uint32_t n;
    uint32_t max_rings;
    uint8_t *nrings;
    sdd_rich_ring *rings;
};

__device__ static inline uint32_t *hist_words(sdd_rich_finder *f, int b)
{
    return (uint32_t *)f->hist[b];
}

/* Byte b in all four lanes. */
__device__ static inline uint32_t lanes_of(int b)
{
    return (uint32_t)b * 0x01010101u;
}

/* hist_build(): the counts of each word of centres kept in registers over the spot's hits.
 * __vcmpeq4 gives 0xFF (minus one) in each byte where the hit's bin equals the row, so
 * subtracting it counts the hit. Counts stay below 65, so no byte carries into the next. */
__device__ static void hist_build_swar(sdd_rich_finder *f, const struct rich_spot *s)
{
    for (unsigned h = 0; h < s->n; h++) {
        f->bins[h] = f->pm_bins[s->pm[h]];
    }
    for (int w = 0; w < GPU_WORDS; w++) {
        uint32_t acc[GPU_ROWS];
#pragma unroll
        for (int r = 0; r < GPU_ROWS; r++) {
            acc[r] = 0;
        }
        for (unsigned h = 0; h < s->n; h++) {
            uint32_t bins = ((const uint32_t *)f->bins[h])[w];
#pragma unroll
            for (int r = 0; r < GPU_ROWS; r++) {
                acc[r] = __vsub4(acc[r], __vcmpeq4(bins, lanes_of(r + RICH_BIN_LO)));
            }
        }
#pragma unroll
        for (int r = 0; r < GPU_ROWS; r++) {
            hist_words(f, r + RICH_BIN_LO)[w] = acc[r];
        }
    }
}

/* update_portable(): the same counts, a word of centres at a time. */
__device__ static void update_swar(sdd_rich_finder *f, uint64_t add, uint64_t sub)
{
    for (int w = 0; w < GPU_WORDS; w++) {
        uint32_t acc[GPU_ROWS];
#pragma unroll
        for (int r = 0; r < GPU_ROWS; r++) {
            acc[r] = hist_words(f, r + RICH_BIN_LO)[w];
        }
        for (uint64_t m = add; m != 0; m &= m - 1) {
            uint32_t bins = ((const uint32_t *)f->bins[rich_ctz64(m)])[w];
#pragma unroll
            for (int r = 0; r < GPU_ROWS; r++) {
                acc[r] = __vsub4(acc[r], __vcmpeq4(bins, lanes_of(r + RICH_BIN_LO)));
            }
        }
        for (uint64_t m = sub; m != 0; m &= m - 1) {
            uint32_t bins = ((const uint32_t *)f->bins[rich_ctz64(m)])[w];
#pragma unroll
            for (int r = 0; r < GPU_ROWS; r++) {
                acc[r] = __vadd4(acc[r], __vcmpeq4(bins, lanes_of(r + RICH_BIN_LO)));
            }
        }
#pragma unroll
        for (int r = 0; r < GPU_ROWS; r++) {
            hist_words(f, r + RICH_BIN_LO)[w] = acc[r];
        }
    }
}

__device__ static void remove_swar(sdd_rich_finder *f, uint64_t hits)
{
    update_swar(f, 0, hits);
}

/* peak(): pair sums below 256 add bytewise without carries; the same tie rule (the first
 * row holding the maximum, then its first centre). */
__device__ static unsigned peak_swar(sdd_rich_finder *f, int *bbest, int *cbest)
{
    unsigned best = 0;
    int bb = RICH_BIN_LO;
    for (int b = RICH_BIN_LO; b < RICH_BIN_HI - 1; b++) {
        const uint32_t *r0 = hist_words(f, b), *r1 = hist_words(f, b + 1);
        const uint32_t *veto = (const uint32_t *)f->veto[b];
        uint32_t m = 0;
#pragma unroll
        for (int w = 0; w < GPU_WORDS; w++) {
            m = __vmaxu4(m, __vadd4(r0[w], r1[w]) & ~veto[w]);
        }
        m = __vmaxu4(m, m >> 16);
        m = __vmaxu4(m, m >> 8);
        unsigned rowmax = m & 0xFF;
        if (rowmax > best) {
            best = rowmax;
            bb = b;
        }
    }
    int cb = 0;
    for (int c = 0; c < RICH_CENTRES; c++) {
        if ((unsigned)((f->hist[bb][c] + f->hist[bb + 1][c]) & ~f->veto[bb][c] & 0xFF) == best) {
            cb = c;
            break;
        }
    }
    *bbest = bb;
    *cbest = cb;
    return best;
}

__device__ static unsigned hist_spot_swar(sdd_rich_finder *f, const struct rich_spot *s,
                                          struct rich_cand *out, unsigned max)
{
    hist_build_swar(f, s);
    return hist_spot(f, s, out, max, peak_swar, remove_swar, update_swar, seed_portable);
}

/* ---- the finder's kernels: portable, or shared out over a warp's lanes ------------------ */

#define FULL_WARP 0xFFFFFFFFu

__device__ static inline unsigned lane_id(void)
{
    return threadIdx.x & 31u;
}

/* The hits a kernel covers: n rounded up to the 16 lanes of the CPU build. */
__device__ static inline unsigned lanes_n(const struct rich_spot *s)
{
    return (s->n + RICH_LANES - 1) & ~(unsigned)(RICH_LANES - 1);
}

/* on_circle_portable(): lane l tests hits l and l + 32, a ballot gathers the bits. */
static __device__ uint64_t rich_gpu_on_circle(const sdd_rich_finder *f, const struct rich_spot *s,
                                              uint64_t alive, const sdd_rich_circle *c,
                                              float window)
{
    if (!f->coop) {
        return on_circle_portable(s, alive, c, window);
    }
    float lo = c->r > window ? (c->r - window) * (c->r - window) : 0.0f;
    float hi = (c->r + window) * (c->r + window);
    unsigned n = lanes_n(s), lane = lane_id();
    __syncwarp();
    uint64_t sel = 0;
    for (unsigned half = 0; half < 2; half++) {
        unsigned i = lane + 32 * half;
        bool in = false;
        if (i < n) {
            float dx = s->x[i] - c->cx, dy = s->y[i] - c->cy;
            float d2 = dx * dx + dy * dy;
            in = d2 > lo && d2 < hi;
        }
        sel |= (uint64_t)__ballot_sync(FULL_WARP, in) << (32 * half);
    }
    return sel & alive;
}

/* rich_lane_tree() over the 16 lanes of each half-warp: the same pairs added in the same
 * order (i + 8, then i + 4, i + 2, i + 1); every lane gets the sum. */
__device__ static inline float warp_tree(float v)
{
    v = v + __shfl_down_sync(FULL_WARP, v, 8, 16);
    v = v + __shfl_down_sync(FULL_WARP, v, 4, 16);
    v = v + __shfl_down_sync(FULL_WARP, v, 2, 16);
    v = v + __shfl_down_sync(FULL_WARP, v, 1, 16);
    return __shfl_sync(FULL_WARP, v, 0);
}

/* moments_portable(): lane l (and l + 16, a copy) keeps the CPU's lane l, which takes hits l,
 * l + 16, l + 32, l + 48 in that order. */
static __device__ bool rich_gpu_moments(const sdd_rich_finder *f, const struct rich_spot *s,
                                        uint64_t mask, struct rich_moments *mo)
{
    if (!f->coop) {
        return moments_portable(s, mask, true, mo);
    }
    unsigned n = lanes_n(s), l = lane_id() & 15u;
    __syncwarp();
    float a0 = 0, a1 = 0, a2 = 0;
    for (unsigned i = l; i < n; i += RICH_LANES) {
        float w = (float)((mask >> i) & 1);
        a0 += w;
        a1 += w * s->x[i];
        a2 += w * s->y[i];
    }
    float sw = warp_tree(a0);
    if (sw < 3.0f) {
        return false;
    }
    float xm = warp_tree(a1) / sw, ym = warp_tree(a2) / sw;
    float m[NMOM] = {0};
    for (unsigned i = l; i < n; i += RICH_LANES) {
        float w = (float)((mask >> i) & 1);
        float u = s->x[i] - xm, v = s->y[i] - ym;
        float wu = w * u, wv = w * v;
        float z = u * u + v * v, wz = w * z;
        m[0] += wu * u;
        m[1] += wv * v;
        m[2] += wu * v;
        m[3] += wu * u * u;
        m[4] += wv * v * v;
        m[5] += wu * v * v;
        m[6] += wv * u * u;
        m[7] += wz * z;
        m[8] += wz * u;
        m[9] += wz * v;
    }
    float sums[NMOM];
#pragma unroll
    for (int k = 0; k < NMOM; k++) {
        sums[k] = warp_tree(m[k]);
    }
    rich_store_moments(sw, xm, ym, sums, mo);
    return true;
}

/* residuals_portable(): each lane squares its hits' residuals; the sum runs in index order,
 * every lane fetching each term from the lane that holds it. */
static __device__ float rich_gpu_residuals(const sdd_rich_finder *f, const struct rich_spot *s,
                                           uint64_t mask, const sdd_rich_circle *c)
{
    if (!f->coop) {
        return residuals_portable(s, mask, c);
    }
    unsigned n = lanes_n(s), lane = lane_id();
    __syncwarp();
    float r2[2] = {0.0f, 0.0f};
    for (unsigned half = 0; half < 2; half++) {
        unsigned i = lane + 32 * half;
        if (i < n) {
            float dx = s->x[i] - c->cx, dy = s->y[i] - c->cy;
            float res = sqrtf(dx * dx + dy * dy) - c->r;
            r2[half] = res * res;
        }
    }
    float sum = 0.0f;
    for (uint64_t m = mask; m != 0; m &= m - 1) {
        unsigned k = rich_ctz64(m);
        sum += __shfl_sync(FULL_WARP, k < 32 ? r2[0] : r2[1], k & 31u);
    }
    return sum;
}

/* The histogram steps with a warp per event: lane l keeps word l % 16 (four centres) of half
 * the rows (l / 16 picks which five), as SWAR counts; the scalar steps of the search run on
 * every lane alike, so they meet at each __syncwarp(). */
#define WARP_ROWS (GPU_ROWS / 2)

__device__ static inline int warp_row0(void)
{
    return RICH_BIN_LO + (int)(lane_id() >> 4) * WARP_ROWS;
}

__device__ static void hist_build_warp(sdd_rich_finder *f, const struct rich_spot *s)
{
    unsigned lane = lane_id(), w = lane & 15u;
    int r0 = warp_row0();
    __syncwarp();
    for (unsigned h = lane; h < s->n; h += 32) {
        f->bins[h] = f->pm_bins[s->pm[h]];
    }
    uint32_t acc[WARP_ROWS];
#pragma unroll
    for (int r = 0; r < WARP_ROWS; r++) {
        acc[r] = 0;
    }
    for (unsigned h = 0; h < s->n; h++) {
        uint32_t bins = ((const uint32_t *)f->pm_bins[s->pm[h]])[w];
#pragma unroll
        for (int r = 0; r < WARP_ROWS; r++) {
            acc[r] = __vsub4(acc[r], __vcmpeq4(bins, lanes_of(r0 + r)));
        }
    }
#pragma unroll
    for (int r = 0; r < WARP_ROWS; r++) {
        hist_words(f, r0 + r)[w] = acc[r];
    }
    __syncwarp();
}

__device__ static void update_warp(sdd_rich_finder *f, uint64_t add, uint64_t sub)
{
    unsigned w = lane_id() & 15u;
    int r0 = warp_row0();
    __syncwarp();
    uint32_t acc[WARP_ROWS];
#pragma unroll
    for (int r = 0; r < WARP_ROWS; r++) {
        acc[r] = hist_words(f, r0 + r)[w];
    }
    for (uint64_t m = add; m != 0; m &= m - 1) {
        uint32_t bins = ((const uint32_t *)f->bins[rich_ctz64(m)])[w];
#pragma unroll
        for (int r = 0; r < WARP_ROWS; r++) {
            acc[r] = __vsub4(acc[r], __vcmpeq4(bins, lanes_of(r0 + r)));
        }
    }
    for (uint64_t m = sub; m != 0; m &= m - 1) {
        uint32_t bins = ((const uint32_t *)f->bins[rich_ctz64(m)])[w];
#pragma unroll
        for (int r = 0; r < WARP_ROWS; r++) {
            acc[r] = __vadd4(acc[r], __vcmpeq4(bins, lanes_of(r0 + r)));
        }
    }
#pragma unroll
    for (int r = 0; r < WARP_ROWS; r++) {
        hist_words(f, r0 + r)[w] = acc[r];
    }
    __syncwarp();
}

__device__ static void remove_warp(sdd_rich_finder *f, uint64_t hits)
{
    update_warp(f, 0, hits);
}

/* peak(): each lane ranks its word's pair sums by (value, lowest row first) in one key; the
 * warp's largest key names the peak and its row, a ballot the first centre holding it. */
__device__ static unsigned peak_warp(sdd_rich_finder *f, int *bbest, int *cbest)
{
    unsigned w = lane_id() & 15u;
    __syncwarp();
    unsigned key = 0;
    for (int b = RICH_BIN_LO; b < RICH_BIN_HI - 1; b++) {
        uint32_t v = __vadd4(hist_words(f, b)[w], hist_words(f, b + 1)[w]) &
                     ~((const uint32_t *)f->veto[b])[w];
        v = __vmaxu4(v, v >> 16);
        v = __vmaxu4(v, v >> 8);
        unsigned k = ((v & 0xFFu) << 8) | (unsigned)(255 - b);
        key = k > key ? k : key;
    }
    key = __reduce_max_sync(FULL_WARP, key);
    unsigned best = key >> 8;
    int bb = 255 - (int)(key & 0xFFu);
    uint32_t v = __vadd4(hist_words(f, bb)[w], hist_words(f, bb + 1)[w]) &
                 ~((const uint32_t *)f->veto[bb])[w];
    uint32_t eq = __vcmpeq4(v, lanes_of((int)best)); /* 0xFF where a centre holds the peak */
    unsigned lanes = __ballot_sync(FULL_WARP, eq != 0) & 0xFFFFu;
    unsigned first = (unsigned)__ffs((int)lanes) - 1; /* lanes is never 0: best is a value */
    unsigned byte = ((unsigned)__ffs((int)__shfl_sync(FULL_WARP, eq, first)) - 1) / 8;
    *bbest = bb;
    *cbest = (int)(first * 4 + byte);
    return best;
}

/* seed_portable(): lane l tests hits l and l + 32. */
__device__ static uint64_t seed_warp(const sdd_rich_finder *f, const struct rich_spot *s,
                                     uint64_t alive, int b, int c)
{
    unsigned lane = lane_id();
    __syncwarp();
    uint64_t seed = 0;
    for (unsigned half = 0; half < 2; half++) {
        unsigned h = lane + 32 * half;
        bool in = false;
        if (h < s->n && ((alive >> h) & 1)) {
            unsigned v = f->bins[h][c];
            in = v == (unsigned)b || v == (unsigned)b + 1;
        }
        seed |= (uint64_t)__ballot_sync(FULL_WARP, in) << (32 * half);
    }
    return seed;
}

__device__ static unsigned hist_spot_warp(sdd_rich_finder *f, const struct rich_spot *s,
                                          struct rich_cand *out, unsigned max)
{
    hist_build_warp(f, s);
    return hist_spot(f, s, out, max, peak_warp, remove_warp, update_warp, seed_warp);
}

/* ---- kernels ------------------------------------------------------------------------------ */

/* A finder as the CPU's create leaves it (zeroed: the kernels read a spot's coordinates up to
 * the next 16 hits, which must be finite), with the batch's options and tables. */
__device__ static void finder_init(sdd_rich_finder *f, const struct rich_gpu_params *p, bool coop)
{
    memset(f, 0, sizeof(*f));
    f->opts = p->opts;
    f->tab = (sdd_rich_pmtab *)p->tab;
    f->r_max = p->r_max;
    f->pm_bins = p->pm_bins;
    f->coop = coop;
}

/* One thread per event, over a grid-stride loop; the finder state is set up once per thread
 * (the vetoes are zero between spots, as the search leaves them). */
template <bool SHARED, bool SWAR> __global__ void rich_gpu_find(const struct rich_gpu_params p)
{
    extern __shared__ __align__(64) unsigned char smem[];
    sdd_rich_finder own;
    sdd_rich_finder *f = SHARED ? (sdd_rich_finder *)smem + threadIdx.x : &own;
    finder_init(f, &p, false);
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += gridDim.x * blockDim.x) {
        unsigned n = p.nhits[i];
        int k = 0;
        if (n <= SDD_RICH_MAX_HITS) {
            k = rich_find_event(f, p.hits + p.first[i], n, p.rings + (size_t)i * p.max_rings,
                                p.max_rings, SWAR ? hist_spot_swar : hist_spot_portable);
        }
        p.nrings[i] = (uint8_t)k;
    }
}

/* One warp per event: its finder in shared memory, the lanes share the histogram and the
 * per-hit kernels and run the rest of the search alike. MIN_BLOCKS caps the registers (more
 * warps resident, some spills). */
template <int MIN_BLOCKS>
__global__ void __launch_bounds__(128, MIN_BLOCKS)
    rich_gpu_find_warp(const struct rich_gpu_params p)
{
    extern __shared__ __align__(64) unsigned char smem[];
    sdd_rich_finder *f = (sdd_rich_finder *)smem + threadIdx.x / 32;
    if (lane_id() == 0) {
        finder_init(f, &p, true);
    }
    __syncwarp();
    uint32_t warps = gridDim.x * (blockDim.x / 32);
    for (uint32_t i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; i < p.n; i += warps) {
        __syncwarp(); /* no lane still reads the last event's hits when they are replaced */
        unsigned n = p.nhits[i];
        int k = 0;
        if (n <= SDD_RICH_MAX_HITS) {
            k = rich_find_event(f, p.hits + p.first[i], n, p.rings + (size_t)i * p.max_rings,
                                p.max_rings, hist_spot_warp);
        }
        if (lane_id() == 0) {
            p.nrings[i] = (uint8_t)k;
        }
    }
}

#endif

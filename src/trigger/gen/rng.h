/* Reproducible random numbers for the stub generator (internal): xoshiro256** seeded through
 * splitmix64, uniform doubles, Box-Muller gaussians and Poisson counts. Own code rather than
 * rand() so a seed gives the same events on every libc. */
#ifndef SDDAQ_TRIGGER_GEN_RNG_H
#define SDDAQ_TRIGGER_GEN_RNG_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

struct gen_rng {
    uint64_t s[4];
    double spare; /* Box-Muller makes two gaussians; the second waits here */
    bool has_spare;
};

static inline uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* splitmix64 never yields four zero words from one seed, so every seed (0 too) is usable. */
static inline void rng_seed(struct gen_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        r->s[i] = splitmix64(&seed);
    }
    r->has_spare = false;
    r->spare = 0.0;
}

static inline uint64_t rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t rng_next(struct gen_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return out;
}

/* [0, 1) with 53 random bits. */
static inline double rng_unit(struct gen_rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* (0, 1]: safe to divide by or take the log of. */
static inline double rng_unit_open0(struct gen_rng *r)
{
    return 1.0 - rng_unit(r);
}

/* [lo, hi) */
static inline double rng_uniform(struct gen_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * rng_unit(r);
}

/* 0 .. n-1 for n >= 1; the bias of the modulo is below 2^-40 for the sizes used here. */
static inline uint32_t rng_below(struct gen_rng *r, uint32_t n)
{
    return (uint32_t)(rng_next(r) % n);
}

static inline double rng_gauss(struct gen_rng *r)
{
    if (r->has_spare) {
        r->has_spare = false;
        return r->spare;
    }
    double u = rng_unit_open0(r);
    double v = rng_unit(r);
    double m = sqrt(-2.0 * log(u));
    r->spare = m * sin(2.0 * M_PI * v);
    r->has_spare = true;
    return m * cos(2.0 * M_PI * v);
}

/* Knuth's product method is exact but O(mean) and exp(-mean) leaves the double range past
 * ~700, so large means use a rounded gaussian, which is close enough there. */
static inline uint32_t rng_poisson(struct gen_rng *r, double mean)
{
    if (!(mean > 0.0)) {
        return 0;
    }
    if (mean <= 500.0) {
        double limit = exp(-mean);
        double p = 1.0;
        uint32_t k = 0;
        for (;;) {
            p *= rng_unit(r);
            if (p <= limit) {
                return k;
            }
            k++;
        }
    }
    double x = floor(mean + sqrt(mean) * rng_gauss(r) + 0.5);
    if (x <= 0.0) {
        return 0;
    }
    return x >= 4294967295.0 ? UINT32_MAX : (uint32_t)x;
}

#endif

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by iSCSI, ext4 and the sddaq
 * raw storage format. sdd_crc32c() uses the SSE4.2 crc32 instruction when the CPU has it
 * (checked once at run time) and a table-driven (slicing-by-8) version otherwise; both give the
 * same results. Thread-safe, never blocks, never fails. */
#ifndef SDDAQ_CRC32C_H
#define SDDAQ_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sddaq/api.h"

/* The standard check value: sdd_crc32c(0, "123456789", 9). */
#define SDD_CRC32C_CHECK 0xE3069283u

/* CRC-32C of len bytes at buf, continuing from crc: pass 0 to start, and the previous result to
 * continue, so sdd_crc32c(sdd_crc32c(0, a, na), b, nb) equals the CRC of a followed by b. The
 * initial and final inversions are done inside. buf may be NULL when len is 0. */
SDD_API uint32_t sdd_crc32c(uint32_t crc, const void *buf, size_t len);

/* The portable table-driven implementation (same contract); for tests and benchmarks. */
SDD_API uint32_t sdd_crc32c_sw(uint32_t crc, const void *buf, size_t len);

/* Does this CPU run the hardware (SSE4.2) implementation? */
SDD_API bool sdd_crc32c_hw_available(void);

/* The hardware implementation (same contract). Only call it when sdd_crc32c_hw_available(). */
SDD_API uint32_t sdd_crc32c_hw(uint32_t crc, const void *buf, size_t len);

#endif

/* Shared inside the config code (config*.c): the spelling of every enumeration, the diagnostic
 * collector and the defaults. Not installed. */
#ifndef SDDAQ_CTL_CONFIG_INTERNAL_H
#define SDDAQ_CTL_CONFIG_INTERNAL_H

#include <stdarg.h>

#include "sddaq/config.h"

/* NULL-terminated name tables, indexed by the enum value. */
extern const char *const cfg_provider_names[];
extern const char *const cfg_stage_type_names[];
extern const char *const cfg_source_kind_names[];
extern const char *const cfg_frag_dist_names[];
extern const char *const cfg_algo_names[];
extern const char *const cfg_writer_names[];
extern const char *const cfg_transport_names[];
extern const char *const cfg_frame_format_names[];
extern const char *const cfg_frame_missing_names[];
extern const char *const cfg_rich_method_names[];
extern const char *const cfg_rich_fit_names[];
extern const char *const cfg_off_on_names[];
extern const char *const cfg_transfer_names[];

/* Defaults that fill and emit share. */
#define CFG_DEFAULT_CONTROL_PORT 7020u
#define CFG_DEFAULT_HOST         "127.0.0.1"
#define CFG_DEFAULT_NODE         "local"
#define CFG_DEFAULT_DURATION_S   10.0

/* Record one problem. file may be NULL ("<input>"); line 0 = no position; key may be NULL
 * or "" (no key part). Never fails: without memory the entry is counted, not stored. */
void cfg_diag_add(struct sdd_config_diag *d, const char *file, uint32_t line, uint32_t col,
                  const char *key, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
void cfg_diag_vadd(struct sdd_config_diag *d, const char *file, uint32_t line, uint32_t col,
                   const char *key, const char *fmt, va_list ap)
    __attribute__((format(printf, 6, 0)));

/* "a, b, c" from a name table, into buf. */
void cfg_join_names(const char *const *names, char *buf, size_t len);

#endif

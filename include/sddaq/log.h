/* Levelled, component-tagged logging to stderr. The level comes from the SDDAQ_LOG environment
 * variable, read once: "debug", or per component "fabric=trace,boot=debug,warn" (a bare level
 * sets the default). Lines look like "  12.345678 W fabric: message". Thread-safe: each line is
 * one write. Nothing above SDD_LOG_TRACE belongs in a hot loop. */
#ifndef SDDAQ_LOG_H
#define SDDAQ_LOG_H

#include <stdbool.h>

#include "sddaq/api.h"

typedef enum {
    SDD_LOG_NONE = 0,
    SDD_LOG_ERROR,
    SDD_LOG_WARN,
    SDD_LOG_INFO,
    SDD_LOG_DEBUG,
    SDD_LOG_TRACE,
} sdd_log_level;

/* Is a message of this level for this component printed? Cheap; use before costly formatting. */
SDD_API bool sdd_log_enabled(sdd_log_level level, const char *component);

/* Print one line if enabled. component is a short tag such as "fabric". */
SDD_API void sdd_log(sdd_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Override the configuration (same syntax as SDDAQ_LOG); NULL restores the environment's. */
SDD_API void sdd_log_configure(const char *spec);

/* Parse a level name ("error", "warn", "info", "debug", "trace", "none"); -1 if unknown. */
SDD_API int sdd_log_level_parse(const char *name);

#define SDD_ERROR(comp, ...) sdd_log(SDD_LOG_ERROR, comp, __VA_ARGS__)
#define SDD_WARN(comp, ...)  sdd_log(SDD_LOG_WARN, comp, __VA_ARGS__)
#define SDD_INFO(comp, ...)  sdd_log(SDD_LOG_INFO, comp, __VA_ARGS__)
#define SDD_DEBUG(comp, ...) sdd_log(SDD_LOG_DEBUG, comp, __VA_ARGS__)
#define SDD_TRACE(comp, ...) sdd_log(SDD_LOG_TRACE, comp, __VA_ARGS__)

#endif

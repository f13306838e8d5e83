/* Logging: per-component levels parsed from SDDAQ_LOG, one formatted write per line. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sddaq/clock.h"
#include "sddaq/log.h"

#define MAX_RULES     16
#define MAX_COMPONENT 24

struct log_rule {
    char component[MAX_COMPONENT];
    sdd_log_level level;
};

/* An immutable configuration; reconfiguring publishes a new one and never frees the old one
 * (it is rare and tiny), so readers need no lock. */
struct log_config {
    sdd_log_level default_level;
    struct log_rule rules[MAX_RULES];
    int nrules;
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic(struct log_config *) g_config;
static uint64_t g_start_ns;

int sdd_log_level_parse(const char *name)
{
    if (name == NULL) {
        return -1;
    }
    static const char *const names[] = {"none", "error", "warn", "info", "debug", "trace"};
    for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++) {
        if (strcasecmp(name, names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

static struct log_config *parse_spec(const char *spec)
{
    struct log_config *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return NULL;
    }
    c->default_level = SDD_LOG_WARN;
    if (spec == NULL) {
        return c;
    }
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", spec);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (eq == NULL) {
            int lvl = sdd_log_level_parse(tok);
            if (lvl >= 0) {
                c->default_level = (sdd_log_level)lvl;
            }
            continue;
        }
        *eq = '\0';
        int lvl = sdd_log_level_parse(eq + 1);
        if (lvl < 0 || c->nrules == MAX_RULES || strlen(tok) >= MAX_COMPONENT) {
            continue;
        }
        struct log_rule *r = &c->rules[c->nrules++];
        snprintf(r->component, sizeof(r->component), "%s", tok);
        r->level = (sdd_log_level)lvl;
    }
    return c;
}

/* Replaced configurations stay reachable here (a reader may still hold one); the list only
 * grows with explicit reconfiguration, which is rare. */
static struct log_config *g_retired[64];
static _Atomic int g_nretired;

static void publish(const char *spec)
{
    struct log_config *c = parse_spec(spec);
    if (c == NULL) {
        return;
    }
    /* Pairs with the acquire load in current_config(). */
    struct log_config *old = atomic_exchange_explicit(&g_config, c, memory_order_acq_rel);
    int slot = atomic_fetch_add_explicit(&g_nretired, 1, memory_order_relaxed);
    if (old != NULL && slot < (int)(sizeof(g_retired) / sizeof(g_retired[0]))) {
        g_retired[slot] = old;
    }
}

static void init_once(void)
{
    g_start_ns = sdd_now_ns();
    publish(getenv("SDDAQ_LOG"));
}

static const struct log_config *current_config(void)
{
    pthread_once(&g_once, init_once);
    /* Pairs with the release store in publish(). */
    return atomic_load_explicit(&g_config, memory_order_acquire);
}

void sdd_log_configure(const char *spec)
{
    pthread_once(&g_once, init_once);
    publish(spec ? spec : getenv("SDDAQ_LOG"));
}

bool sdd_log_enabled(sdd_log_level level, const char *component)
{
    const struct log_config *c = current_config();
    sdd_log_level limit = c ? c->default_level : SDD_LOG_WARN;
    for (int i = 0; c && i < c->nrules; i++) {
        if (component && strcmp(c->rules[i].component, component) == 0) {
            limit = c->rules[i].level;
            break;
        }
    }
    return level > SDD_LOG_NONE && level <= SDD_LOG_TRACE && level <= limit;
}

void sdd_log(sdd_log_level level, const char *component, const char *fmt, ...)
{
    if (!sdd_log_enabled(level, component)) {
        return;
    }
    static const char tags[] = "-EWIDT";
    char line[1024];
    const size_t room = sizeof(line) - 1; /* keep one byte for the newline */
    uint64_t t = sdd_now_ns() - g_start_ns;
    int n = snprintf(line, room, "%4llu.%06llu %c %.32s: ", (unsigned long long)(t / SDD_NS_PER_S),
                     (unsigned long long)(t % SDD_NS_PER_S / 1000), tags[level],
                     component ? component : "-");
    size_t len = n < 0 ? 0 : (size_t)n < room ? (size_t)n : room - 1;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + len, room - len, fmt, ap);
    va_end(ap);
    if (m > 0) {
        len += (size_t)m < room - len ? (size_t)m : room - len - 1;
    }
    line[len++] = '\n';
    /* One write() per line keeps lines from different threads and processes whole. */
    ssize_t rc = write(STDERR_FILENO, line, len);
    (void)rc;
}

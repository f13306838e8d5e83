/* Errors and logging: every code has a distinct name and a non-empty message, unknown codes get
 * placeholders, errno values map as documented; log specs set default and per-component levels
 * as sdd_log_enabled reports them, and enabled lines reach stderr in the documented shape. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "sddaq/log.h"

struct code {
    sdd_err value;
    const char *name;
};

static const struct code codes[] = {
#define CODE_ENTRY(name, value, msg) {value, #name},
    SDD_ERR_MAP(CODE_ENTRY)
#undef CODE_ENTRY
};
#define NCODES (sizeof(codes) / sizeof(codes[0]))

static void test_error_table(void)
{
    CHECK(NCODES >= 21);
    for (size_t i = 0; i < NCODES; i++) {
        const char *name = sdd_errname(codes[i].value);
        const char *msg = sdd_strerror(codes[i].value);
        CHECK(strcmp(name, codes[i].name) == 0);
        CHECK(msg != NULL && msg[0] != '\0');
        CHECK(strcmp(msg, "unknown error") != 0);
        CHECK(codes[i].value <= 0);
        for (size_t j = 0; j < i; j++) {
            CHECK(codes[i].value != codes[j].value);
            CHECK(strcmp(name, sdd_errname(codes[j].value)) != 0);
            CHECK(strcmp(msg, sdd_strerror(codes[j].value)) != 0);
        }
    }
    CHECK_EQ(SDD_OK, 0);
    /* Foreign values: placeholders, never NULL. */
    const sdd_err foreign[] = {1, 42, -1000, -99, (sdd_err)0x80000000u};
    for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++) {
        CHECK(strcmp(sdd_strerror(foreign[i]), "unknown error") == 0);
        CHECK(strcmp(sdd_errname(foreign[i]), "EUNKNOWN") == 0);
    }
}

static void test_errno_mapping(void)
{
    static const struct {
        int errnum;
        sdd_err want;
    } map[] = {
        {0, SDD_OK},
        {EINVAL, SDD_EINVAL},
        {ENOMEM, SDD_ENOMEM},
        {EAGAIN, SDD_EAGAIN},
        {EWOULDBLOCK, SDD_EAGAIN},
        {EINTR, SDD_EAGAIN},
        {ETIMEDOUT, SDD_ETIMEDOUT},
        {ECONNREFUSED, SDD_ECONNREFUSED},
        {ECONNRESET, SDD_ECONNRESET},
        {EPIPE, SDD_ECONNRESET},
        {ECONNABORTED, SDD_ECONNRESET},
        {EHOSTUNREACH, SDD_EPEERDEAD},
        {ENETUNREACH, SDD_EPEERDEAD},
        {ESRCH, SDD_EPEERDEAD},
        {EPROTO, SDD_EPROTO},
        {ENOTSUP, SDD_ENOTSUP},
        {EIO, SDD_EIO},
        {EMSGSIZE, SDD_ETOOBIG},
        {E2BIG, SDD_ETOOBIG},
        {EOVERFLOW, SDD_ETOOBIG},
        {EACCES, SDD_EACCES},
        {EPERM, SDD_EACCES},
        {ENOENT, SDD_ENOENT},
        {EBUSY, SDD_EBUSY},
        {EADDRINUSE, SDD_EBUSY},
        {ECANCELED, SDD_ECANCELED},
        {ENOSPC, SDD_EOS}, /* no closer code: the generic OS error */
        {EBADF, SDD_EOS},
        {12345, SDD_EOS},
        {-1, SDD_EOS},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        sdd_err got = sdd_err_from_errno(map[i].errnum);
        if (got != map[i].want) {
            fprintf(stderr, "errno %d (%s): got %s, want %s\n", map[i].errnum,
                    strerror(map[i].errnum), sdd_errname(got), sdd_errname(map[i].want));
        }
        CHECK_EQ(got, map[i].want);
    }
}

static void test_level_parse(void)
{
    CHECK_EQ(sdd_log_level_parse("none"), SDD_LOG_NONE);
    CHECK_EQ(sdd_log_level_parse("error"), SDD_LOG_ERROR);
    CHECK_EQ(sdd_log_level_parse("warn"), SDD_LOG_WARN);
    CHECK_EQ(sdd_log_level_parse("info"), SDD_LOG_INFO);
    CHECK_EQ(sdd_log_level_parse("debug"), SDD_LOG_DEBUG);
    CHECK_EQ(sdd_log_level_parse("trace"), SDD_LOG_TRACE);
    CHECK_EQ(sdd_log_level_parse("TRACE"), SDD_LOG_TRACE);
    CHECK_EQ(sdd_log_level_parse("Warn"), SDD_LOG_WARN);
    CHECK_EQ(sdd_log_level_parse("warning"), -1);
    CHECK_EQ(sdd_log_level_parse(""), -1);
    CHECK_EQ(sdd_log_level_parse("5"), -1);
}

static void test_log_spec(void)
{
    /* Default without configuration is warn. */
    sdd_log_configure("");
    CHECK(sdd_log_enabled(SDD_LOG_ERROR, "x"));
    CHECK(sdd_log_enabled(SDD_LOG_WARN, "x"));
    CHECK(!sdd_log_enabled(SDD_LOG_INFO, "x"));
    CHECK(!sdd_log_enabled(SDD_LOG_NONE, "x"));

    /* A bare level sets the default. */
    sdd_log_configure("debug");
    CHECK(sdd_log_enabled(SDD_LOG_DEBUG, "fabric"));
    CHECK(!sdd_log_enabled(SDD_LOG_TRACE, "fabric"));
    CHECK(sdd_log_enabled(SDD_LOG_INFO, NULL));

    /* Per-component rules override the default, which the bare level sets in any position. */
    sdd_log_configure("fabric=trace,boot=debug,error");
    CHECK(sdd_log_enabled(SDD_LOG_TRACE, "fabric"));
    CHECK(sdd_log_enabled(SDD_LOG_DEBUG, "boot"));
    CHECK(!sdd_log_enabled(SDD_LOG_TRACE, "boot"));
    CHECK(sdd_log_enabled(SDD_LOG_ERROR, "core"));
    CHECK(!sdd_log_enabled(SDD_LOG_WARN, "core"));
    CHECK(!sdd_log_enabled(SDD_LOG_WARN, NULL));
    CHECK(!sdd_log_enabled(SDD_LOG_TRACE, "fabricx")); /* exact component match only */

    /* "none" silences a component, even for errors; the level is never enabled by itself. */
    sdd_log_configure("core=none,info");
    CHECK(!sdd_log_enabled(SDD_LOG_ERROR, "core"));
    CHECK(sdd_log_enabled(SDD_LOG_INFO, "fabric"));
    CHECK(!sdd_log_enabled(SDD_LOG_NONE, "fabric"));

    /* Unknown levels and empty pieces are ignored; the rest still applies. */
    sdd_log_configure("loud,fabric=shouty,,boot=trace");
    CHECK(sdd_log_enabled(SDD_LOG_WARN, "x"));
    CHECK(!sdd_log_enabled(SDD_LOG_INFO, "x"));
    CHECK(!sdd_log_enabled(SDD_LOG_INFO, "fabric"));
    CHECK(sdd_log_enabled(SDD_LOG_TRACE, "boot"));

    /* Case-insensitive level names. */
    sdd_log_configure("core=DEBUG");
    CHECK(sdd_log_enabled(SDD_LOG_DEBUG, "core"));

    /* NULL goes back to the environment variable. */
    CHECK_REQUIRE(setenv("SDDAQ_LOG", "info,core=error", 1) == 0);
    sdd_log_configure(NULL);
    CHECK(sdd_log_enabled(SDD_LOG_INFO, "x"));
    CHECK(!sdd_log_enabled(SDD_LOG_DEBUG, "x"));
    CHECK(!sdd_log_enabled(SDD_LOG_WARN, "core"));
    CHECK_REQUIRE(unsetenv("SDDAQ_LOG") == 0);
    sdd_log_configure(NULL);
    CHECK(sdd_log_enabled(SDD_LOG_WARN, "x"));
    CHECK(!sdd_log_enabled(SDD_LOG_INFO, "x"));

    /* An over-long spec does not crash. */
    char longspec[2048];
    memset(longspec, 'a', sizeof(longspec) - 1);
    longspec[sizeof(longspec) - 1] = '\0';
    sdd_log_configure(longspec);
    CHECK(sdd_log_enabled(SDD_LOG_WARN, "x"));
}

/* Run sdd_log with stderr redirected into a temporary file; return what was written. */
static size_t capture_log(sdd_log_level level, const char *component, const char *msg, char *out,
                          size_t size)
{
    FILE *tmp = tmpfile();
    CHECK_REQUIRE(tmp != NULL);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    CHECK_REQUIRE(saved >= 0 && dup2(fileno(tmp), STDERR_FILENO) >= 0);
    sdd_log(level, component, "%s", msg);
    CHECK_REQUIRE(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, size - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
    return n;
}

static void test_log_output(void)
{
    char buf[2048];
    sdd_log_configure("warn,fabric=debug");
    CHECK(capture_log(SDD_LOG_WARN, "core", "pool refused 3", buf, sizeof(buf)) > 0);
    CHECK(strstr(buf, " W core: pool refused 3\n") != NULL);
    CHECK(strchr(buf, '\n') == buf + strlen(buf) - 1); /* exactly one line */

    CHECK(capture_log(SDD_LOG_DEBUG, "fabric", "posted", buf, sizeof(buf)) > 0);
    CHECK(strstr(buf, " D fabric: posted\n") != NULL);

    CHECK_EQ(capture_log(SDD_LOG_INFO, "core", "hidden", buf, sizeof(buf)), 0);
    CHECK_EQ(capture_log(SDD_LOG_TRACE, "fabric", "hidden", buf, sizeof(buf)), 0);

    /* A message longer than the line buffer is cut, still one line ending in a newline. */
    char longmsg[4000];
    memset(longmsg, 'm', sizeof(longmsg) - 1);
    longmsg[sizeof(longmsg) - 1] = '\0';
    size_t n = capture_log(SDD_LOG_ERROR, "core", longmsg, buf, sizeof(buf));
    CHECK(n > 100 && n < sizeof(longmsg));
    CHECK(n > 0 && buf[n - 1] == '\n');
    CHECK(strchr(buf, '\n') == buf + n - 1);
    sdd_log_configure("");
}

int main(void)
{
    test_error_table();
    test_errno_mapping();
    test_level_parse();
    test_log_spec();
    test_log_output();
    return check_finish();
}

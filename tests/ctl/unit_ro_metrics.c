/* A readout receiver's own counters in /metrics (run_readout_metrics.c): real datagrams sent to
 * a real NA62 receiver show up, while it runs, as the stage's series (datagrams read, refused
 * by reason, every reason present with its zero, the open-bursts gauge), summed over a second
 * receiver of the same stage (a source that feeds two readout units); registering a stage's
 * series twice is refused and leaves the first set alone; removed, none is left. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "ctl/run_internal.h"
#include "sddaq/clock.h"

#define SHORT_SENT 7

static char *render(sdd_metrics *m)
{
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(sdd_metrics_render(m, &text, &len));
    return text;
}

/* Lines of text that start with prefix. */
static int lines_with(const char *text, const char *prefix)
{
    int n = 0;
    size_t pl = strlen(prefix);
    for (const char *p = text; p != NULL && *p != '\0';) {
        n += strncmp(p, prefix, pl) == 0;
        p = strchr(p, '\n');
        p = p != NULL ? p + 1 : NULL;
    }
    return n;
}

/* Wait until rx has read n datagrams (5 s at most); the count read. */
static uint64_t wait_read(const sdd_ro_rx *rx, uint64_t n)
{
    struct sdd_ro_counters c = {0};
    uint64_t t0 = sdd_now_ns();
    while (c.datagrams < n && sdd_now_ns() - t0 < 5 * SDD_NS_PER_S) {
        sdd_sleep_ns(SDD_NS_PER_MS);
        sdd_ro_rx_counters(rx, &c);
    }
    return c.datagrams;
}

static sdd_ro_rx *receiver(void)
{
    struct sdd_ro_rx_opts o;
    sdd_ro_rx_opts_default(&o, SDD_RO_FMT_NA62);
    o.host = "127.0.0.1";
    o.port = 0;
    sdd_ro_rx *rx = NULL;
    CHECK_REQUIRE(sdd_ro_rx_create(&o, &rx) == SDD_OK);
    CHECK_REQUIRE(sdd_ro_rx_start(rx) == SDD_OK);
    return rx;
}

static void send_short(uint16_t port, int count)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK_REQUIRE(fd >= 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    for (int i = 0; i < count; i++) {
        CHECK(sendto(fd, "abc", 3, 0, (struct sockaddr *)&to, sizeof(to)) == 3);
    }
    close(fd);
}

int main(void)
{
    sdd_ro_rx *rx = receiver();
    sdd_metrics *m = NULL;
    CHECK_REQUIRE(sdd_metrics_create(&m) == SDD_OK);
    struct sdd_cfg_stage cfg;
    sdd_config_stage_init(&cfg, SDD_STAGE_SOURCE);
    strcpy(cfg.name, "tel62");
    strcpy(cfg.node, "daq1");
    struct run_stage st = {.cfg = &cfg};

    struct run_ro_metrics *x = NULL, *again = NULL;
    CHECK_OK(run_ro_metrics_register(m, &st, rx, &x));
    char *before = render(m);
    CHECK(strstr(before, "sddaq_source_datagrams_total{stage=\"tel62\",node=\"daq1\"} 0\n") !=
          NULL);
    int series = lines_with(before, "sddaq_source_");
    CHECK(series == 11 + SDD_RO_REASON_COUNT - 1); /* every reason but OK */
    free(before);
    CHECK(run_ro_metrics_register(m, &st, rx, &again) == SDD_EBUSY);
    char *after = render(m);
    CHECK(lines_with(after, "sddaq_source_") == series);
    free(after);

    /* Refused as SHORT, and read from the receiver at the scrape, not at the end. */
    send_short(sdd_ro_rx_port(rx), SHORT_SENT);
    CHECK_EQ(wait_read(rx, SHORT_SENT), SHORT_SENT);
    char *text = render(m);
    CHECK(strstr(text, "sddaq_source_datagrams_total{stage=\"tel62\",node=\"daq1\"} 7\n") != NULL);
    CHECK(strstr(text, "sddaq_source_packets_corrupt_total{stage=\"tel62\",node=\"daq1\","
                       "reason=\"SHORT\"} 7\n") != NULL);
    CHECK(strstr(text, "sddaq_source_packets_corrupt_total{stage=\"tel62\",node=\"daq1\","
                       "reason=\"CHECKSUM\"} 0\n") != NULL);
    CHECK(strstr(text, "# TYPE sddaq_source_open_bursts gauge\n") != NULL);
    CHECK(strstr(text, "# TYPE sddaq_source_packets_lost_total counter\n") != NULL);
    free(text);

    /* A second receiver of the stage: its datagrams add to the same series. */
    sdd_ro_rx *rx2 = receiver();
    CHECK_OK(run_ro_metrics_add(x, rx2));
    send_short(sdd_ro_rx_port(rx2), 3);
    CHECK_EQ(wait_read(rx2, 3), 3);
    char *both = render(m);
    CHECK(strstr(both, "sddaq_source_datagrams_total{stage=\"tel62\",node=\"daq1\"} 10\n") != NULL);
    CHECK(strstr(both, "sddaq_source_packets_corrupt_total{stage=\"tel62\",node=\"daq1\","
                       "reason=\"SHORT\"} 10\n") != NULL);
    CHECK(lines_with(both, "sddaq_source_") == series);
    free(both);

    run_ro_metrics_remove(x);
    run_ro_metrics_remove(NULL);
    char *gone = render(m);
    CHECK(lines_with(gone, "sddaq_source_") == 0);
    free(gone);
    sdd_metrics_destroy(m);
    sdd_ro_rx_stop(rx);
    sdd_ro_rx_destroy(rx);
    sdd_ro_rx_stop(rx2);
    sdd_ro_rx_destroy(rx2);
    return check_finish();
}

/* A readout receiver's own counters in /metrics (run_readout_metrics.c): real datagrams sent to
 * a real NA62 receiver show up, while it runs, as the stage's series (datagrams read, refused
 * by reason, every reason present with its zero, the open-bursts gauge), summed over a second
 * receiver of the same stage (a source that feeds two readout units); registering a stage's
 * series twice is refused and leaves the first set alone; removed, none is left. A packet
 * counted lost that comes after all does not take the lost counter back down (a Prometheus
 * counter that falls reads as a restart). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "ctl/run_internal.h"
#include "sddaq/clock.h"
#include "sddaq/rich.h"

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

/* A source stage named name on node, configured in *cfg. */
static struct run_stage source_stage(struct sdd_cfg_stage *cfg, const char *name, const char *node)
{
    sdd_config_stage_init(cfg, SDD_STAGE_SOURCE);
    snprintf(cfg->name, sizeof(cfg->name), "%s", name);
    snprintf(cfg->node, sizeof(cfg->node), "%s", node);
    return (struct run_stage){.cfg = cfg};
}

/* Board 0's NA62 packet with this sequence number (one one-hit event), sent to port. */
static void send_na62(int fd, uint16_t port, uint32_t seq)
{
    uint8_t buf[SDD_RICH_PKT_MAX];
    sdd_rich_pkt_builder b;
    CHECK_OK(sdd_rich_pkt_begin(&b, buf, sizeof(buf), 0, seq, 5));
    uint16_t hit = SDD_RICH_HIT(3, 0);
    CHECK_OK(sdd_rich_pkt_add(&b, 100 + seq, 0, &hit, 1));
    size_t len = sdd_rich_pkt_end(&b);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    CHECK(sendto(fd, buf, len, 0, (struct sockaddr *)&to, sizeof(to)) == (ssize_t)len);
}

/* Packets 0 and 2: 1 lost, shown; then 1 comes: the receiver's count goes back to 0, the
 * series stays at 1 (and reordered shows 1). */
static void lost_never_falls(void)
{
    sdd_ro_rx *rx = receiver();
    sdd_metrics *m = NULL;
    CHECK_REQUIRE(sdd_metrics_create(&m) == SDD_OK);
    struct sdd_cfg_stage cfg;
    struct run_stage st = source_stage(&cfg, "b0", "n");
    struct run_ro_metrics *x = NULL;
    CHECK_OK(run_ro_metrics_register(m, &st, rx, &x));
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK_REQUIRE(fd >= 0);
    send_na62(fd, sdd_ro_rx_port(rx), 0);
    send_na62(fd, sdd_ro_rx_port(rx), 2);
    CHECK_EQ(wait_read(rx, 2), 2);
    char *one = render(m);
    CHECK(strstr(one, "sddaq_source_packets_lost_total{stage=\"b0\",node=\"n\"} 1\n") != NULL);
    free(one);
    send_na62(fd, sdd_ro_rx_port(rx), 1);
    CHECK_EQ(wait_read(rx, 3), 3);
    struct sdd_ro_counters c;
    sdd_ro_rx_counters(rx, &c);
    CHECK_EQ(c.lost, 0); /* the receiver took it back */
    char *later = render(m);
    CHECK(strstr(later, "sddaq_source_packets_lost_total{stage=\"b0\",node=\"n\"} 1\n") != NULL);
    CHECK(strstr(later, "sddaq_source_packets_reordered_total{stage=\"b0\",node=\"n\"} 1\n") !=
          NULL);
    free(later);
    close(fd);
    run_ro_metrics_remove(x);
    sdd_metrics_destroy(m);
    sdd_ro_rx_stop(rx);
    sdd_ro_rx_destroy(rx);
}

int main(void)
{
    sdd_ro_rx *rx = receiver();
    sdd_metrics *m = NULL;
    CHECK_REQUIRE(sdd_metrics_create(&m) == SDD_OK);
    struct sdd_cfg_stage cfg;
    struct run_stage st = source_stage(&cfg, "tel62", "daq1");

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
    lost_never_falls();
    return check_finish();
}

/* hello_rma: the smallest complete use of the sddaq transport. A receiver registers a buffer
 * and listens; a sender connects (learning the buffer's key from the bootstrap), writes a
 * greeting into it with RMA and 64-bit immediate data, and the receiver prints what landed.
 *
 *   hello_rma [provider]                 both sides in one run (forks), default tcp
 *   hello_rma recv PROVIDER PORT         receiver only
 *   hello_rma send PROVIDER HOST PORT    sender only
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sddaq/sddaq.h>

static sdd_ep *open_ep(const char *provider)
{
    struct sdd_ep_opts opts;
    sdd_ep_opts_default(&opts);
    opts.provider = provider;
    sdd_ep *ep = NULL;
    sdd_err err = sdd_ep_open(&opts, &ep);
    if (err != SDD_OK) {
        fprintf(stderr, "cannot open %s: %s\n", provider, sdd_strerror(err));
        exit(1);
    }
    return ep;
}

/* Receiver: announce the buffer's key to whoever connects, wait for one write. */
static int receiver(const char *provider, uint16_t port, int port_pipe)
{
    sdd_ep *ep = open_ep(provider);
    static char inbox[256];
    sdd_mr *mr = NULL;
    sdd_listener *l = NULL;
    sdd_peer *peer = NULL;
    struct sdd_rkey key;
    int rc = 1;
    if (sdd_mr_reg(ep, inbox, sizeof(inbox), SDD_ACCESS_REMOTE_WRITE, &mr) != SDD_OK ||
        sdd_ep_listen(ep, "127.0.0.1", port, &l) != SDD_OK) {
        goto out_close_ep;
    }
    port = sdd_listener_port(l);
    if (port_pipe >= 0) {
        (void)!write(port_pipe, &port, sizeof(port));
    }
    printf("receiver: %s, listening on 127.0.0.1:%u\n", sdd_ep_info(ep)->provider, port);
    sdd_mr_rkey(mr, &key);
    if (sdd_listener_accept(l, &key, sizeof(key), 10000, &peer) != SDD_OK) {
        goto out_close_ep;
    }
    struct sdd_cqe cqe;
    /* Keep polling: on software providers the target's polling moves the write along. */
    while (sdd_ep_wait(ep, &cqe, 1, 10000) == 1) {
        if (cqe.kind == SDD_CQE_REMOTE_WRITE) {
            printf("receiver: \"%s\" arrived with immediate 0x%llx\n", inbox,
                   (unsigned long long)cqe.imm);
            rc = 0;
            break;
        }
        if (cqe.status != SDD_OK) {
            fprintf(stderr, "receiver: %s\n", sdd_strerror(cqe.status));
            break;
        }
    }
out_close_ep:
    sdd_ep_close(ep); /* closes the peer, listener and region too */
    return rc;
}

/* Sender: connect, take the key from the receiver's info blob, write, wait for completion. */
static int sender(const char *provider, const char *host, uint16_t port)
{
    sdd_ep *ep = open_ep(provider);
    static char outbox[256] = "hello from sddaq";
    sdd_mr *mr = NULL;
    sdd_peer *peer = NULL;
    int rc = 1;
    if (sdd_mr_reg(ep, outbox, sizeof(outbox), SDD_ACCESS_LOCAL, &mr) != SDD_OK ||
        sdd_ep_connect(ep, host, port, NULL, 0, 10000, &peer) != SDD_OK) {
        goto out_close_ep;
    }
    size_t len = 0;
    const struct sdd_rkey *key = sdd_peer_info(peer, &len);
    if (len != sizeof(*key)) {
        goto out_close_ep;
    }
    sdd_err err;
    /* The first post may find the connection still forming: progress and retry. */
    while ((err = sdd_ep_post_write_imm(ep, peer, outbox, strlen(outbox) + 1, mr, key, 0, 0x5dda9,
                                        NULL)) == SDD_EAGAIN) {
        struct sdd_cqe c;
        sdd_ep_poll(ep, &c, 1);
    }
    struct sdd_cqe cqe;
    if (err == SDD_OK && sdd_ep_wait(ep, &cqe, 1, 10000) == 1 && cqe.status == SDD_OK) {
        printf("sender: wrote \"%s\"\n", outbox);
        rc = 0;
    }
out_close_ep:
    sdd_ep_close(ep);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "recv") == 0) {
        return receiver(argv[2], (uint16_t)atoi(argv[3]), -1);
    }
    if (argc >= 5 && strcmp(argv[1], "send") == 0) {
        return sender(argv[2], argv[3], (uint16_t)atoi(argv[4]));
    }
    const char *provider = argc > 1 ? argv[1] : "tcp";
    int fds[2];
    if (pipe(fds) != 0) {
        return 1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        int rc = receiver(provider, 0, fds[1]);
        fflush(NULL);
        _exit(rc);
    }
    close(fds[1]);
    uint16_t port = 0;
    if (read(fds[0], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
        return 1;
    }
    int rc = sender(provider, "127.0.0.1", port);
    int status = 0;
    waitpid(pid, &status, 0);
    return rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

/* Control-message slots of a remote-memory endpoint (internal): one registered area holds the
 * receive slots, which stay posted, and the send slots, handed out one per message and freed
 * by the send's completion. Completions are recognised by their ctx, which points at a slot. */
#ifndef SDDAQ_RMEM_CTL_H
#define SDDAQ_RMEM_CTL_H

#include <stdbool.h>
#include <stdint.h>

#include "rmem/wire.h"
#include "sddaq/fabric.h"

#define RM_CTL_SLOT 256 /* bytes per slot: every server/client control message fits */

struct rm_ctl {
    sdd_ep *ep;
    uint8_t *mem;
    sdd_mr *mr;
    uint32_t rx_slots, tx_slots;
    uint32_t *tx_free; /* stack of free send slots */
    uint32_t tx_nfree;
};

enum rm_ctl_event {
    RM_CTL_NOT_MINE = 0, /* the completion belongs to someone else */
    RM_CTL_SENT,         /* a send slot came back (status in the cqe) */
    RM_CTL_RECEIVED,     /* a message arrived: decoded into *msg, or *decode_err set */
    RM_CTL_RX_FAILED,    /* a receive slot failed (endpoint closing); not re-posted */
};

/* Register rx + tx slots on ep and post every receive slot. */
sdd_err rm_ctl_init(struct rm_ctl *c, sdd_ep *ep, uint32_t rx_slots, uint32_t tx_slots);

/* Free the slots' memory. Call after sdd_ep_close(), which cancels the posted receives and
 * closes the registration: memory must outlive the operations that use it. */
void rm_ctl_fini(struct rm_ctl *c);

/* Encode and send m to peer from a free slot: SDD_EAGAIN when no slot or queue space is free
 * (drive completions and retry), other errors from the transport. */
sdd_err rm_ctl_send(struct rm_ctl *c, sdd_peer *peer, const struct rm_msg *m);

/* Classify cqe. For RM_CTL_RECEIVED the message (inline data included) stays valid until
 * rm_ctl_repost() is called with the same cqe, which the caller must do. */
enum rm_ctl_event rm_ctl_classify(struct rm_ctl *c, const struct sdd_cqe *cqe, struct rm_msg *msg,
                                  sdd_err *decode_err);
sdd_err rm_ctl_repost(struct rm_ctl *c, const struct sdd_cqe *cqe);

/* A received control message, for rm_ctl_handle(). */
typedef void (*rm_ctl_msg_fn)(void *owner, const struct sdd_cqe *cqe, const struct rm_msg *msg);

/* Handle cqe if it belongs to a control slot: a well-formed message goes to fn, a malformed
 * one is logged and counted in *bad, and the receive slot is posted again. True when the cqe
 * was ours (nothing left to do for the caller). */
bool rm_ctl_handle(struct rm_ctl *c, const struct sdd_cqe *cqe, rm_ctl_msg_fn fn, void *owner,
                   uint64_t *bad);

/* True when every send slot is back (nothing of ours in flight). */
bool rm_ctl_idle(const struct rm_ctl *c);

#endif

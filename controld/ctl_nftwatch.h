/* controld stage: the watch over fgex's own kernel state. Two netlink monitor sockets, read by
 * controld's loop at every turn without blocking: nftables' change notifications
 * (NFNLGRP_NFTABLES) for the services' table (ctl_nft.c) and the firewall's (ctl_fw_nft.c),
 * and rtnetlink's rule and route notifications for the proxy layer's policy routing
 * (ctl_route.c). A change to one of them that another program made (`nft flush ruleset`, a
 * restart of the distribution's nftables unit, another firewall tool, `ip rule flush`) is put
 * right by writing that part whole again, with a health note (ctl_health.h) and a counter that
 * `status` shows. controld's own changes are told apart by the netlink port id the kernel
 * stamps on each notification: the sockets that write the tables are controld's own. */
#ifndef CTL_NFTWATCH_H
#define CTL_NFTWATCH_H

#include <stdbool.h>
#include <stdint.h>

struct ctl_nft;
struct ctl_fw;
struct ctl_store;

/* Restores at once up to this many in a row; then at most one every CTL_NFTWATCH_PERIOD_MS
 * while another program keeps removing the rules (a fight must not spin controld). */
#define CTL_NFTWATCH_BURST 5
#define CTL_NFTWATCH_PERIOD_MS 1000
/* A fight is over when no foreign change came for this long. */
#define CTL_NFTWATCH_CALM_MS 10000

struct ctl_nftwatch_info {
    uint64_t restores;    /* times rules were put back since controld started */
    uint64_t last_ns;     /* unix time of the last restore; 0: none yet */
    uint64_t last_gap_ms; /* how long the rules were missing the last time, at most */
    uint64_t max_gap_ms;  /* the longest such gap */
    char last_what[160];  /* what was removed or changed the last time, and by whom */
    bool fighting;        /* another program keeps removing them: restores are rate-bounded */
};

struct ctl_nftwatch;

/* Open the monitor sockets for the tables of nft and fw (fw may be NULL). Both are borrowed
 * and must outlive the watch. *out owned by the caller (ctl_nftwatch_free()). Returns 0 or a
 * negative errno (logged). */
int ctl_nftwatch_open(struct ctl_nft *nft, struct ctl_fw *fw, struct ctl_nftwatch **out);
void ctl_nftwatch_free(struct ctl_nftwatch *w);
/* One turn of the loop: read what the kernel announced, and restore what someone else removed
 * (store: where the firewall's configuration is read). Never blocks on the sockets. now_ms: a
 * monotonic clock. */
void ctl_nftwatch_tick(struct ctl_nftwatch *w, struct ctl_store *store, uint64_t now_ms);
/* What status shows. w NULL: all zero. */
void ctl_nftwatch_get(const struct ctl_nftwatch *w, struct ctl_nftwatch_info *out);

#endif

/* nftables for the firewall: the compiled rule list (ctl_fw.c, libcommon/fwc.c) as one inet
 * table of fgex's own (default "fgex_fw", apart from the service table so that each is
 * replaced alone), written whole in one netlink batch (one kernel transaction). */
#ifndef CTL_FW_NFT_H
#define CTL_FW_NFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/addr.h"
#include "fgx/fwc.h"

/* Verdicts of the compiled rules (fgx_fwc_rule.verdict), as FwAction numbers them. */
enum ctl_fw_verdict { CTL_FW_ACCEPT = 0, CTL_FW_DROP = 1, CTL_FW_REJECT = 2 };
enum ctl_fw_hook { CTL_FW_IN = 0, CTL_FW_OUT = 1, CTL_FW_FWD = 2, CTL_FW_NHOOKS };

struct ctl_fw_plan_hook {
    bool policy_drop;
    /* No rule of the hook names an address: pieces[0] serves both families. */
    bool shared;
    /* [0] IPv4, [1] IPv6: the list's pieces, looked up in turn (borrowed) */
    const struct fgx_fwc_piece *pieces[2];
    size_t npieces[2];
};

struct ctl_fw_plan {
    bool present; /* false: no table at all (the firewall off, or nothing to do) */
    struct ctl_fw_plan_hook hook[CTL_FW_NHOOKS];
    bool allow_loopback, allow_established, drop_invalid, allow_icmp, allow_dhcp;
    /* The remote control port and who may reach it, before every rule and option: port 0
     * when controld has no --listen; nallow 0: any peer, as controld admits then. */
    uint16_t ctl_port;
    uint16_t web_port; /* the same for --web-listen's port (the dashboard) */
    const struct fgx_cidr *allow;
    size_t nallow;
};

struct ctl_fw_nft;

/* table: NULL gives "fgex_fw". *out owned by the caller (ctl_fw_nft_close()). */
int ctl_fw_nft_open(const char *table, struct ctl_fw_nft **out);
/* The most maps (DAG nodes) a table may hold. The kernel finds a set by name on a list, so a
 * batch of n new maps costs ~n^2: 2,000 maps take ~0.15 s, 9,000 ~12 s, during which controld
 * answers no one. Lists of the common shapes (many ports, many sources, ranges) need a few maps
 * whatever their length; rules that each name their own source and port need one map each. */
#define CTL_FW_MAPS_MAX 4096

struct ctl_fw_nft_stats {
    size_t maps, elements;  /* what the table holds now */
    size_t added, removed;  /* elements the change sent */
    size_t messages;        /* netlink messages in its batch */
};

/* Make the table what the plan says, in one transaction: only what changed since the last
 * apply (maps named by their place in the DAG, updated element by element), or the whole
 * table after a start or a failure. *st (may be NULL) gets what it holds and what was sent.
 * Returns 0 or a negative errno, the kernel's reason logged; a refused change leaves the
 * table as it was. */
int ctl_fw_nft_apply(struct ctl_fw_nft *n, const struct ctl_fw_plan *p,
                     struct ctl_fw_nft_stats *st);
void ctl_fw_nft_close(struct ctl_fw_nft *n);
/* For the watch (ctl_nftwatch.c): the table's name, the port id its changes carry, whether the
 * table exists as far as controld knows (the last apply made one), and forgetting what it holds
 * so that the next apply writes it whole. */
const char *ctl_fw_nft_table(const struct ctl_fw_nft *n);
uint32_t ctl_fw_nft_portid(const struct ctl_fw_nft *n);
/* The netlink socket's descriptor (a forked process keeps it, ctl_fw.c's watchdog). */
int ctl_fw_nft_fd(const struct ctl_fw_nft *n);
bool ctl_fw_nft_present(const struct ctl_fw_nft *n);
void ctl_fw_nft_forget(struct ctl_fw_nft *n);

#endif

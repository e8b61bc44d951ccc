/* The firewall's interval compiler: an ordered, first-match list of multi-field rules (each
 * field a closed range of big-endian byte strings) becomes a decision DAG whose every node
 * looks up one field in a set of disjoint intervals and goes on to a child node or ends in a
 * verdict. controld turns each node into one nftables interval verdict map (ctl_fw_nft.c), so a
 * packet costs at most one lookup per field whatever the number of rules. Pure: no nftables,
 * no I/O; the unit tests run it against a naive first-match evaluation. */
#ifndef FGX_FWC_H
#define FGX_FWC_H

#include <stddef.h>
#include <stdint.h>

#define FGX_FWC_KEY_MAX 16

/* The fields, in the order the DAG tests them (the rarely used interface names first: a node
 * is only made where some rule narrows that field, so they cost nothing when unused). */
enum fgx_fwc_dim {
    FGX_FWC_IIF,   /* input interface name, 16 bytes zero-padded */
    FGX_FWC_OIF,   /* output interface name */
    FGX_FWC_PROTO, /* layer-4 protocol, 1 byte */
    FGX_FWC_DPORT, /* 2 bytes */
    FGX_FWC_DADDR, /* 4 or 16 bytes */
    FGX_FWC_SADDR,
    FGX_FWC_SPORT,
    FGX_FWC_NDIMS
};

struct fgx_fwc_range {
    uint8_t lo[FGX_FWC_KEY_MAX], hi[FGX_FWC_KEY_MAX]; /* the first width[dim] bytes count */
};

struct fgx_fwc_rule {
    struct fgx_fwc_range f[FGX_FWC_NDIMS];
    uint32_t verdict; /* the caller's; equal verdicts are interchangeable leaves */
};

/* Where a lookup goes: a node of the program, or a verdict. */
struct fgx_fwc_target {
    uint8_t is_node;
    uint32_t v; /* node index, or the verdict */
};

/* One interval of a node's map; a value in no interval of the map matches no rule there. */
struct fgx_fwc_elem {
    uint8_t lo[FGX_FWC_KEY_MAX], hi[FGX_FWC_KEY_MAX];
    struct fgx_fwc_target to;
};

struct fgx_fwc_node {
    uint8_t dim;        /* enum fgx_fwc_dim */
    size_t first, n;    /* elems[first .. first + n), ascending, disjoint, adjacent ones merged */
};

struct fgx_fwc_limits {
    size_t max_elems; /* interval elements over all nodes */
    size_t max_work;  /* rule-list entries built while splitting (the compile's own cost) */
};

/* root: a node, a verdict (the first rule matches every packet), or none (has_root 0: no rule
 * can match, the list falls through). */
struct fgx_fwc_prog {
    struct fgx_fwc_node *nodes;
    size_t nnodes;
    struct fgx_fwc_elem *elems;
    size_t nelems;
    int has_root;
    struct fgx_fwc_target root;
};

/* Field widths in bytes for a family (4 or 6): interfaces 16, proto 1, ports 2, addresses 4 or
 * 16. */
void fgx_fwc_widths(int family, uint8_t width[FGX_FWC_NDIMS]);

/* A range that covers the whole field. */
void fgx_fwc_range_full(struct fgx_fwc_range *r, uint8_t width);

/* Compile rules[0..n) (first match wins). lim NULL: the defaults (FGX_FWC_DEFAULT_*). Returns
 * 0 with *out filled (free with fgx_fwc_prog_release()), -E2BIG when the DAG would pass a limit
 * (nothing kept: the caller splits the list, ctl_fw.c), -EINVAL for a range with lo > hi,
 * -ENOMEM. */
#define FGX_FWC_DEFAULT_MAX_ELEMS (256u * 1024u)
#define FGX_FWC_DEFAULT_MAX_WORK (32u * 1024u * 1024u)
int fgx_fwc_compile(const struct fgx_fwc_rule *rules, size_t n, const uint8_t width[FGX_FWC_NDIMS],
                    const struct fgx_fwc_limits *lim, struct fgx_fwc_prog *out);
void fgx_fwc_prog_release(struct fgx_fwc_prog *p);

/* The list as consecutive pieces, each compiled within lim: the whole list if it fits, else
 * halves, recursively (a single rule always fits). A packet goes through the pieces in order
 * and takes the first verdict, which is the list's first match. Returns 0 with *progs (an array
 * of *nprogs, free with fgx_fwc_pieces_free()), or -EINVAL, -ENOMEM. */
struct fgx_fwc_piece {
    size_t first, n; /* rules[first .. first + n) */
    struct fgx_fwc_prog prog;
};
int fgx_fwc_compile_pieces(const struct fgx_fwc_rule *rules, size_t n,
                           const uint8_t width[FGX_FWC_NDIMS], const struct fgx_fwc_limits *lim,
                           struct fgx_fwc_piece **pieces, size_t *npieces);
void fgx_fwc_pieces_free(struct fgx_fwc_piece *pieces, size_t npieces);

/* Classify one packet (key[dim]: its fields, width bytes each) through the program: 1 with
 * *verdict set, 0 when it falls through. What the kernel does with the maps, for the tests. */
int fgx_fwc_eval(const struct fgx_fwc_prog *p, const uint8_t width[FGX_FWC_NDIMS],
                 const uint8_t key[FGX_FWC_NDIMS][FGX_FWC_KEY_MAX], uint32_t *verdict);

#endif

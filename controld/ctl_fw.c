/* controld stage: the firewall (ctl_fw.h). The rule list is checked here, kept in the state
 * store as one FwConfig record (key "fw"; "fw_pending" holds the configuration to go back to
 * while a change waits for `fw confirm`), split per hook and address family into the
 * compiler's ranges (libcommon/fwc.c), and the compiled pieces go to ctl_fw_nft.c, which
 * writes the table in one transaction. */
#include "controld/ctl_fw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "controld/ctl_proc.h"
#include "fgx/fwc.h"
#include "fgx/log.h"

#define FW_KEY "fw"
#define FW_KEY_PENDING "fw_pending"
#define FW_WD_NAME "fw-watchdog" /* RUN_DIR/fw-watchdog.pid */
#define FW_WD_GRACE_MS 500       /* past the deadline: controld's own revert comes first */
#define FW_WD_FIRED 1            /* the watchdog's exit status when it wrote the table */

struct ctl_fw {
    struct ctl_fw_nft *nft;
    struct ctl_fw_guard guard;
    struct ctl_fw_state state;
    bool pending;
    uint64_t deadline_ms; /* monotonic */
    uint64_t gen;         /* bumped by every change the kernel or the pending state saw */
    /* the window's watchdog (ctl_fw_pending_arm()): the configuration it goes back to, the
     * process, the pipe's write end ('c': stand down; closed: controld is gone, the deadline
     * holds) and its socket's port id */
    struct ctl_fw_conf window_prev;
    bool has_window_prev;
    pid_t wd_pid;
    int wd_fd;
    uint32_t wd_portid;
    char *run_dir;
};

static const char *const opt_names[CTL_FW_NOPTS] = {"loopback", "established", "invalid",
                                                    "icmp", "dhcp"};

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void errf(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void errf(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;

    if (!err || len == 0)
        return;
    va_start(ap, fmt);
    (void)vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

int ctl_fw_opt_parse(const char *name)
{
    /* the words, and the short forms */
    static const struct {
        const char *name;
        int opt;
    } alias[] = {
        {"allow-loopback", CTL_FW_OPT_LOOPBACK},   {"allow-established", CTL_FW_OPT_ESTABLISHED},
        {"established-related", CTL_FW_OPT_ESTABLISHED}, {"drop-invalid", CTL_FW_OPT_INVALID},
        {"allow-icmp", CTL_FW_OPT_ICMP},           {"allow-dhcp", CTL_FW_OPT_DHCP},
    };

    if (!name)
        return -1;
    for (int i = 0; i < CTL_FW_NOPTS; i++)
        if (strcmp(name, opt_names[i]) == 0)
            return i;
    for (size_t i = 0; i < sizeof(alias) / sizeof(alias[0]); i++)
        if (strcmp(name, alias[i].name) == 0)
            return alias[i].opt;
    return -1;
}

const char *ctl_fw_opt_name(int opt)
{
    return opt >= 0 && opt < CTL_FW_NOPTS ? opt_names[opt] : "?";
}

/* ---- the model ---- */

void ctl_fw_conf_init(struct ctl_fw_conf *c)
{
    memset(c, 0, sizeof(*c));
    c->enabled = true;
    c->opt[CTL_FW_OPT_LOOPBACK] = true;
    c->opt[CTL_FW_OPT_ESTABLISHED] = true;
    c->next_id = 1;
}

void ctl_fw_conf_release(struct ctl_fw_conf *c)
{
    if (!c)
        return;
    free(c->rules);
    c->rules = NULL;
    c->n = c->cap = 0;
}

static int conf_reserve(struct ctl_fw_conf *c, size_t n)
{
    size_t ncap = c->cap ? c->cap : 16;
    struct ctl_fw_rule *nr;

    if (n <= c->cap)
        return 0;
    while (ncap < n)
        ncap *= 2;
    nr = realloc(c->rules, ncap * sizeof(*nr));
    if (!nr)
        return -ENOMEM;
    c->rules = nr;
    c->cap = ncap;
    return 0;
}

int ctl_fw_conf_insert(struct ctl_fw_conf *c, const struct ctl_fw_rule *r, size_t pos)
{
    if (conf_reserve(c, c->n + 1) < 0)
        return -ENOMEM;
    if (pos > c->n)
        pos = c->n;
    memmove(&c->rules[pos + 1], &c->rules[pos], (c->n - pos) * sizeof(*r));
    c->rules[pos] = *r;
    c->n++;
    return 0;
}

int ctl_fw_conf_copy(const struct ctl_fw_conf *src, struct ctl_fw_conf *dst)
{
    *dst = *src;
    dst->rules = NULL;
    dst->cap = 0;
    if (src->n == 0)
        return 0;
    dst->rules = malloc(src->n * sizeof(*dst->rules));
    if (!dst->rules)
        return -ENOMEM;
    memcpy(dst->rules, src->rules, src->n * sizeof(*dst->rules));
    dst->cap = src->n;
    return 0;
}

static bool all_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

int ctl_fw_conf_find(const struct ctl_fw_conf *c, const char *ref, size_t *pos)
{
    bool num = ref && all_digits(ref);
    unsigned long id = num ? strtoul(ref, NULL, 10) : 0;

    if (!ref || !*ref)
        return -ENOENT;
    for (size_t i = 0; i < c->n; i++) {
        if ((num && c->rules[i].id == id) || (!num && strcmp(c->rules[i].name, ref) == 0)) {
            *pos = i;
            return 0;
        }
    }
    return -ENOENT;
}

/* An interface name as Linux allows one (IFNAMSIZ - 1 bytes, no '/', ':' or space), with an
 * optional trailing '*' for every name that starts so. */
static bool ifname_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 15 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];

        if (ch == '*' && i == n - 1 && n > 1)
            continue;
        if (ch <= ' ' || ch >= 0x7f || ch == '/' || ch == ':' || ch == '*' || ch == '"' ||
            ch == '\\')
            return false;
    }
    return true;
}

/* Address, CIDR or interface name; *family 0 for a name or nothing. */
static int endpoint_check(const char *in, const char *what, char *canon, int *family, bool *iface,
                          char *err, size_t len)
{
    struct fgx_cidr c;

    *family = 0;
    *iface = false;
    canon[0] = '\0';
    if (!in || !*in)
        return 0;
    if (fgx_cidr_parse(in, &c) == 0) {
        *family = c.family;
        return fgx_cidr_format(&c, canon, CTL_FW_ADDR_MAX);
    }
    /* something that looks like an address but is not one is a typo, not an interface */
    if (strchr(in, '/') || (strchr(in, '.') && strspn(in, "0123456789./") == strlen(in)) ||
        (strchr(in, ':') && strspn(in, "0123456789abcdefABCDEF:./") == strlen(in))) {
        errf(err, len, "%s \"%s\" is not a valid address or prefix (host bits set?)", what, in);
        return -EINVAL;
    }
    if (!ifname_ok(in)) {
        errf(err, len, "%s \"%s\" is neither an address, a prefix nor an interface name", what,
             in);
        return -EINVAL;
    }
    *iface = true;
    (void)snprintf(canon, CTL_FW_ADDR_MAX, "%s", in);
    return 0;
}

int ctl_fw_rule_from_msg(const Fgx__Ctl__FwRule *m, struct ctl_fw_rule *out, char *err,
                         size_t len)
{
    int sfam, dfam, rc;
    bool siface, diface;

    memset(out, 0, sizeof(*out));
    out->id = m->has_id ? m->id : 0;
    out->active = m->has_active ? m->active : true;
    if (m->name) {
        if (strlen(m->name) >= CTL_FW_NAME_MAX) {
            errf(err, len, "rule name longer than %d bytes", CTL_FW_NAME_MAX - 1);
            return -EINVAL;
        }
        if (all_digits(m->name)) {
            errf(err, len, "rule name \"%s\" is a number, which fgexctl takes for an id",
                 m->name);
            return -EINVAL;
        }
        for (const char *p = m->name; *p; p++) {
            if ((unsigned char)*p <= ' ' || *p == '#') {
                errf(err, len, "rule name \"%s\": no spaces, control characters or '#'",
                     m->name);
                return -EINVAL;
            }
        }
        (void)snprintf(out->name, sizeof(out->name), "%s", m->name);
    }
    if (!m->has_action) {
        errf(err, len, "a rule needs --action accept, drop or reject");
        return -EINVAL;
    }
    if (m->action != FGX__CTL__FW_ACTION__FW_ACCEPT && m->action != FGX__CTL__FW_ACTION__FW_DROP &&
        m->action != FGX__CTL__FW_ACTION__FW_REJECT) {
        errf(err, len, "unknown action %d", (int)m->action);
        return -EINVAL;
    }
    out->action = (uint8_t)m->action;
    out->dir = m->has_dir ? (uint8_t)m->dir : CTL_FW_IN;
    if (out->dir >= CTL_FW_NHOOKS) {
        errf(err, len, "unknown direction %d", (int)m->dir);
        return -EINVAL;
    }
    out->has_sport = m->has_sport_lo;
    out->has_dport = m->has_dport_lo;
    if (out->has_sport) {
        uint32_t hi = m->has_sport_hi ? m->sport_hi : m->sport_lo;

        if (m->sport_lo > 65535 || hi > 65535 || m->sport_lo > hi) {
            errf(err, len, "source port range %u-%u: ports are 0-65535, low first",
                 (unsigned)m->sport_lo, (unsigned)hi);
            return -EINVAL;
        }
        out->sport_lo = (uint16_t)m->sport_lo;
        out->sport_hi = (uint16_t)hi;
    }
    if (out->has_dport) {
        uint32_t hi = m->has_dport_hi ? m->dport_hi : m->dport_lo;

        if (m->dport_lo > 65535 || hi > 65535 || m->dport_lo > hi) {
            errf(err, len, "destination port range %u-%u: ports are 0-65535, low first",
                 (unsigned)m->dport_lo, (unsigned)hi);
            return -EINVAL;
        }
        out->dport_lo = (uint16_t)m->dport_lo;
        out->dport_hi = (uint16_t)hi;
    }
    if (m->has_proto) {
        if (m->proto > FGX__CTL__FW_PROTO__FW_PROTO_BOTH) {
            errf(err, len, "unknown protocol %d", (int)m->proto);
            return -EINVAL;
        }
        out->proto = (uint8_t)m->proto;
        if (out->proto == CTL_FW_ANY && (out->has_sport || out->has_dport)) {
            errf(err, len, "ports need --proto tcp, udp or both, not any");
            return -EINVAL;
        }
    } else {
        out->proto = out->has_sport || out->has_dport ? CTL_FW_BOTH : CTL_FW_ANY;
    }
    rc = endpoint_check(m->src, "source", out->src, &sfam, &siface, err, len);
    if (rc == 0)
        rc = endpoint_check(m->dst, "destination", out->dst, &dfam, &diface, err, len);
    if (rc < 0)
        return -EINVAL;
    if (sfam && dfam && sfam != dfam) {
        errf(err, len, "source and destination are of different address families");
        return -EINVAL;
    }
    if (siface && out->dir == CTL_FW_OUT) {
        errf(err, len,
             "--src %s: a packet the box sends has no input interface (use --dst for the "
             "interface it leaves by, or --dir forward)",
             out->src);
        return -EINVAL;
    }
    if (diface && out->dir == CTL_FW_IN) {
        errf(err, len,
             "--dst %s: a packet the box receives has no output interface (use --src for the "
             "interface it arrives on, or --dir forward)",
             out->dst);
        return -EINVAL;
    }
    return 0;
}

int ctl_fw_conf_check_names(const struct ctl_fw_conf *c, char *err, size_t len)
{
    /* A list of thousands would make a pairwise check slow: sort copies of the names. */
    const char **names = malloc((c->n ? c->n : 1) * sizeof(*names));
    size_t k = 0;
    int rc = 0;

    if (!names)
        return -ENOMEM;
    for (size_t i = 0; i < c->n; i++)
        if (c->rules[i].name[0])
            names[k++] = c->rules[i].name;
    qsort(names, k, sizeof(*names), (int (*)(const void *, const void *))(void *)strcmp);
    for (size_t i = 1; i < k; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            errf(err, len, "rule name \"%s\" is used twice", names[i]);
            rc = -EEXIST;
            break;
        }
    }
    free(names);
    return rc;
}

/* ---- messages and the store ---- */

int ctl_fw_conf_to_msg(const struct ctl_fw_conf *c, Fgx__Ctl__FwConfig *out)
{
    /* one block: the pointers, then the messages they point to */
    Fgx__Ctl__FwRule **ptrs = calloc(1, c->n * (sizeof(*ptrs) + sizeof(Fgx__Ctl__FwRule)) + 1);
    Fgx__Ctl__FwRule *msgs = ptrs ? (Fgx__Ctl__FwRule *)(void *)(ptrs + c->n) : NULL;

    fgx__ctl__fw_config__init(out);
    if (!ptrs)
        return -ENOMEM;
    for (size_t i = 0; i < c->n; i++) {
        const struct ctl_fw_rule *r = &c->rules[i];
        Fgx__Ctl__FwRule *m = &msgs[i];

        fgx__ctl__fw_rule__init(m);
        m->has_id = true;
        m->id = r->id;
        m->name = r->name[0] ? (char *)r->name : NULL;
        m->has_active = true;
        m->active = r->active;
        m->has_proto = true;
        m->proto = (Fgx__Ctl__FwProto)r->proto;
        m->src = r->src[0] ? (char *)r->src : NULL;
        m->dst = r->dst[0] ? (char *)r->dst : NULL;
        m->has_sport_lo = m->has_sport_hi = r->has_sport;
        m->sport_lo = r->sport_lo;
        m->sport_hi = r->sport_hi;
        m->has_dport_lo = m->has_dport_hi = r->has_dport;
        m->dport_lo = r->dport_lo;
        m->dport_hi = r->dport_hi;
        m->has_dir = true;
        m->dir = (Fgx__Ctl__FwDir)r->dir;
        m->has_action = true;
        m->action = (Fgx__Ctl__FwAction)r->action;
        ptrs[i] = m;
    }
    out->n_rules = c->n;
    out->rules = ptrs;
    out->has_enabled = true;
    out->enabled = c->enabled;
    out->has_policy_in = out->has_policy_out = out->has_policy_forward = true;
    out->policy_in = c->policy_drop[CTL_FW_IN] ? FGX__CTL__FW_ACTION__FW_DROP
                                               : FGX__CTL__FW_ACTION__FW_ACCEPT;
    out->policy_out = c->policy_drop[CTL_FW_OUT] ? FGX__CTL__FW_ACTION__FW_DROP
                                                 : FGX__CTL__FW_ACTION__FW_ACCEPT;
    out->policy_forward = c->policy_drop[CTL_FW_FWD] ? FGX__CTL__FW_ACTION__FW_DROP
                                                     : FGX__CTL__FW_ACTION__FW_ACCEPT;
    out->has_allow_loopback = out->has_allow_established = out->has_drop_invalid = true;
    out->has_allow_icmp = out->has_allow_dhcp = true;
    out->allow_loopback = c->opt[CTL_FW_OPT_LOOPBACK];
    out->allow_established = c->opt[CTL_FW_OPT_ESTABLISHED];
    out->drop_invalid = c->opt[CTL_FW_OPT_INVALID];
    out->allow_icmp = c->opt[CTL_FW_OPT_ICMP];
    out->allow_dhcp = c->opt[CTL_FW_OPT_DHCP];
    out->has_next_id = true;
    out->next_id = c->next_id;
    return 0;
}

void ctl_fw_msg_release(Fgx__Ctl__FwConfig *m)
{
    if (!m)
        return;
    free(m->rules);
    m->rules = NULL;
    m->n_rules = 0;
}

static bool policy_drop(bool has, Fgx__Ctl__FwAction a)
{
    return has && a == FGX__CTL__FW_ACTION__FW_DROP;
}

int ctl_fw_conf_from_msg(const Fgx__Ctl__FwConfig *m, struct ctl_fw_conf *out, char *err,
                         size_t len)
{
    char why[256];
    uint32_t maxid = 0;
    int rc;

    ctl_fw_conf_init(out);
    out->enabled = m->has_enabled ? m->enabled : true;
    out->policy_drop[CTL_FW_IN] = policy_drop(m->has_policy_in, m->policy_in);
    out->policy_drop[CTL_FW_OUT] = policy_drop(m->has_policy_out, m->policy_out);
    out->policy_drop[CTL_FW_FWD] = policy_drop(m->has_policy_forward, m->policy_forward);
    if (m->has_allow_loopback)
        out->opt[CTL_FW_OPT_LOOPBACK] = m->allow_loopback;
    if (m->has_allow_established)
        out->opt[CTL_FW_OPT_ESTABLISHED] = m->allow_established;
    out->opt[CTL_FW_OPT_INVALID] = m->has_drop_invalid && m->drop_invalid;
    out->opt[CTL_FW_OPT_ICMP] = m->has_allow_icmp && m->allow_icmp;
    out->opt[CTL_FW_OPT_DHCP] = m->has_allow_dhcp && m->allow_dhcp;
    if (conf_reserve(out, m->n_rules) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < m->n_rules; i++) {
        struct ctl_fw_rule r;

        rc = ctl_fw_rule_from_msg(m->rules[i], &r, why, sizeof(why));
        if (rc < 0) {
            errf(err, len, "firewall rule %zu: %s", i + 1, why);
            ctl_fw_conf_release(out);
            return rc;
        }
        out->rules[out->n++] = r;
        if (r.id > maxid)
            maxid = r.id;
    }
    /* rules without an id (a hand-written backup) get fresh ones */
    out->next_id = m->has_next_id && m->next_id > maxid ? m->next_id : maxid + 1;
    for (size_t i = 0; i < out->n; i++)
        if (out->rules[i].id == 0)
            out->rules[i].id = out->next_id++;
    rc = ctl_fw_conf_check_names(out, err, len);
    if (rc < 0)
        ctl_fw_conf_release(out);
    return rc;
}

int ctl_fw_conf_load(struct ctl_txn *t, struct ctl_fw_conf *out)
{
    Fgx__Ctl__FwConfig *m;
    char err[256];
    void *buf = NULL;
    size_t len = 0;
    int rc = ctl_store_bytes_get(t, FW_KEY, &buf, &len);

    ctl_fw_conf_init(out);
    if (rc < 0 || !buf)
        return rc;
    m = fgx__ctl__fw_config__unpack(NULL, len, buf);
    free(buf);
    if (!m) {
        fgx_err("state store: the firewall record does not decode");
        return -EINVAL;
    }
    rc = ctl_fw_conf_from_msg(m, out, err, sizeof(err));
    if (rc < 0)
        fgx_err("state store: the firewall record: %s", err);
    fgx__ctl__fw_config__free_unpacked(m, NULL);
    return rc;
}

static int conf_pack(const struct ctl_fw_conf *c, void **buf, size_t *len)
{
    Fgx__Ctl__FwConfig m;
    int rc = ctl_fw_conf_to_msg(c, &m);

    if (rc < 0)
        return rc;
    *len = fgx__ctl__fw_config__get_packed_size(&m);
    *buf = malloc(*len ? *len : 1);
    if (*buf)
        fgx__ctl__fw_config__pack(&m, *buf);
    ctl_fw_msg_release(&m);
    return *buf ? 0 : -ENOMEM;
}

int ctl_fw_conf_save(struct ctl_txn *t, const struct ctl_fw_conf *c)
{
    void *buf = NULL;
    size_t len = 0;
    int rc = conf_pack(c, &buf, &len);

    if (rc == 0)
        rc = ctl_store_bytes_put(t, FW_KEY, buf, len);
    free(buf);
    return rc;
}

/* ---- compile ---- */

/* An endpoint as the compiler's ranges: an address or prefix into its address field (when
 * its family is fam), an interface name into the interface field. *skip: the rule does not
 * apply to this family at all. */
static void endpoint_range(const char *s, int fam, struct fgx_fwc_range *addr,
                           struct fgx_fwc_range *ifr, bool *skip)
{
    struct fgx_cidr c;
    uint8_t alen = fam == 4 ? 4 : 16;

    if (!s[0])
        return;
    if (fgx_cidr_parse(s, &c) == 0) {
        if (c.family != fam) {
            *skip = true;
            return;
        }
        memset(addr, 0, sizeof(*addr));
        memcpy(addr->lo, c.addr, alen);
        memcpy(addr->hi, c.addr, alen);
        for (unsigned b = c.prefix; b < 8u * alen; b++)
            addr->hi[b / 8] |= (uint8_t)(0x80u >> (b % 8));
        return;
    }
    memset(ifr, 0, sizeof(*ifr));
    {
        size_t n = strlen(s);

        if (s[n - 1] == '*') {
            memcpy(ifr->lo, s, n - 1);
            memcpy(ifr->hi, s, n - 1);
            memset(ifr->hi + n - 1, 0xff, 16 - (n - 1));
        } else {
            memcpy(ifr->lo, s, n);
            memcpy(ifr->hi, s, n);
        }
    }
}

static void port_range(struct fgx_fwc_range *r, uint16_t lo, uint16_t hi)
{
    memset(r, 0, sizeof(*r));
    r->lo[0] = (uint8_t)(lo >> 8);
    r->lo[1] = (uint8_t)lo;
    r->hi[0] = (uint8_t)(hi >> 8);
    r->hi[1] = (uint8_t)hi;
}

/* The active rules of hook h as compiler rules for family fam (4 or 6); "both" is two rules
 * in a row (disjoint, so their order does not matter). */
static int rules_for(const struct ctl_fw_conf *c, int h, int fam, struct fgx_fwc_rule **out,
                     size_t *nout)
{
    uint8_t width[FGX_FWC_NDIMS];
    struct fgx_fwc_rule *v = malloc((2 * c->n + 1) * sizeof(*v));
    size_t n = 0;

    if (!v)
        return -ENOMEM;
    fgx_fwc_widths(fam, width);
    for (size_t i = 0; i < c->n; i++) {
        const struct ctl_fw_rule *r = &c->rules[i];
        struct fgx_fwc_rule fr;
        bool skip = false;

        if (!r->active || r->dir != h)
            continue;
        for (int d = 0; d < FGX_FWC_NDIMS; d++)
            fgx_fwc_range_full(&fr.f[d], width[d]);
        fr.verdict = r->action;
        endpoint_range(r->src, fam, &fr.f[FGX_FWC_SADDR], &fr.f[FGX_FWC_IIF], &skip);
        endpoint_range(r->dst, fam, &fr.f[FGX_FWC_DADDR], &fr.f[FGX_FWC_OIF], &skip);
        if (skip)
            continue;
        if (r->has_sport)
            port_range(&fr.f[FGX_FWC_SPORT], r->sport_lo, r->sport_hi);
        if (r->has_dport)
            port_range(&fr.f[FGX_FWC_DPORT], r->dport_lo, r->dport_hi);
        if (r->proto == CTL_FW_ANY) {
            v[n++] = fr;
            continue;
        }
        if (r->proto == CTL_FW_TCP || r->proto == CTL_FW_BOTH) {
            fr.f[FGX_FWC_PROTO].lo[0] = fr.f[FGX_FWC_PROTO].hi[0] = IPPROTO_TCP;
            v[n++] = fr;
        }
        if (r->proto == CTL_FW_UDP || r->proto == CTL_FW_BOTH) {
            fr.f[FGX_FWC_PROTO].lo[0] = fr.f[FGX_FWC_PROTO].hi[0] = IPPROTO_UDP;
            v[n++] = fr;
        }
    }
    *out = v;
    *nout = n;
    return 0;
}

/* The most lookups a packet can meet in one piece: the longest path through its DAG (a
 * node's children come before it in the array). */
static uint32_t prog_depth(const struct fgx_fwc_prog *p)
{
    uint32_t *depth = calloc(p->nnodes ? p->nnodes : 1, sizeof(*depth)), best = 0;

    if (!depth)
        return 0;
    for (size_t i = 0; i < p->nnodes; i++) {
        uint32_t d = 0;

        for (size_t k = 0; k < p->nodes[i].n; k++) {
            const struct fgx_fwc_target *t = &p->elems[p->nodes[i].first + k].to;

            if (t->is_node && depth[t->v] > d)
                d = depth[t->v];
        }
        depth[i] = d + 1;
    }
    if (p->has_root && p->root.is_node)
        best = depth[p->root.v];
    free(depth);
    return best;
}

int ctl_fw_apply(struct ctl_fw *fw, const struct ctl_fw_conf *c, char *err, size_t len)
{
    struct ctl_fw_plan plan = {0};
    struct fgx_fwc_piece *pieces[CTL_FW_NHOOKS][2] = {{NULL}};
    size_t npieces[CTL_FW_NHOOKS][2] = {{0}}, active = 0;
    struct ctl_fw_nft_stats ns = {0};
    uint32_t lookups = 0, npc = 0;
    uint64_t t0 = mono_us(), t1;
    int rc = 0;

    for (size_t i = 0; i < c->n; i++)
        active += c->rules[i].active;
    plan.present = c->enabled && (active > 0 || c->policy_drop[0] || c->policy_drop[1] ||
                                  c->policy_drop[2] || c->opt[CTL_FW_OPT_INVALID]);
    for (int h = 0; plan.present && h < CTL_FW_NHOOKS; h++) {
        uint32_t hl = 0;

        /* Without an address in any of its rules, both families run one DAG. */
        plan.hook[h].shared = true;
        for (size_t i = 0; i < c->n; i++) {
            const struct ctl_fw_rule *r = &c->rules[i];
            struct fgx_cidr x;

            if (r->active && r->dir == h &&
                ((r->src[0] && fgx_cidr_parse(r->src, &x) == 0) ||
                 (r->dst[0] && fgx_cidr_parse(r->dst, &x) == 0)))
                plan.hook[h].shared = false;
        }
        for (int f = 0; f < (plan.hook[h].shared ? 1 : 2); f++) {
            struct fgx_fwc_rule *rs = NULL;
            size_t n = 0;
            uint8_t width[FGX_FWC_NDIMS];
            uint32_t fl = 0;

            fgx_fwc_widths(f == 0 ? 4 : 6, width);
            rc = rules_for(c, h, f == 0 ? 4 : 6, &rs, &n);
            if (rc == 0)
                rc = fgx_fwc_compile_pieces(rs, n, width, NULL, &pieces[h][f], &npieces[h][f]);
            free(rs);
            if (rc < 0) {
                errf(err, len, "compiling the firewall rules: %s", strerror(-rc));
                goto out;
            }
            for (size_t k = 0; k < npieces[h][f]; k++)
                fl += prog_depth(&pieces[h][f][k].prog);
            if (fl > hl)
                hl = fl;
            if (npieces[h][f] > npc)
                npc = (uint32_t)npieces[h][f];
            plan.hook[h].pieces[f] = pieces[h][f];
            plan.hook[h].npieces[f] = npieces[h][f];
        }
        if (hl > lookups)
            lookups = hl;
        plan.hook[h].policy_drop = c->policy_drop[h];
    }
    plan.allow_loopback = c->opt[CTL_FW_OPT_LOOPBACK];
    plan.allow_established = c->opt[CTL_FW_OPT_ESTABLISHED];
    plan.drop_invalid = c->opt[CTL_FW_OPT_INVALID];
    plan.allow_icmp = c->opt[CTL_FW_OPT_ICMP];
    plan.allow_dhcp = c->opt[CTL_FW_OPT_DHCP];
    plan.ctl_port = fw->guard.ctl_port;
    plan.web_port = fw->guard.web_port;
    plan.allow = fw->guard.allow;
    plan.nallow = fw->guard.nallow;
    t1 = mono_us();
    rc = ctl_fw_nft_apply(fw->nft, &plan, &ns);
    if (rc == -E2BIG) {
        errf(err, len,
             "the rules compile into %zu maps, more than the %d a change may write (rules that "
             "each name their own source and port need one map each: join sources into "
             "prefixes or ports into ranges, or split the list)",
             ns.maps, CTL_FW_MAPS_MAX);
        goto out;
    }
    if (rc < 0) {
        errf(err, len, "the kernel refused the firewall table: %s", strerror(-rc));
        goto out;
    }
    fw->state.mode = !c->enabled ? "off" : plan.present ? "compiled" : "empty";
    fw->state.lookups = lookups;
    fw->state.pieces = npc;
    fw->state.maps = (uint32_t)ns.maps;
    fw->state.elements = (uint32_t)ns.elements;
    fw->state.changed = (uint32_t)(ns.added + ns.removed);
    fw->state.compile_us = t1 - t0;
    fw->state.apply_us = mono_us() - t1;
    fw->gen++;
    fgx_debug("fw: %zu rules -> %u maps, %u elements (%u sent), %u pieces, at most %u lookups "
              "(compile %llu us, kernel %llu us)",
              c->n, fw->state.maps, fw->state.elements, fw->state.changed, npc, lookups,
              (unsigned long long)fw->state.compile_us, (unsigned long long)fw->state.apply_us);
out:
    for (int h = 0; h < CTL_FW_NHOOKS; h++)
        for (int f = 0; f < 2; f++)
            fgx_fwc_pieces_free(pieces[h][f], npieces[h][f]);
    return rc;
}

const struct ctl_fw_state *ctl_fw_state(const struct ctl_fw *fw)
{
    return &fw->state;
}

uint64_t ctl_fw_gen(const struct ctl_fw *fw)
{
    return fw ? fw->gen : 0;
}

int ctl_fw_guard_init(struct ctl_fw_guard *g, const char *listen, const char *const *allow,
                      size_t nallow)
{
    const char *colon;
    char *end;
    unsigned long port;

    memset(g, 0, sizeof(*g));
    /* the peers first: the dashboard's port (ctl_fw_guard_web) has them without --listen */
    if (nallow > CTL_FW_ALLOW_MAX)
        return -EINVAL;
    for (size_t i = 0; i < nallow; i++)
        if (fgx_cidr_parse(allow[i], &g->allow[g->nallow++]) < 0)
            return -EINVAL;
    if (!listen)
        return 0;
    colon = strrchr(listen, ':');
    port = colon ? strtoul(colon + 1, &end, 10) : 0;
    if (!colon || colon[1] == '\0' || *end != '\0' || port == 0 || port > 65535) {
        fgx_err("fw: no port in --listen %s", listen);
        return -EINVAL;
    }
    g->ctl_port = (uint16_t)port;
    return 0;
}

int ctl_fw_guard_web(struct ctl_fw_guard *g, const char *web_listen)
{
    const char *colon;
    char *end;
    unsigned long port;

    if (!web_listen)
        return 0;
    colon = strrchr(web_listen, ':');
    port = colon ? strtoul(colon + 1, &end, 10) : 0;
    if (!colon || colon[1] == '\0' || *end != '\0' || port > 65535) {
        fgx_err("fw: no port in --web-listen %s", web_listen);
        return -EINVAL;
    }
    g->web_port = (uint16_t)port; /* 0 (a port the kernel picks): nothing to keep open */
    return 0;
}

int ctl_fw_new(const char *table, const struct ctl_fw_guard *g, struct ctl_fw **out)
{
    struct ctl_fw *fw = calloc(1, sizeof(*fw));
    int rc;

    if (!fw)
        return -ENOMEM;
    if (g)
        fw->guard = *g;
    fw->state.mode = "off";
    fw->wd_fd = -1;
    ctl_fw_conf_init(&fw->window_prev);
    rc = ctl_fw_nft_open(table, &fw->nft);
    if (rc < 0) {
        free(fw);
        return rc;
    }
    *out = fw;
    return 0;
}

void ctl_fw_free(struct ctl_fw *fw)
{
    if (!fw)
        return;
    /* The table stays in force while controld is stopped, as it does when controld dies: a
     * firewall that opens the box whenever its daemon stops is none. The next controld writes
     * it whole from the store (`fgexctl fw disable` takes it away). */
    if (ctl_fw_nft_present(fw->nft))
        fgx_info("fw: the firewall table stays in force while controld is stopped");
    /* A window's watchdog outlives controld: the change cannot be confirmed any more, and it
     * goes at its deadline (the next controld's start reverts it at once, ending the watchdog). */
    if (fw->wd_pid > 0)
        fgx_warn("fw: an unconfirmed firewall change is reverted in %u s by its watchdog (pid %d)",
                 (unsigned)ctl_fw_pending_secs(fw), (int)fw->wd_pid);
    if (fw->wd_fd >= 0)
        (void)close(fw->wd_fd);
    ctl_fw_conf_release(&fw->window_prev);
    free(fw->run_dir);
    ctl_fw_nft_close(fw->nft);
    free(fw);
}

/* ---- confirm or revert ---- */

uint32_t ctl_fw_pending_secs(const struct ctl_fw *fw)
{
    uint64_t now = mono_ms();

    if (!fw->pending)
        return 0;
    return fw->deadline_ms > now ? (uint32_t)((fw->deadline_ms - now + 999) / 1000) : 1;
}

int ctl_fw_pending_begin(struct ctl_fw *fw, struct ctl_txn *t, const struct ctl_fw_conf *prev,
                         uint32_t secs)
{
    void *buf = NULL;
    size_t len = 0;
    int rc;

    (void)secs;
    if (fw->pending)
        return 0;
    rc = conf_pack(prev, &buf, &len);
    if (rc == 0)
        rc = ctl_store_bytes_put(t, FW_KEY_PENDING, buf, len);
    free(buf);
    return rc;
}

int ctl_fw_set_run_dir(struct ctl_fw *fw, const char *run_dir)
{
    free(fw->run_dir);
    fw->run_dir = run_dir ? strdup(run_dir) : NULL;
    return !run_dir || fw->run_dir ? 0 : -ENOMEM;
}

uint32_t ctl_fw_watchdog_portid(const struct ctl_fw *fw)
{
    return fw ? fw->wd_portid : 0;
}

/* Every descriptor from 3 up but keep_a and keep_b: the watchdog holds no listening socket, no
 * store and no lock of controld's, so that the next controld starts while it waits. */
static void close_others(int keep_a, int keep_b)
{
    int a = keep_a < keep_b ? keep_a : keep_b, b = keep_a < keep_b ? keep_b : keep_a;

    if (a > 3)
        (void)close_range(3, (unsigned)a - 1, 0);
    if (b > a + 1)
        (void)close_range((unsigned)a + 1, (unsigned)b - 1, 0);
    (void)close_range((unsigned)b + 1, ~0u, 0);
}

/* The watchdog: wait for the deadline or a word from controld; at the deadline, write the
 * window's previous configuration through its own socket, whole, in one transaction. */
static _Noreturn void wd_main(struct ctl_fw *fw, struct ctl_fw_nft *nft, int rfd,
                              uint64_t deadline_ms)
{
    struct ctl_fw self = {.nft = nft, .guard = fw->guard, .wd_fd = -1};
    sigset_t none;
    char err[512];

    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGPIPE, SIG_IGN);
    (void)prctl(PR_SET_NAME, "fgx-fwwatch", 0, 0, 0);
    for (;;) {
        uint64_t now = mono_ms();
        struct pollfd pf = {.fd = rfd, .events = POLLIN};
        uint64_t left = deadline_ms > now ? deadline_ms - now : 0;
        int n;

        if (left == 0)
            break;
        n = poll(&pf, rfd >= 0 ? 1 : 0, left > 60000 ? 60000 : (int)left);
        if (n > 0) {
            char c;
            ssize_t r = read(rfd, &c, 1);

            if (r == 1)
                _exit(0); /* confirmed, or controld reverts it itself */
            if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
                (void)close(rfd); /* controld is gone: the deadline still holds */
                rfd = -1;
            }
        }
    }
    if (ctl_fw_apply(&self, &fw->window_prev, err, sizeof(err)) < 0) {
        fgx_err("fw watchdog: the unconfirmed firewall change could not be reverted: %s", err);
        _exit(2);
    }
    fgx_warn("fw watchdog: the firewall change was not confirmed in time and controld did not "
             "revert it: the previous rules (%zu) are back in the kernel",
             fw->window_prev.n);
    _exit(FW_WD_FIRED);
}

/* A watchdog that ended (reaped): when it wrote the table, controld's view of the kernel is
 * stale and the next write is whole. */
static void wd_reaped(struct ctl_fw *fw, int status)
{
    if (WIFEXITED(status) && WEXITSTATUS(status) == FW_WD_FIRED) {
        ctl_fw_nft_forget(fw->nft);
        fgx_warn("fw: the confirm window's watchdog reverted the firewall change (controld's "
                 "loop was late)");
    }
    fw->wd_pid = 0;
    if (fw->run_dir)
        ctl_proc_pidfile_remove(fw->run_dir, FW_WD_NAME);
}

/* Tell the watchdog to stand down and wait for it (a watchdog writing the table finishes). */
static void wd_stop(struct ctl_fw *fw)
{
    int status = 0;

    if (fw->wd_fd >= 0) {
        (void)!write(fw->wd_fd, "c", 1);
        (void)close(fw->wd_fd);
        fw->wd_fd = -1;
    }
    if (fw->wd_pid <= 0)
        return;
    while (waitpid(fw->wd_pid, &status, 0) == -1 && errno == EINTR)
        ;
    wd_reaped(fw, status);
}

/* Whether the watchdog ended by itself (it wrote the table, or failed to). */
static bool wd_ended(struct ctl_fw *fw)
{
    int status;

    if (fw->wd_pid <= 0 || waitpid(fw->wd_pid, &status, WNOHANG) != fw->wd_pid)
        return false;
    if (fw->wd_fd >= 0) {
        (void)close(fw->wd_fd);
        fw->wd_fd = -1;
    }
    wd_reaped(fw, status);
    return true;
}

static void wd_start(struct ctl_fw *fw)
{
    struct ctl_fw_nft *nft = NULL;
    int p[2] = {-1, -1}, rc;
    pid_t pid;

    rc = ctl_fw_nft_open(ctl_fw_nft_table(fw->nft), &nft);
    if (rc == 0 && pipe2(p, O_CLOEXEC) == -1)
        rc = -errno;
    if (rc == 0) {
        pid = fork();
        if (pid == 0) {
            (void)close(p[1]);
            close_others(p[0], ctl_fw_nft_fd(nft));
            wd_main(fw, nft, p[0], fw->deadline_ms + FW_WD_GRACE_MS);
        }
        if (pid == -1)
            rc = -errno;
        (void)close(p[0]);
    }
    if (rc < 0) {
        fgx_err("fw: no watchdog for the confirm window (%s): the revert waits for controld's "
                "loop",
                strerror(-rc));
        if (p[1] >= 0)
            (void)close(p[1]);
        ctl_fw_nft_close(nft);
        return;
    }
    fw->wd_pid = pid;
    fw->wd_fd = p[1];
    fw->wd_portid = ctl_fw_nft_portid(nft);
    ctl_fw_nft_close(nft); /* the watchdog's copy keeps the socket */
    if (fw->run_dir && ctl_proc_pidfile_write(fw->run_dir, FW_WD_NAME, pid, 0) < 0)
        fgx_warn("fw: cannot write %s/%s.pid", fw->run_dir, FW_WD_NAME);
}

/* A watchdog a previous controld left (it was stopped or died in a window): this start
 * reverts the change itself, now. */
static void wd_end_stale(struct ctl_fw *fw)
{
    struct ctl_proc p = CTL_PROC_INIT;
    pid_t pid;

    if (!fw->run_dir)
        return;
    pid = ctl_proc_pidfile_read(fw->run_dir, FW_WD_NAME, 0);
    if (pid > 0 && ctl_proc_adopt(&p, pid) == 0) {
        fgx_info("fw: ending the confirm window's watchdog a previous controld left (pid %d)",
                 (int)pid);
        ctl_proc_stop(&p, 0, "the firewall's watchdog");
    }
    ctl_proc_pidfile_remove(fw->run_dir, FW_WD_NAME);
}

void ctl_fw_pending_arm(struct ctl_fw *fw, const struct ctl_fw_conf *prev, uint32_t secs)
{
    if (!fw->pending) {
        ctl_fw_conf_release(&fw->window_prev);
        ctl_fw_conf_init(&fw->window_prev);
        fw->has_window_prev = ctl_fw_conf_copy(prev, &fw->window_prev) == 0;
    }
    fw->pending = true;
    fw->deadline_ms = mono_ms() + (uint64_t)secs * 1000u;
    fw->gen++;
    wd_stop(fw);
    if (fw->has_window_prev)
        wd_start(fw);
    else
        fgx_err("fw: no memory for the confirm window's watchdog: the revert waits for "
                "controld's loop");
}

int ctl_fw_pending_confirm(struct ctl_fw *fw, struct ctl_txn *t)
{
    if (!fw->pending)
        return -ENOENT;
    return ctl_store_bytes_del(t, FW_KEY_PENDING);
}

void ctl_fw_pending_clear(struct ctl_fw *fw)
{
    if (fw->pending)
        fw->gen++; /* kept, or about to be reverted */
    fw->pending = false;
    fw->deadline_ms = 0;
    wd_stop(fw);
    ctl_fw_conf_release(&fw->window_prev);
    fw->has_window_prev = false;
}

/* Put the saved configuration back, in the store and the kernel. */
static int revert(struct ctl_fw *fw, struct ctl_store *s)
{
    struct ctl_fw_conf prev;
    Fgx__Ctl__FwConfig *m = NULL;
    struct ctl_txn *t = NULL;
    char err[512];
    void *buf = NULL;
    size_t len = 0;
    int rc = ctl_txn_begin(s, true, &t);

    ctl_fw_conf_init(&prev);
    if (rc < 0)
        goto out;
    rc = ctl_store_bytes_get(t, FW_KEY_PENDING, &buf, &len);
    if (rc < 0 || !buf)
        goto out;
    m = fgx__ctl__fw_config__unpack(NULL, len, buf);
    if (!m) {
        fgx_err("fw: the saved firewall configuration does not decode; keeping the current one");
        rc = -EINVAL;
        goto out;
    }
    rc = ctl_fw_conf_from_msg(m, &prev, err, sizeof(err));
    if (rc == 0)
        rc = ctl_fw_apply(fw, &prev, err, sizeof(err));
    if (rc < 0) {
        fgx_err("fw: cannot go back to the saved firewall configuration: %s", err);
        goto out;
    }
    rc = ctl_fw_conf_save(t, &prev);
    if (rc == 0)
        rc = ctl_store_bytes_del(t, FW_KEY_PENDING);
    if (rc == 0) {
        rc = ctl_txn_commit(t);
        t = NULL;
    }
    if (rc == 0)
        fgx_warn("fw: the firewall change was not confirmed in time: reverted (%zu rules)",
                 prev.n);
out:
    ctl_txn_abort(t);
    if (m)
        fgx__ctl__fw_config__free_unpacked(m, NULL);
    free(buf);
    ctl_fw_conf_release(&prev);
    return rc;
}

/* Apply the stored configuration (what: for the log, "" at start). */
static int apply_stored(struct ctl_fw *fw, struct ctl_store *s, const char *what)
{
    struct ctl_fw_conf c;
    struct ctl_txn *t = NULL;
    char err[512];
    int rc;

    rc = ctl_txn_begin(s, false, &t);
    if (rc < 0)
        return rc;
    rc = ctl_fw_conf_load(t, &c);
    ctl_txn_abort(t);
    if (rc < 0)
        return rc;
    rc = ctl_fw_apply(fw, &c, err, sizeof(err));
    if (rc < 0)
        fgx_err("fw: %s%s", what, err);
    else if (c.enabled && c.n > 0)
        fgx_info("fw: %zu firewall rules in place", c.n);
    ctl_fw_conf_release(&c);
    return rc;
}

int ctl_fw_start(struct ctl_fw *fw, struct ctl_store *s)
{
    /* A change that waited for confirmation when controld stopped cannot be confirmed any
     * more: it goes, as it would have at its deadline (and its watchdog, if it still waits,
     * ends first). */
    wd_end_stale(fw);
    if (revert(fw, s) < 0)
        fgx_warn("fw: an unconfirmed firewall change could not be reverted");
    return apply_stored(fw, s, "");
}

struct ctl_fw_nft *ctl_fw_nft_of(struct ctl_fw *fw)
{
    return fw ? fw->nft : NULL;
}

int ctl_fw_restore(struct ctl_fw *fw, struct ctl_store *s)
{
    /* what the kernel holds is unknown now: the whole table, not a difference */
    ctl_fw_nft_forget(fw->nft);
    return apply_stored(fw, s, "restoring the firewall table: ");
}

void ctl_fw_tick(struct ctl_fw *fw, struct ctl_store *s)
{
    if (!fw || !fw->pending || (mono_ms() < fw->deadline_ms && !wd_ended(fw)))
        return;
    ctl_fw_pending_clear(fw);
    if (revert(fw, s) < 0)
        fgx_err("fw: reverting the unconfirmed firewall change failed");
}

/* controld, TLS services: checking a certificate and key (rpc_tls.c, OpenSSL). */
#ifndef CTL_RPC_TLS_H
#define CTL_RPC_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld/ctl_store.h"

#define CTL_TLS_PEM_MAX (64u << 10) /* a certificate chain or a key, PEM */

struct ctl_tls_info {
    char subject[256];  /* one line, OpenSSL's X509_NAME_oneline() */
    uint64_t not_after; /* unix seconds */
    bool expired;
};

/* cert (a PEM chain, leaf first) and key (PEM) parse and match. Returns 0 (*info filled; an
 * expired certificate passes, info->expired set) or -EINVAL/-ENOMEM with the reason in err. */
int ctl_tls_check(const uint8_t *cert, size_t clen, const uint8_t *key, size_t klen,
                  struct ctl_tls_info *info, char *err, size_t errlen);
/* What a stored certificate says about itself: 0 or -EINVAL. */
int ctl_rpc_tls_info(const uint8_t *cert, size_t len, struct ctl_tls_info *info);

#endif

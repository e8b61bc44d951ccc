/* fgexctl trust stage, the network side: read a server's certificate with one plain TLS
 * handshake of our own (nng 1.5 shows no peer certificate), and decide which certificate the
 * real connection (fgx_chan_dial_tls) must accept: the pinned one, or --ca. */
#ifndef CLI_TLS_H
#define CLI_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include "cli_pin.h"

#define CLI_TLS_TIMEOUT_MS 5000

/* A certificate as read from a server. */
struct cli_tls_cert {
    char fp[CLI_FP_SIZE]; /* SHA-256 of the DER, "AB:CD:..." */
    char *pem;            /* malloc'd PEM text */
    size_t pem_len;
};

/* Connect to host:port, handshake without verifying (only to read it), and return the
 * server's certificate. Returns 0, or a negative errno with err saying why. */
int cli_tls_fetch(const char *host, const char *port, int timeout_ms, struct cli_tls_cert *out,
                  char *err, size_t errlen);
void cli_tls_cert_release(struct cli_tls_cert *c);

/* SHA-256 of len bytes of DER as "AB:CD:...". */
void cli_tls_fingerprint(const unsigned char *der, size_t len, char fp[CLI_FP_SIZE]);

/* What to dial a tls+tcp URL with. */
struct cli_tls_trust {
    char ca_path[4096];      /* the PEM file nng must verify the server against */
    /* the name the certificate must carry: the host's with a CA; a pinned certificate's own
     * (pin_name()), or NULL if it has none, since the pin alone is trusted */
    const char *server_name;
    char server_name_buf[256];
    bool pinned; /* ca_path is the one certificate trusted, not a CA */
    char fp[CLI_FP_SIZE]; /* the pinned fingerprint; "" with --ca */
};

/* Decide the trust for url: with ca_file, that file (a single self-signed certificate is a
 * pin, so no name check; else the host name must match); otherwise the server's certificate is
 * read, checked against known_hosts (or fingerprint, when not NULL) and saved as the CA file.
 * A first-use pin is announced on stderr. Returns 0, -EKEYREJECTED (certificate refused: err
 * says why), or another negative errno with err set. */
int cli_tls_trust_setup(const char *url, const char *fingerprint, const char *ca_file,
                        struct cli_tls_trust *out, char *err, size_t errlen);

#endif

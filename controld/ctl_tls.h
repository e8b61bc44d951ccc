/* controld remote-listener stage: the TLS identity of the tls+tcp:// control listener. On first
 * start controld makes a self-signed certificate (ECDSA P-256, CN "fgex-controld") and its key
 * in the state directory, or uses --cert/--key; clients pin the SHA-256 fingerprint of the
 * certificate's DER encoding, which controld prints at start and returns for `fgexctl cert`. */
#ifndef CTL_TLS_H
#define CTL_TLS_H

#include <stddef.h>

#define CTL_TLS_CERT_FILE "tls-cert.pem"
#define CTL_TLS_KEY_FILE "tls-key.pem" /* mode 0600 */
#define CTL_TLS_CN "fgex-controld"
#define CTL_TLS_FINGERPRINT_LEN 95 /* "AB:CD:..." for 32 bytes */

struct ctl_tls {
    char *cert_pem; /* malloc'd, NUL-terminated; owned by the struct */
    char *key_pem;  /* malloc'd; wiped and freed by ctl_tls_release() */
    char fingerprint[CTL_TLS_FINGERPRINT_LEN + 1];
};

/* With cert_file and key_file both NULL: load STATE_DIR/tls-cert.pem and tls-key.pem, creating
 * both when neither exists. Otherwise load the two files given. The key must match the
 * certificate. Failures are logged with the file and the reason. */
int ctl_tls_load(const char *state_dir, const char *cert_file, const char *key_file,
                 struct ctl_tls *out);
void ctl_tls_release(struct ctl_tls *t);

/* SHA-256 of the DER form of the first certificate in pem, "AB:CD:..." (out: at least
 * CTL_TLS_FINGERPRINT_LEN + 1 bytes). -EINVAL when pem holds no certificate. */
int ctl_tls_fingerprint(const char *pem, char *out, size_t len);

/* Make a fresh self-signed certificate and key (PEM, malloc'd, caller frees). */
int ctl_tls_generate(char **cert_pem, char **key_pem);

#endif

/* controld's HTTP listeners (metrics, web): the listening socket for "ADDR:PORT", made here so
 * that both bind alike (libmicrohttpd is handed the socket). */
#ifndef CTL_LISTEN_H
#define CTL_LISTEN_H

#include <stdint.h>

/* Listen on "ADDR:PORT" ("127.0.0.1:9100", "[::1]:9100", ":9100" for every address; PORT 0
 * picks a free one): *fd (non-blocking, close-on-exec) and the port bound. what names the
 * listener in log lines. Returns 0, -EINVAL for a bad address, or the socket error. */
int ctl_listen_tcp(const char *what, const char *addr, int *fd, uint16_t *port);

#endif

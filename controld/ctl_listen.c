/* controld's HTTP listening sockets (ctl_listen.h). */
#include "controld/ctl_listen.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fgx/log.h"

/* "host:port", "[v6]:port" or ":port" -> host (NULL: any) and port, in buf. */
static int split_listen(const char *addr, char *buf, size_t cap, const char **host,
                        const char **port)
{
    char *colon;

    if (snprintf(buf, cap, "%s", addr) >= (int)cap)
        return -EINVAL;
    colon = strrchr(buf, ':');
    if (!colon || colon[1] == '\0')
        return -EINVAL;
    *colon = '\0';
    *port = colon + 1;
    if (buf[0] == '[') {
        size_t n = strlen(buf);
        if (n < 2 || buf[n - 1] != ']')
            return -EINVAL;
        buf[n - 1] = '\0';
        *host = buf + 1;
    } else {
        if (strchr(buf, ':'))
            return -EINVAL; /* a bare IPv6 address needs brackets */
        *host = buf[0] ? buf : NULL;
    }
    for (const char *p = *port; *p; p++)
        if (*p < '0' || *p > '9')
            return -EINVAL;
    if (strlen(*port) > 5 || atoi(*port) > 65535)
        return -EINVAL;
    return 0;
}

int ctl_listen_tcp(const char *what, const char *addr, int *fd_out, uint16_t *port_out)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    union {
        struct sockaddr sa;
        struct sockaddr_in in;
        struct sockaddr_in6 in6;
        struct sockaddr_storage ss;
    } bound = {0};
    socklen_t sl = sizeof(bound);
    const char *host, *port;
    char buf[256];
    int fd = -1, one = 1, rv, gai;

    if (split_listen(addr, buf, sizeof(buf), &host, &port) < 0) {
        fgx_err("%s: bad listen address \"%s\": use ADDR:PORT or [ADDR6]:PORT", what, addr);
        return -EINVAL;
    }
    gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0) {
        fgx_err("%s: cannot resolve \"%s\": %s", what, addr, gai_strerror(gai));
        return -EINVAL;
    }
    fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd == -1)
        goto fail;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == -1 ||
        bind(fd, res->ai_addr, res->ai_addrlen) == -1 || listen(fd, 64) == -1 ||
        getsockname(fd, &bound.sa, &sl) == -1)
        goto fail;
    *port_out = ntohs(bound.sa.sa_family == AF_INET6 ? bound.in6.sin6_port : bound.in.sin_port);
    *fd_out = fd;
    freeaddrinfo(res);
    return 0;
fail:
    rv = -errno;
    fgx_err("%s: cannot listen on %s: %s", what, addr, strerror(errno));
    if (fd != -1)
        close(fd);
    freeaddrinfo(res);
    return rv;
}

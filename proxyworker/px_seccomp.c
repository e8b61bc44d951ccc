/* proxyworker's privileges after set-up (fgx/priv.h): what it keeps and the system calls it
 * makes once its transparent listeners are open. */
#include "px.h"

#include <linux/capability.h>
#include <seccomp.h>

#include "fgx/priv.h"

/* Each onward connection is a new socket with IP_TRANSPARENT (to connect from the client's
 * address) and SO_MARK (so that the tproxy rules let it pass): either needs CAP_NET_RAW (or
 * CAP_NET_ADMIN, which is more). Binding a client's source port below 1024 needs
 * CAP_NET_BIND_SERVICE. */
static const int px_caps[] = {CAP_NET_RAW, CAP_NET_BIND_SERVICE};

static const int px_syscalls[] = {
    /* connections in and out, relayed */
    SCMP_SYS(accept4), SCMP_SYS(accept), SCMP_SYS(socket), SCMP_SYS(bind), SCMP_SYS(connect),
    SCMP_SYS(getsockopt), SCMP_SYS(setsockopt), SCMP_SYS(getsockname), SCMP_SYS(getpeername),
    SCMP_SYS(shutdown), SCMP_SYS(recvmsg), SCMP_SYS(recvfrom), SCMP_SYS(sendmsg),
    SCMP_SYS(sendto), SCMP_SYS(ioctl),
    /* libevent's loops and their wake-ups; the memory size it asks at start */
    SCMP_SYS(epoll_pwait2), SCMP_SYS(select), SCMP_SYS(pselect6), SCMP_SYS(socketpair),
    SCMP_SYS(sysinfo),
    /* nng's thread names */
    SCMP_SYS(prctl),
};

int px_priv_drop(const char *user)
{
    return fgx_priv_drop(&(struct fgx_priv){.user = user,
                                            FGX_PRIV_CAPS(px_caps),
                                            FGX_PRIV_SYSCALLS(px_syscalls)});
}

/* nfqworker's privileges after set-up (fgx/priv.h): what it keeps and the system calls it
 * makes once its queues, log sockets and raw reset sockets are open. */
#include "nfq.h"

#include <linux/capability.h>
#include <seccomp.h>

#include "fgx/priv.h"

/* Verdicts go back on the NFQUEUE netlink socket: nfnetlink checks CAP_NET_ADMIN on every
 * message it receives, the sender's as well as the socket's opener's. Nothing else. */
static const int nfq_caps[] = {CAP_NET_ADMIN};

static const int nfq_syscalls[] = {
    /* packets in and verdicts out (netlink), resets out (the raw sockets) */
    SCMP_SYS(recvmsg), SCMP_SYS(recvfrom), SCMP_SYS(recvmmsg), SCMP_SYS(sendmsg),
    SCMP_SYS(sendto), SCMP_SYS(sendmmsg),
    /* the channel to controld (nng over ipc://) and the scriptworker links (AF_UNIX
     * SEQPACKET, the interpreters' pages passed as descriptors), dialled again after a restart
     * of either */
    SCMP_SYS(socket), SCMP_SYS(connect), SCMP_SYS(getsockopt), SCMP_SYS(setsockopt),
    SCMP_SYS(getsockname), SCMP_SYS(getpeername), SCMP_SYS(shutdown), SCMP_SYS(ioctl),
    /* nng's own thread names and timers */
    SCMP_SYS(prctl),
};

int nfq_priv_drop(const char *user)
{
    return fgx_priv_drop(&(struct fgx_priv){.user = user,
                                            FGX_PRIV_CAPS(nfq_caps),
                                            FGX_PRIV_SYSCALLS(nfq_syscalls)});
}

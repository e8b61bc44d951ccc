/* controld, privileges (ctl_priv.h). */
#include "controld/ctl_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdbool.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fgx/log.h"
#include "fgx/priv.h"

static struct ctl_priv cur;
static int cur_set;

static int lookup(const char *name, uid_t *uid, gid_t *gid)
{
    struct passwd pw, *res = NULL;
    char buf[4096];

    if (getpwnam_r(name, &pw, buf, sizeof(buf), &res) != 0 || res == NULL)
        return -ENOENT;
    *uid = pw.pw_uid;
    *gid = pw.pw_gid;
    return 0;
}

static int useradd(const char *name)
{
    int status;
    pid_t pid = fork();

    if (pid == -1)
        return -errno;
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);

        if (devnull != -1) {
            (void)dup2(devnull, 0);
            (void)dup2(devnull, 1);
        }
        execl("/usr/sbin/useradd", "useradd", "--system", "--no-create-home", "--user-group",
              "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "--comment",
              "fgex workers", name, (char *)NULL);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) == -1)
        if (errno != EINTR)
            return -errno;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

/* Whether uid:gid can search dir, every directory on the way included: asked in a child
 * that takes those ids, since the kernel's own check is the only exact one (ACLs, modes). */
static bool reachable(const char *dir, uid_t uid, gid_t gid)
{
    int status;
    pid_t pid = fork();

    if (pid == -1)
        return true; /* cannot tell: the workers' own failure will say it */
    if (pid == 0)
        _exit(setgroups(0, NULL) == 0 && setgid(gid) == 0 && setuid(uid) == 0 &&
                      access(dir, X_OK) == 0
                  ? 0
                  : 1);
    if (waitpid(pid, &status, 0) != pid)
        return true;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int ctl_priv_init(struct ctl_priv *p)
{
    int rv = lookup(p->user, &p->uid, &p->gid);

    if (rv < 0) {
        /* a fresh box (`make run`, the tests): the system user, made once; another
         * controld may have made it meanwhile, hence the second look */
        rv = useradd(p->user);
        if (lookup(p->user, &p->uid, &p->gid) < 0) {
            fgx_err("no user %s for the workers, and useradd failed (%s): create it with "
                    "useradd --system --no-create-home --shell /usr/sbin/nologin %s",
                    p->user, strerror(rv < 0 ? -rv : ENOENT), p->user);
            return rv < 0 ? rv : -ENOENT;
        }
        fgx_info("created the system user %s (uid %u) for the workers", p->user,
                 (unsigned)p->uid);
    }
    if (p->uid == 0) {
        fgx_err("--user %s is root: the workers must run as an unprivileged user", p->user);
        return -EINVAL;
    }
    if (p->run_dir && !reachable(p->run_dir, p->uid, p->gid)) {
        fgx_err("the workers' user %s cannot reach the run directory %s (a directory on its way "
                "is not searchable by uid %u): the workers could not dial controld after "
                "their drop; give --run-dir a path it can reach (the default is /run/fgex)",
                p->user, p->run_dir, (unsigned)p->uid);
        return -EACCES;
    }
    cur = *p;
    cur_set = 1;
    return 0;
}

void ctl_priv_check_sandbox(struct fgx_sandbox *out)
{
    *out = (struct fgx_sandbox){
        .uid = (uid_t)((cur_set ? cur.script_uid : CTL_PRIV_SCRIPT_UID_DEFAULT) + 16),
        .mem_mib = cur_set ? cur.script_mem_mib : CTL_PRIV_SCRIPT_MEM_MIB_DEFAULT,
        .hide = {cur_set ? cur.state_dir : NULL, cur_set ? cur.run_dir : NULL, NULL},
        .pydir_fd = -1,
    };
}

const struct ctl_priv *ctl_priv_get(void)
{
    return cur_set ? &cur : NULL;
}

int ctl_priv_socket_share(const char *path)
{
    if (!cur_set)
        return 0;
    int rv = fgx_sock_share(path, cur.gid);

    if (rv < 0)
        fgx_err("cannot give %s to group %s: %s", path, cur.user, strerror(-rv));
    return rv;
}

long ctl_priv_audit_syscall(const char *rec, pid_t pid)
{
    char want[32];
    const char *sc;

    (void)snprintf(want, sizeof(want), " pid=%d ", (int)pid);
    if (!strstr(rec, "type=1326") || !strstr(rec, want) || !(sc = strstr(rec, " syscall=")))
        return -1;
    return strtol(sc + 9, NULL, 10);
}

const char *ctl_priv_seccomp_syscall(pid_t pid)
{
    static char out[64];
    char rec[2048];
    int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    long nr = -1;

    if (fd != -1) {
        /* one record per read(); the whole ring, newest last: the last match wins */
        for (int i = 0; i < 100000; i++) {
            ssize_t n = read(fd, rec, sizeof(rec) - 1);
            long got;

            if (n == -1 && errno == EPIPE)
                continue; /* overwritten while read */
            if (n <= 0)
                break;
            rec[n] = '\0';
            if ((got = ctl_priv_audit_syscall(rec, pid)) >= 0)
                nr = got;
        }
        close(fd);
    }
    if (nr >= 0)
        (void)snprintf(out, sizeof(out), "syscall %ld", nr);
    else
        (void)snprintf(out, sizeof(out), "a system call outside its list");
    return out;
}

/* scriptworker: runs the services' Python filter files (sw.h). Options:
 *   --listen ipc://PATH its sockets (fgx/swproto.h): PATH.0 .. PATH.(N-1), one per
 *                       interpreter, and PATH, its own
 *   --procs N           Python interpreters (default 2)
 *   --python-dir DIR    the fgex package (scriptworker/python)
 *   --user NAME         the group its sockets are given to (the data-path workers' user)
 *   --script-uid UID    interpreter i runs as UID+i in its sandbox (fgx/sandbox.h)
 *   --script-memory MIB each interpreter's address-space limit
 *   --hide DIR          also hidden from the interpreters (controld's state and run dirs)
 *   --log-level LEVEL */
#include "sw.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdbool.h>
#include <unistd.h>

#include <pwd.h>

#include "fgx/log.h"
#include "fgx/priv.h"
#include "fgx/wctl.h"

static int stop_flag;

static int usage(void)
{
    (void)fputs("usage: scriptworker --listen ipc://PATH --python-dir DIR [--procs N] "
                "[--user NAME] [--script-uid UID] [--script-memory MIB] [--hide DIR]... "
                "[--log-level LEVEL]\n",
                stderr);
    return 2;
}

int main(int argc, char **argv)
{
    struct sw w;
    const char *listen = NULL, *level = "info";
    unsigned procs = SW_PROCS_DEFAULT, suid = SW_SCRIPT_UID_DEFAULT, nhide = 0;
    const char *user = FGX_PRIV_USER_DEFAULT;
    struct passwd *pw;
    char p[sizeof(w.path) + 16];
    int rv;

    memset(&w, 0, sizeof(w));
    w.sandbox.mem_mib = SW_SCRIPT_MEM_MIB_DEFAULT;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--listen") == 0)
            listen = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--python-dir") == 0)
            w.pydir = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--log-level") == 0)
            level = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--user") == 0)
            user = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--hide") == 0) {
            if (nhide == FGX_SANDBOX_HIDE_MAX)
                return usage();
            w.sandbox.hide[nhide++] = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--script-uid") == 0) {
            if (fgx_wctl_parse_uint(argv[++i], 1000, 4294967000u, &suid) < 0)
                return usage();
        } else if (i + 1 < argc && strcmp(argv[i], "--script-memory") == 0) {
            if (fgx_wctl_parse_uint(argv[++i], 64, 1u << 20, &w.sandbox.mem_mib) < 0)
                return usage();
        }
        else if (i + 1 < argc && strcmp(argv[i], "--procs") == 0) {
            if (fgx_wctl_parse_uint(argv[++i], 1, SW_PROCS_MAX, &procs) < 0)
                return usage();
        } else
            return usage();
    }
    if (!listen || !w.pydir)
        return usage();
    {
        enum fgx_log_level lv = FGX_LOG_INFO;

        if (fgx_log_level_parse(level, &lv) < 0)
            return usage();
        fgx_log_init("scriptworker", lv);
    }
    /* the data-path threads dial our sockets as the workers' user */
    pw = getpwnam(user);
    if (!pw) {
        fgx_err("no user %s (--user)", user);
        return 1;
    }
    w.sock_gid = pw->pw_gid;
    w.sandbox.pydir_fd = fgx_sandbox_pydir_open(w.pydir);
    if (w.sandbox.pydir_fd < 0) {
        fgx_err("cannot open %s: %s", w.pydir, strerror(-w.sandbox.pydir_fd));
        return 1;
    }
    w.script_uid = suid;
    fgx_wctl_signals(&stop_flag);
    w.stop = &stop_flag;
    w.nprocs = procs;
    for (unsigned i = 0; i < procs; i++)
        w.child[i].in = w.child[i].out = w.child[i].page_fd = -1;
    w.ctl = -1;
    if (strncmp(listen, "ipc://", 6) == 0)
        listen += 6;
    if (strlen(listen) + 4 > sizeof(w.path)) {
        fgx_err("%s: too long for a socket path", listen);
        return 1;
    }
    (void)snprintf(w.path, sizeof(w.path), "%s", listen);
    /* a thread that finds PATH counts the interpreters' sockets: PATH goes last, and what an
     * earlier scriptworker left is removed first */
    (void)unlink(w.path);
    for (unsigned i = 0; i < SW_PROCS_MAX; i++) {
        (void)snprintf(p, sizeof(p), "%s.%u", w.path, i);
        (void)unlink(p);
    }
    for (unsigned i = 0; i < procs; i++) {
        (void)snprintf(p, sizeof(p), "%s.%u", w.path, i);
        w.child[i].lfd = sw_listen(p, w.sock_gid);
        if (w.child[i].lfd < 0) {
            fgx_err("cannot listen on %s: %s", p, strerror(-w.child[i].lfd));
            return 1;
        }
        if (sw_child_spawn(&w, &w.child[i]) < 0)
            w.child[i].spawned_ms = sw_now_ms(); /* the loop tries again */
    }
    w.ctl = sw_listen(w.path, w.sock_gid);
    if (w.ctl < 0) {
        fgx_err("cannot listen on %s: %s", w.path, strerror(-w.ctl));
        return 1;
    }
    (void)fcntl(w.ctl, F_SETFL, O_NONBLOCK);
    fgx_info("listening on %s with %u Python interpreter(s)", w.path, procs);
    rv = sw_loop_run(&w);
    for (unsigned i = 0; i < procs; i++) {
        sw_child_kill(&w.child[i]);
        close(w.child[i].lfd);
        (void)snprintf(p, sizeof(p), "%s.%u", w.path, i);
        (void)unlink(p);
    }
    for (unsigned i = 0; i < w.nlinks; i++)
        close(w.links[i].fd);
    close(w.ctl);
    (void)unlink(w.path);
    return rv < 0 ? 1 : 0;
}

/* libcommon: a root-bound socket shared with the workers' group (fgx/priv.h). */
#include "fgx/priv.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

int fgx_sock_share(const char *path, gid_t gid)
{
    struct stat st;

    if (stat(path, &st) == -1)
        return -errno;
    if (st.st_gid != gid && chown(path, (uid_t)-1, gid) == -1)
        return -errno;
    if (chmod(path, 0660) == -1)
        return -errno;
    return 0;
}

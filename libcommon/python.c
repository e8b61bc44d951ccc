/* libcommon: the exec of fgex's Python (fgx/python.h). */
#include "fgx/python.h"

#include <errno.h>
#include <unistd.h>

#define PY_ARGS_MAX 32

int fgx_python_exec(const char *const *args)
{
    static char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", NULL};
    const char *argv[PY_ARGS_MAX + 3];
    int n = 0;

    argv[n++] = FGX_PYTHON;
    argv[n++] = "-I";
    for (int i = 0; args[i]; i++) {
        if (i >= PY_ARGS_MAX)
            return -E2BIG;
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    execve(FGX_PYTHON, (char *const *)argv, envp);
    return -errno;
}

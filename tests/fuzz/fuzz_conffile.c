/* libFuzzer harness: controld's configuration file (controld/ctl_conffile.c,
 * /etc/fgex/controld.conf), read through the same getopt table shape controld uses: options with
 * and without arguments, a repeatable one. The file comes from a memfd, so nothing touches the
 * disk. */
#include <assert.h>
#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "controld/ctl_conffile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct option opts[] = {
    {"listen", required_argument, NULL, 'l'},  {"allow", required_argument, NULL, 'a'},
    {"threads", required_argument, NULL, 't'}, {"foreground", no_argument, NULL, 'f'},
    {"config", required_argument, NULL, 'c'},  {"web-listen", required_argument, NULL, 'w'},
    {"log-level", required_argument, NULL, 'v'}, {NULL, 0, NULL, 0},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ctl_conffile c;
    char path[64], arg[80], err[512], buf[256];
    char *argv[4];
    int fd = memfd_create("conf", 0);

    if (fd == -1)
        return 0;
    if (size > 0 && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    snprintf(arg, sizeof(arg), "--config=%s", path);
    argv[0] = "controld";
    argv[1] = arg;
    argv[2] = "--threads=3";
    argv[3] = NULL;
    if (ctl_conffile_load(opts, 3, argv, NULL, &c, err, sizeof(err)) == 0) {
        assert(c.argc >= 3 && c.argv[c.argc] == NULL);
        for (int i = 0; i < c.argc; i++)
            (void)ctl_conffile_origin(&c, i, buf, sizeof(buf));
        ctl_conffile_release(&c);
    }
    close(fd);
    return 0;
}

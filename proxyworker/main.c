/* proxyworker: the transparent TCP proxy layer (libevent). Not built yet: this placeholder
 * exists so that the build and controld's supervision have a binary to find; it refuses to
 * start, so that nothing can mistake it for a working proxy. */
#include <stdio.h>

int main(void)
{
    fprintf(stderr, "proxyworker: the proxy layer is not implemented yet\n");
    return 2;
}

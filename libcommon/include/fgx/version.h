/* fgex's version, shown by controld --version, fgexctl --version and fgexctl status: the
 * Makefile writes it from git describe or the VERSION file into $(BUILD)/gen/fgx_version_gen.h. */
#ifndef FGX_VERSION_H
#define FGX_VERSION_H

#include "fgx_version_gen.h"

#endif

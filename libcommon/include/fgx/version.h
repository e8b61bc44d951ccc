/* fgex's version, shown by controld --version, fgexctl --version and fgexctl status. */
#ifndef FGX_VERSION_H
#define FGX_VERSION_H

#define FGX_VERSION "0.1.0"

#endif

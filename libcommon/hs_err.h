/* Private to libcommon: hyperscan's error codes as text, shared by the compile half
 * (ruleset_compile.c) and the load half (hsdb.c). Lives in hsdb.c so that the workers, which
 * link only libhs_runtime, get it without pulling in any compile code. */
#ifndef FGX_HS_ERR_H
#define FGX_HS_ERR_H

/* A static string naming a hyperscan hs_error_t. */
const char *fgx_hs_strerror(int code);

#endif

/* Running Debian's python3 for fgex's Python parts (the script check, scriptworker's
 * interpreters, `fgexctl script test`): one exec that no caller's environment can redirect. */
#ifndef FGX_PYTHON_H
#define FGX_PYTHON_H

/* Debian's: its dist-packages hold h11, brotli and dpkt. */
#define FGX_PYTHON "/usr/bin/python3"

/* Exec FGX_PYTHON -I ARGS... (args: NULL-terminated, borrowed) with its full path as argv[0]
 * and a fixed environment (PATH, LANG): Python finds its prefix from argv[0] (a bare
 * "python3" is looked up on PATH, where a venv, pyenv or conda one may come first, and its
 * pyvenv.cfg then hides dist-packages), and -I plus the environment leave it no PYTHONHOME,
 * PYTHONPATH, user site or current directory to move it. Returns only on failure: -errno. */
int fgx_python_exec(const char *const *args);

#endif

/* python.exe for the Windows suite under Wine: runs the stage script itself with the host's Linux CPython.
 *
 * Why: no Windows CPython can be installed from the registries this project may use (PyPI, Debian, crates.io carry
 * none), so the suite cannot run a stage script with a real Windows interpreter. This bridge is the next best: heddle.exe
 * resolves `python` on the Windows PATH to this program exactly as it would resolve python.org's python.exe, and the
 * bridge runs the real script, with its real arguments, under the Linux python3 ($HEDDLE_BRIDGE_PYTHON, default
 * /usr/bin/python3) through Wine's __wine_unix_spawnvp (ntdll; waits and returns the exit status).
 *
 * Windows paths cannot be opened by a Linux process, so the bridge translates with Wine's wine_get_unix_file_name:
 * every argument that is an absolute Windows path (X:\... or X:/...), the PATH in `--name=PATH`, and every HEDDLE_*
 * environment variable holding one (passed through /usr/bin/env, since the Linux process sees the Wine process's
 * Unix environment); PATH is the system's. What this does NOT test: the script's own behaviour under a Windows CPython (os.path,
 * subprocess on Windows). */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef LONG(__cdecl *spawn_t)(char *const argv[], int wait);
typedef char *(__cdecl *unix_name_t)(LPCWSTR dos);

static unix_name_t to_unix;

static int is_windows_path(const char *s) {
    return ((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z')) && s[1] == ':' && (s[2] == '\\' || s[2] == '/');
}

/* The Unix name of a Windows path (a new string), or a copy of `s` when it is none. */
static char *translate(const char *s) {
    if (!is_windows_path(s)) return _strdup(s);
    WCHAR w[4096];
    if (!MultiByteToWideChar(CP_UTF8, 0, s, -1, w, 4096)) return _strdup(s);
    char *u = to_unix(w);
    return u ? u : _strdup(s);
}

/* `--name=X:\...` -> `--name=/unix/...`; other arguments through translate(). */
static char *translate_arg(const char *a) {
    const char *eq = strchr(a, '=');
    if (a[0] == '-' && eq && is_windows_path(eq + 1)) {
        char *tail = translate(eq + 1);
        size_t head = (size_t)(eq + 1 - a);
        char *out = malloc(head + strlen(tail) + 1);
        memcpy(out, a, head);
        strcpy(out + head, tail);
        return out;
    }
    return translate(a);
}

int main(int argc, char **argv) {
    HMODULE nt = GetModuleHandleA("ntdll.dll"), k32 = GetModuleHandleA("kernel32.dll");
    spawn_t spawn = (spawn_t)GetProcAddress(nt, "__wine_unix_spawnvp");
    to_unix = (unix_name_t)GetProcAddress(k32, "wine_get_unix_file_name");
    if (!spawn || !to_unix) {
        fprintf(stderr, "python-bridge: not running under Wine (no __wine_unix_spawnvp / wine_get_unix_file_name)\n");
        return 127;
    }
    char python[1024] = "/usr/bin/python3";
    GetEnvironmentVariableA("HEDDLE_BRIDGE_PYTHON", python, sizeof python);
    char **out = calloc((size_t)argc + 64, sizeof *out);
    int n = 0;
    out[n++] = "/usr/bin/env";
    /* The Unix PATH a Wine process carries is not the stage's Windows PATH: give the script's subprocesses (the
     * hailortcli double's `#!/usr/bin/env python3`) the system's. */
    out[n++] = "PATH=/usr/local/bin:/usr/bin:/bin";
    LPCH env = GetEnvironmentStringsA();
    for (LPCH e = env; *e && n < 60; e += strlen(e) + 1) {
        const char *eq = strchr(e, '=');
        if (strncmp(e, "HEDDLE_", 7) == 0 && eq && is_windows_path(eq + 1)) {
            char *u = translate(eq + 1);
            size_t head = (size_t)(eq + 1 - e);
            char *kv = malloc(head + strlen(u) + 1);
            memcpy(kv, e, head);
            strcpy(kv + head, u);
            out[n++] = kv;
        }
    }
    out[n++] = python;
    for (int i = 1; i < argc; i++) out[n++] = translate_arg(argv[i]);
    out[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    return (int)spawn(out, 1);
}

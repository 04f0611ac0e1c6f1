/* A stand-in `python.exe` for tests/windows.sh: no Windows CPython can be installed from the
 * registries this project's CI reaches, so this checks what heddle controls: that a stage's
 * `python` param resolves to a Windows program on PATH and receives the script and arguments.
 *   python.exe SCRIPT ARGS... --out FILE ...   writes FILE: {"script": SCRIPT, "argc": N}
 * Exits 3 when SCRIPT does not exist, 4 when there is no --out. */
#include <stdio.h>
#include <string.h>
#include <windows.h>

int main(int argc, char **argv) {
    if (argc < 2 || GetFileAttributesA(argv[1]) == INVALID_FILE_ATTRIBUTES) {
        fprintf(stderr, "python stand-in: no script %s\n", argc > 1 ? argv[1] : "(none)");
        return 3;
    }
    for (int i = 2; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--out") != 0) continue;
        FILE *f = fopen(argv[i + 1], "w");
        if (!f) return 5;
        fprintf(f, "{\"script\": \"");
        for (const char *c = argv[1]; *c; c++) fprintf(f, *c == '\\' ? "\\\\" : "%c", *c);
        fprintf(f, "\", \"argc\": %d}\n", argc);
        fclose(f);
        return 0;
    }
    fprintf(stderr, "python stand-in: no --out\n");
    return 4;
}

/* A stage that leaves a grandchild behind, for the Job object tests in tests/windows.sh.
 *   spawn.exe tree MARKER DELAY_MS wait|leave   start `spawn.exe child MARKER DELAY_MS`, then
 *                                               sleep forever (wait) or exit at once (leave)
 *   spawn.exe child MARKER DELAY_MS             write MARKER.started, sleep DELAY_MS, write
 *                                               MARKER.survived
 * MARKER.survived exists afterwards only if heddle let the grandchild outlive its stage. */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int touch(const char *marker, const char *suffix) {
    char path[MAX_PATH * 2];
    snprintf(path, sizeof path, "%s.%s", marker, suffix);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fputs(suffix, f);
    fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "child") == 0) {
        if (touch(argv[2], "started")) return 3;
        Sleep((DWORD)atoi(argv[3]));
        return touch(argv[2], "survived");
    }
    if (argc != 5 || strcmp(argv[1], "tree") != 0) {
        fprintf(stderr, "usage: spawn.exe tree MARKER DELAY_MS wait|leave\n");
        return 2;
    }
    char self[MAX_PATH], line[MAX_PATH * 4];
    GetModuleFileNameA(NULL, self, sizeof self);
    snprintf(line, sizeof line, "\"%s\" child \"%s\" %s", self, argv[2], argv[3]);
    STARTUPINFOA si = {sizeof si};
    PROCESS_INFORMATION pi;
    if (!CreateProcessA(NULL, line, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi)) {
        fprintf(stderr, "CreateProcess failed: %lu\n", GetLastError());
        return 4;
    }
    /* Hold on until the grandchild has started, so the test knows it existed. */
    char started[MAX_PATH * 2];
    snprintf(started, sizeof started, "%s.started", argv[2]);
    for (int i = 0; i < 200 && GetFileAttributesA(started) == INVALID_FILE_ATTRIBUTES; i++) Sleep(50);
    printf("grandchild %lu started\n", pi.dwProcessId);
    fflush(stdout);
    if (strcmp(argv[4], "wait") == 0) Sleep(INFINITE);
    return 0;
}

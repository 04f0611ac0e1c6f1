/* Wine 8.0 has no bcryptprimitives.dll, which Rust's std imports ProcessPrng from (Windows 10+).
 * This shim, placed beside heddle.exe, forwards it to RtlGenRandom (advapi32!SystemFunction036),
 * which Wine has. Built by tests/windows.sh with x86_64-w64-mingw32-gcc; used only under Wine. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, n)) return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}

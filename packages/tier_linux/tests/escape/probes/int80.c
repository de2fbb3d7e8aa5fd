/* Opens an IPv4 socket through the 32-bit syscall ABI (int 0x80) of an x86-64 process,
   both through socketcall(2) and the direct socket(2) entry. */
#include <stdio.h>
#include <sys/mman.h>
static long i386(long nr, long a, long b, long c) {
    long ret;
    __asm__ volatile ("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
    return ret;
}
int main(void) {
    /* socketcall(SYS_SOCKET, {AF_INET, SOCK_STREAM, 0}): its argument block must sit
       below 4 GiB, since the 32-bit ABI passes 32-bit pointers. */
    unsigned int *args = mmap(0, 4096, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
    args[0] = 2; args[1] = 1; args[2] = 0;
    long viacall = i386(102, 1, (long)args, 0);
    long direct = i386(359, 2, 1, 0);  /* socket(AF_INET, SOCK_STREAM, 0) */
    printf("RESULT %s socketcall=%ld socket=%ld\n",
           (viacall >= 0 || direct >= 0) ? "ok" : "blocked", viacall, direct);
    return 0;
}

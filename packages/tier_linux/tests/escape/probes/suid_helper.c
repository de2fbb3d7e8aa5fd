/* A setuid-root program reporting whether it gained privilege: an effective uid of 0
   for a caller that is not root, or any effective capability. Built by the escape suite
   (as root) or by tools/ci/escape-as-user.sh for the unprivileged run. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(void) {
    char line[256], capeff[64] = "?";
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "CapEff:", 7)) sscanf(line + 7, "%63s", capeff);
    int gained = (geteuid() == 0 && getuid() != 0) || strcmp(capeff, "0000000000000000") != 0;
    printf("RESULT %s uid=%d euid=%d CapEff=%s\n", gained ? "ok" : "blocked", getuid(), geteuid(), capeff);
    return 0;
}

/* A program built with AddressSanitizer (bench/sparse.sh): its shadow
 * memory is terabytes of MAP_NORESERVE mappings, of which it touches the
 * part that covers its heap. Allocates and writes MiB (argument, default
 * 64), says "ready" and waits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    size_t n = (argc > 1 ? strtoull(argv[1], 0, 10) : 64) << 20;
    char *p = malloc(n);
    memset(p, 1, n);
    printf("ready\n");
    fflush(stdout);
    pause();
    return p[0];
}

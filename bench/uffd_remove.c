/*
 * What a madvise(MADV_DONTNEED) of a registered range costs when the
 * userfaultfd asks for UFFD_EVENT_REMOVE: the call waits until another
 * thread reads the event. pagescope's mover drops store pages this way
 * (docs/performance.md, 2026-11-27, "stale store copies").
 *
 *   gcc -O2 -pthread -o uffd_remove bench/uffd_remove.c
 *   ./uffd_remove events|none [poll]
 *
 * Fills one page of a registered range (UFFDIO_COPY) and drops it again,
 * 20 000 times, and prints the microseconds per madvise. With "events"
 * the userfaultfd has UFFD_FEATURE_EVENT_REMOVE and a second thread reads
 * it, spinning on non-blocking reads (or waiting in poll() with "poll");
 * with "none" it has no event features and nothing reads it. Checks that
 * every event read is a REMOVE of the page dropped.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 20000
#define PAGES 64

static int ufd;
static int use_poll;
static char *area;
static atomic_long removes;

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void *reader(void *arg)
{
    (void)arg;
    struct uffd_msg m[16];
    for (;;) {
        if (use_poll) {
            struct pollfd p = {.fd = ufd, .events = POLLIN};
            poll(&p, 1, -1);
        }
        ssize_t n = read(ufd, m, sizeof m);
        for (ssize_t i = 0; i < n / (ssize_t)sizeof m[0]; i++) {
            unsigned long start = m[i].arg.remove.start;
            if (m[i].event != UFFD_EVENT_REMOVE || start < (unsigned long)area ||
                start >= (unsigned long)area + PAGES * 4096 ||
                m[i].arg.remove.end != start + 4096) {
                fprintf(stderr, "unexpected message (event %u)\n", m[i].event);
                exit(1);
            }
            atomic_fetch_add(&removes, 1);
        }
    }
    return NULL;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "events") && strcmp(argv[1], "none"))) {
        fprintf(stderr, "usage: %s events|none [poll]\n", argv[0]);
        return 2;
    }
    int events = !strcmp(argv[1], "events");
    use_poll = argc > 2 && !strcmp(argv[2], "poll");
    ufd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (ufd < 0)
        die("userfaultfd");
    struct uffdio_api api = {
        .api = UFFD_API,
        .features = events ? UFFD_FEATURE_EVENT_REMOVE : 0,
    };
    if (ioctl(ufd, UFFDIO_API, &api))
        die("UFFDIO_API");
    area = mmap(NULL, PAGES * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED)
        die("mmap");
    struct uffdio_register reg = {
        .range = {.start = (unsigned long)area, .len = PAGES * 4096},
        .mode = UFFDIO_REGISTER_MODE_MISSING,
    };
    if (ioctl(ufd, UFFDIO_REGISTER, &reg))
        die("UFFDIO_REGISTER");
    static char page[4096];
    memset(page, 7, sizeof page);
    pthread_t t;
    if (events && pthread_create(&t, NULL, reader, NULL))
        die("pthread_create");
    double spent = 0;
    for (int i = 0; i < ROUNDS; i++) {
        char *p = area + 4096 * (i % PAGES);
        struct uffdio_copy c = {
            .dst = (unsigned long)p,
            .src = (unsigned long)page,
            .len = 4096,
            .mode = UFFDIO_COPY_MODE_DONTWAKE,
        };
        if (ioctl(ufd, UFFDIO_COPY, &c))
            die("UFFDIO_COPY");
        if (p[100] != 7) {
            fprintf(stderr, "page %d not filled\n", i);
            return 1;
        }
        double t0 = now();
        if (madvise(p, 4096, MADV_DONTNEED))
            die("madvise");
        spent += now() - t0;
    }
    /* The last madvise returns once its event is read, a moment before
     * the reader counts it. */
    for (int i = 0; events && atomic_load(&removes) != ROUNDS && i < 1000; i++)
        usleep(1000);
    if (events && atomic_load(&removes) != ROUNDS) {
        fprintf(stderr, "%ld REMOVE events read, %d expected\n", atomic_load(&removes), ROUNDS);
        return 1;
    }
    printf("%s%s: %.2f us per madvise\n", argv[1], use_poll ? " (reader in poll)" : "",
           spent / ROUNDS * 1e6);
    return 0;
}

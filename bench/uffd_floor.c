/*
 * The floor of any userfaultfd tracer on this machine: the cost of one
 * missing fault served by another thread of the same process with
 * UFFDIO_COPY from a ready page, with nothing logged, nothing evicted and
 * no other process involved. pagescope's cost per reference can come
 * down to this, never below it.
 *
 *   uffd_floor PAGES [idle-poll] [sleep] [calls [wake-last]]
 *
 * Touches PAGES fresh pages of a registered mapping, one read each, while
 * a handler thread spins on the descriptor (non-blocking reads, as
 * pagescope's fault thread spins after a fault), or with "sleep" waits
 * for each fault in poll() (as pagescope does on one CPU). With
 * "idle-poll" it holds the CPU latency limit at 0 (/dev/cpu_dma_latency),
 * as pagescope does while it traces. Run it under taskset to put both
 * threads on one CPU. With "calls" the handler also makes the calls that
 * pagescope's fault thread adds to a fault on an evicted page: it reads
 * the page from a "store" page (pread of /proc/self/mem, as pagescope
 * reads the program's /proc/PID/mem), copies it in (which wakes the
 * thread), and clears an 8-byte "index" entry (pwrite of the same file)
 * while the thread runs on. With "wake-last", as pagescope did before
 * 2026-11-26, it copies without waking, clears the entry, and only then
 * wakes the thread (UFFDIO_WAKE). In pagescope the memory is another
 * process's, so these two calls cost it a little more than here. Prints the
 * microseconds per fault, and checks every page read as the handler
 * filled it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL

static int uffd;
static char *fill;
static int sleeps;
static int calls;
static int wake_last;
static int mem = -1;
static char *store;
static uint64_t index_entry = 1;

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void *serve(void *arg)
{
	(void)arg;
	for (;;) {
		struct uffd_msg m;
		if (sleeps) {
			struct pollfd p = { .fd = uffd, .events = POLLIN };
			poll(&p, 1, -1);
		}
		ssize_t n = read(uffd, &m, sizeof m);
		if (n < 0 && errno == EAGAIN)
			continue;
		if (n != sizeof m)
			return NULL;
		if (m.event != UFFD_EVENT_PAGEFAULT)
			continue;
		struct uffdio_copy c = {
			.dst = m.arg.pagefault.address & ~(PAGE - 1),
			.src = (uintptr_t)fill,
			.len = PAGE,
		};
		if (calls) {
			static char page[PAGE] __attribute__((aligned(PAGE)));
			if (pread(mem, page, PAGE, (off_t)(uintptr_t)store) != PAGE)
				die("pread /proc/self/mem");
			c.src = (uintptr_t)page;
			if (wake_last)
				c.mode = UFFDIO_COPY_MODE_DONTWAKE;
		}
		if (ioctl(uffd, UFFDIO_COPY, &c) && errno != EEXIST)
			die("UFFDIO_COPY");
		if (calls) {
			uint64_t zero = 0;
			if (pwrite(mem, &zero, sizeof zero, (off_t)(uintptr_t)&index_entry) !=
			    sizeof zero)
				die("pwrite /proc/self/mem");
			struct uffdio_range w = { c.dst, PAGE };
			if (wake_last && ioctl(uffd, UFFDIO_WAKE, &w))
				die("UFFDIO_WAKE");
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: uffd_floor PAGES [idle-poll] [sleep] [calls [wake-last]]\n");
		return 2;
	}
	size_t pages = strtoul(argv[1], NULL, 0);
	int idle_poll = 0;
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "idle-poll") == 0) {
			idle_poll = 1;
		} else if (strcmp(argv[i], "sleep") == 0) {
			sleeps = 1;
		} else if (strcmp(argv[i], "calls") == 0) {
			calls = 1;
		} else if (strcmp(argv[i], "wake-last") == 0) {
			wake_last = 1;
		} else {
			fprintf(stderr, "uffd_floor: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (idle_poll) {
		int fd = open("/dev/cpu_dma_latency", O_WRONLY);
		int32_t zero = 0;
		if (fd < 0 || write(fd, &zero, sizeof zero) != sizeof zero)
			die("/dev/cpu_dma_latency");
		/* Held until exit. */
	}
	uffd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (uffd < 0)
		die("userfaultfd");
	struct uffdio_api api = { .api = UFFD_API };
	if (ioctl(uffd, UFFDIO_API, &api))
		die("UFFDIO_API");
	char *area = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED)
		die("mmap");
	fill = aligned_alloc(PAGE, PAGE);
	memset(fill, 7, PAGE);
	store = aligned_alloc(PAGE, PAGE);
	memset(store, 7, PAGE);
	if (calls && (mem = open("/proc/self/mem", O_RDWR)) < 0)
		die("/proc/self/mem");
	struct uffdio_register r = {
		.range = { (uintptr_t)area, pages * PAGE },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};
	if (ioctl(uffd, UFFDIO_REGISTER, &r))
		die("UFFDIO_REGISTER");
	pthread_t t;
	if (pthread_create(&t, NULL, serve, NULL))
		die("pthread_create");
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	size_t sum = 0;
	for (size_t i = 0; i < pages; i++)
		sum += ((volatile char *)area)[i * PAGE];
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (sum != 7 * pages) {
		fprintf(stderr, "uffd_floor: pages read %zu, want %zu\n", sum, 7 * pages);
		return 1;
	}
	double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
	printf("%.3f\n", ns / 1e3 / pages);
	return 0;
}

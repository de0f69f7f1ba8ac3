/*
 * What it costs pagescope to read and write a traced program's memory,
 * the two ways it can: process_vm_readv/process_vm_writev, which look the
 * process up and make the ptrace access check on every call, and an
 * open /proc/PID/mem, which made that check once, at open. On a fault on
 * an evicted page pagescope reads the page from its slot (4 KiB) and
 * clears its index entry (8 bytes); an eviction reads many slots at once.
 *
 *   gcc -O2 -o remote_mem bench/remote_mem.c && ./remote_mem [CALLS]
 *
 * Forks a child that holds a buffer and waits, then times CALLS calls
 * (default 100000) of each kind on the child's memory, and prints the
 * microseconds per call (per page for the batched read) and the ratio
 * of the two ways. Checks that every read saw what the child holds.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define PAGES 256
#define BATCH 64

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

int main(int argc, char **argv)
{
	long calls = argc > 1 ? strtol(argv[1], NULL, 0) : 100000;
	if (calls <= 0) {
		fprintf(stderr, "usage: remote_mem [CALLS]\n");
		return 2;
	}
	/* Mapped before the fork: the same addresses in the child. */
	char *area = mmap(NULL, 2 * PAGES * PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED)
		die("mmap");
	memset(area, 7, 2 * PAGES * PAGE);
	pid_t child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		pause();
		_exit(0);
	}
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/mem", child);
	int mem = open(path, O_RDWR);
	if (mem < 0)
		die(path);
	static char buf[BATCH * PAGE] __attribute__((aligned(4096)));
	unsigned long zero = 0;
	double t[5];

	double a = now_us();
	for (long i = 0; i < calls; i++) {
		struct iovec l = { &zero, 8 }, r = { area + 8 * (i % 512), 8 };
		if (process_vm_writev(child, &l, 1, &r, 1, 0) != 8)
			die("process_vm_writev");
	}
	t[0] = (now_us() - a) / calls;
	a = now_us();
	for (long i = 0; i < calls; i++)
		if (pwrite(mem, &zero, 8, (off_t)(unsigned long)(area + 8 * (i % 512))) != 8)
			die("pwrite /proc/PID/mem");
	t[1] = (now_us() - a) / calls;
	a = now_us();
	for (long i = 0; i < calls; i++) {
		char *src = area + 8 * PAGE + PAGE * (i % (PAGES - 8));
		struct iovec l = { buf, PAGE }, r = { src, PAGE };
		if (process_vm_readv(child, &l, 1, &r, 1, 0) != PAGE || buf[PAGE - 1] != 7)
			die("process_vm_readv");
	}
	t[2] = (now_us() - a) / calls;
	a = now_us();
	for (long i = 0; i < calls; i++) {
		char *src = area + 8 * PAGE + PAGE * (i % (PAGES - 8));
		if (pread(mem, buf, PAGE, (off_t)(unsigned long)src) != PAGE || buf[PAGE - 1] != 7)
			die("pread /proc/PID/mem");
	}
	t[3] = (now_us() - a) / calls;
	/* A batch of pages in one call: every other page, as scattered slots. */
	long batches = calls / BATCH > 0 ? calls / BATCH : 1;
	struct iovec local = { buf, BATCH * PAGE }, remote[BATCH];
	for (int k = 0; k < BATCH; k++)
		remote[k] = (struct iovec){ area + 2 * k * PAGE, PAGE };
	a = now_us();
	for (long i = 0; i < batches; i++)
		if (process_vm_readv(child, &local, 1, remote, BATCH, 0) != (ssize_t)(BATCH * PAGE) ||
		    buf[BATCH * PAGE - 1] != 7)
			die("process_vm_readv (batch)");
	t[4] = (now_us() - a) / batches / BATCH;
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);

	printf("write 8 bytes:  process_vm_writev %.3f us, /proc/PID/mem %.3f us (ratio %.2f)\n",
	       t[0], t[1], t[0] / t[1]);
	printf("read one page:  process_vm_readv %.3f us, /proc/PID/mem %.3f us (ratio %.2f)\n",
	       t[2], t[3], t[2] / t[3]);
	printf("read %d pages in one process_vm_readv: %.3f us per page (%.2f of one page alone)\n",
	       BATCH, t[4], t[4] / t[2]);
	return 0;
}

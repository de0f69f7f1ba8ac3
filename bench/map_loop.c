/*
 * A process whose own memory-map changes show a walk of its page tables:
 * it maps SIZE_MIB of anonymous memory in one mapping and writes every
 * page, then for SECONDS maps one page, writes it and unmaps it, over and
 * over, timing each round (mmap and munmap take the memory-map lock for
 * writing; the write is a fault, which moves the counters `pagescope
 * serve` watches, so that it walks this process at every collection).
 * Prints `ready` once the mapping is written, then each round longer
 * than 2 ms (`slow MS at NS`, NS its start on CLOCK_MONOTONIC), then the
 * round count and the longest round.
 *
 *   cc -O2 -o map_loop bench/map_loop.c && ./map_loop SIZE_MIB SECONDS
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: map_loop SIZE_MIB SECONDS\n");
		return 2;
	}
	size_t size = (size_t)atol(argv[1]) << 20;
	double seconds = atof(argv[2]);
	char *buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	for (size_t i = 0; i < size; i += 4096)
		buf[i] = 1;
	printf("ready\n");
	fflush(stdout);
	double start = now(), longest = 0;
	long rounds = 0;
	while (now() - start < seconds) {
		double t = now();
		char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		p[0] = 1;
		munmap(p, 4096);
		double d = now() - t;
		if (d > longest)
			longest = d;
		rounds++;
		if (d > 2e-3) {
			printf("slow %.3f at %.0f\n", d * 1e3, t * 1e9);
			fflush(stdout);
		}
	}
	printf("rounds %ld longest %.3f ms\n", rounds, longest * 1e3);
	return 0;
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* memdiag.c - the memory figures log_memory_usage reports: RSS, a file's pages in the page cache, glibc's heap. */
#include "model-cache.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

uint64_t memdiag_rss(void)
{
	FILE *f = fopen("/proc/self/statm", "re");
	unsigned long long size = 0, resident = 0;

	if (f) {
		if (fscanf(f, "%llu %llu", &size, &resident) != 2)
			resident = 0;
		fclose(f);
	}
	return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* By mincore() on a mapping of the file, a gigabyte at a time. */
uint64_t memdiag_cached(int fd, uint64_t size)
{
	const uint64_t window = 1ull << 30;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), total = 0;
	unsigned char *vec = malloc((size_t)(window / page));

	for (uint64_t off = 0; vec && off < size; off += window) {
		size_t len = (size_t)(size - off < window ? size - off : window);
		void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);

		if (p == MAP_FAILED)
			break;
		if (mincore(p, len, vec) == 0)
			for (size_t i = 0; i < (len + page - 1) / page; i++)
				total += (vec[i] & 1) * page;
		munmap(p, len);
	}
	free(vec);
	return total;
}

uint64_t memdiag_heap(void)
{
	struct mallinfo2 mi = mallinfo2();

	return mi.arena + mi.hblkhd;
}

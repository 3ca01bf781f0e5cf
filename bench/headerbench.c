/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* headerbench.c - `make bench`: the time and memory of reading hostile and huge safetensors headers and indexes, against their targets. */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <devcache.h>

/* The targets (issue 29): peak memory of parsing at most 64 MiB and 8
 * bytes a byte of header; 1,000,000 tensors read in under 2 s. */
#define BASE_BYTES ((double)(64 << 20))
#define PER_BYTE 8.0
#define TENSORS 1000000u

static char *grow(char *buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return buf;
	*cap = need * 2;
	if (!(buf = realloc(buf, *cap))) {
		perror("headerbench");
		exit(2);
	}
	return buf;
}

static void write_file(const char *path, const void *a, size_t alen, const void *b, size_t blen)
{
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(a, 1, alen, f) != alen || (blen && fwrite(b, 1, blen, f) != blen) ||
	    fclose(f) != 0) {
		perror(path);
		exit(2);
	}
}

/* A safetensors file: the length, the header, data_len zero bytes. */
static void write_st(const char *path, const char *h, size_t hlen, size_t data_len)
{
	unsigned char len8[8];
	char *data = calloc(1, data_len + 1);
	char *all = malloc(8 + hlen);

	for (int i = 0; i < 8; i++)
		len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
	memcpy(all, len8, 8);
	memcpy(all + 8, h, hlen);
	write_file(path, all, 8 + hlen, data, data_len);
	free(all);
	free(data);
}

/* Opens path in a child process: seconds of wall and CPU time, the child's
 * peak resident size less its start, and the result. */
static int measure(const char *path, double *wall, double *cpu, double *peak)
{
	long pages = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	struct timespec a, b;
	struct rusage ru;
	int status;

	if (!f || fscanf(f, "%ld %ld", &pages, &resident) != 2)
		exit(2);
	fclose(f);
	clock_gettime(CLOCK_MONOTONIC, &a);
	pid_t pid = fork();
	if (pid == 0) {
		devcache_model_file_t *mf = NULL;
		int rc = devcache_model_file_open(path, &mf);

		devcache_model_file_close(mf);
		_exit(-rc);
	}
	if (pid < 0 || wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status)) {
		fprintf(stderr, "headerbench: %s: the child failed\n", path);
		exit(2);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	*wall = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	*cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	*peak = (double)ru.ru_maxrss * 1024 - (double)resident * (double)sysconf(_SC_PAGESIZE);
	return -WEXITSTATUS(status);
}

static bool missed;

static void report(const char *id, const char *path, size_t len, int want, bool timed)
{
	double wall, cpu, peak, bound = BASE_BYTES + PER_BYTE * (double)len;
	int rc = measure(path, &wall, &cpu, &peak);
	bool mem_ok = peak <= bound, time_ok = !timed || cpu < 2.0;

	printf("%-22s %6.1f MB  %s  %6.2f s wall  %6.2f s CPU  %7.1f MiB peak (bound %.0f MiB)\n", id,
	       (double)len / 1e6, rc == want ? "as expected" : "WRONG RESULT", wall, cpu,
	       peak / 1048576, bound / 1048576);
	if (rc != want)
		exit(2);
	printf("TARGET headers/%-19s %s  peak %.1f MiB <= 64 MiB + 8 x %.1f MB = %.0f MiB\n", id,
	       mem_ok ? "PASS" : "MISS", peak / 1048576, (double)len / 1e6, bound / 1048576);
	if (timed)
		printf("TARGET headers/%-19s %s  %.2f s of CPU (%.2f s wall) < 2 s\n", "1M-tensors-time",
		       time_ok ? "PASS" : "MISS", cpu, wall);
	missed |= !mem_ok || !time_ok;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 2 && strcmp(argv[1], "-d") == 0 ? argv[2] : ".";
	char path[3][4096];
	size_t cap = 0, len = 0;
	char *h = NULL;

	printf("== Hostile and huge headers: a child process opens each (bench/headerbench)\n");
	snprintf(path[0], sizeof path[0], "%s/headerbench-1m.safetensors", dir);
	snprintf(path[1], sizeof path[1], "%s/headerbench-braces.safetensors", dir);
	snprintf(path[2], sizeof path[2], "%s/headerbench-braces.safetensors.index.json", dir);

	/* 1,000,000 valid tensors of one byte each. */
	h = grow(h, &cap, 16);
	h[len++] = '{';
	for (unsigned i = 0; i < TENSORS; i++) {
		h = grow(h, &cap, len + 128);
		len += (size_t)sprintf(h + len, "%s\"model.layers.%u.weight\":{\"dtype\":\"U8\",\"shape\":[1],"
					       "\"data_offsets\":[%u,%u]}", i ? "," : "", i, i, i + 1);
	}
	h[len++] = '}';
	write_st(path[0], h, len, TENSORS);
	report("1M-tensors", path[0], len, 0, true);

	/* 10 MB of distinct keys, each an empty object. */
	len = 0;
	h[len++] = '{';
	for (unsigned i = 0; len < 10000000; i++)
		len += (size_t)sprintf(h + len, "%s\"k%u\":{}", i ? "," : "", i);
	h[len++] = '}';
	write_st(path[1], h, len, 0);
	report("10MB-empty-objects", path[1], len, DEVCACHE_EFORMAT, false);

	/* A 10 MB index whose weight_map maps to empty objects. */
	len = (size_t)sprintf(h, "{\"weight_map\": {");
	for (unsigned i = 0; len < 10000000; i++)
		len += (size_t)sprintf(h + len, "%s\"%u\":{}", i ? "," : "", i);
	len += (size_t)sprintf(h + len, "}}");
	write_file(path[2], h, len, NULL, 0);
	report("10MB-index", path[2], len, DEVCACHE_EFORMAT, false);

	for (int i = 0; i < 3; i++)
		unlink(path[i]);
	free(h);
	return missed ? 1 : 0;
}

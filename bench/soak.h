/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* soak.h - what bench/soak's files share: the generated models and the bytes each tensor must hold. */
#ifndef DEVCACHE_BENCH_SOAK_H
#define DEVCACHE_BENCH_SOAK_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <devcache.h>

#include "bench.h"

#define SOAK_MAX_MODELS 8
#define SOAK_MAX_FILES 16

struct soak_tensor {
	char name[32];
	size_t size;
	uint32_t hash; /* of the name: what its bytes are made from */
};

/* One model as the soak loads it: path is the file, or a set's index. */
struct soak_model {
	const char *label;  /* "small.safetensors" */
	char path[PATH_MAX];
	size_t n;
	struct soak_tensor *t;
	uint64_t bytes;     /* the tensors' bytes */
};

struct soak_models {
	char dir[PATH_MAX];
	size_t n;
	struct soak_model m[SOAK_MAX_MODELS];
	size_t n_files;
	char *files[SOAK_MAX_FILES]; /* every file written, to remove */
};

/* Write the models into a new directory under parent; on failure print
 * why and return -1. */
int soak_models_write(struct soak_models *ms, const char *parent);
/* Remove the files and the directory, and free the lists. */
void soak_models_remove(struct soak_models *ms);

/* Byte j of a tensor whose name hashes to h.  The j >> 8 and j >> 16
 * terms make a copy shifted by a multiple of 256 bytes come out wrong. */
static inline unsigned char soak_byte(uint32_t h, size_t j)
{
	return (unsigned char)((h * 31u + j * 7u + (j >> 8) * 13u + (j >> 16)) & 0xff);
}

/* The first byte of p[0..n), tensor bytes off.. of t, that is wrong;
 * (size_t)-1 when all are right. */
static inline size_t soak_check(const struct soak_tensor *t, const unsigned char *p, size_t off,
				size_t n)
{
	for (size_t j = 0; j < n; j++)
		if (p[j] != soak_byte(t->hash, off + j))
			return off + j;
	return (size_t)-1;
}

/* ---- the run: soak.c, soak-work.c, soak-check.c ------------------------------------ */

/* The budgets.  Each context's model cache may hold SOAK_VRAM_MIB on the
 * device and SOAK_RAM_MIB in RAM, and its allocator may reserve
 * SOAK_DEVICE_MIB on the device (memory_fraction), which on the fakes is
 * all of the device's memory, for both contexts together. */
#define SOAK_CONTEXTS 2
#define SOAK_VRAM_MIB 24
#define SOAK_RAM_MIB 40
#define SOAK_DEVICE_MIB 160

/* What the threads did; by context where the invariants need it. */
struct soak_counts {
	uint64_t loads[SOAK_CONTEXTS], hits[SOAK_CONTEXTS], load_enomem[SOAK_CONTEXTS];
	uint64_t cancelled[SOAK_CONTEXTS];
	uint64_t from_ram, partial, verified, verified_bytes;
	uint64_t resident, resident_enomem, to_host, evict_all, evicted;
	uint64_t allocs, alloc_enomem, frees, records, empties, pinned, pinned_enomem, syncs;
	uint64_t stat_reads;
};

struct soak {
	const char *device;
	char device_name[300];
	char options_common[256];
	const struct soak_models *ms;
	devcache_ctx_t *ctx[SOAK_CONTEXTS];
	devcache_device_t *dev[SOAK_CONTEXTS];
	bool host_memory; /* the device's memory is host memory */
	bool vmm, expandable[SOAK_CONTEXTS];
	double fraction;  /* memory_fraction: SOAK_DEVICE_MIB of the device */
	FILE *devnull;    /* where the summaries go while running */
	double elapsed;
	int stop;         /* atomic: the threads stop */
	unsigned long warnings; /* atomic */
	pthread_mutex_t fail_lock;
	int failed;
	char failure[2048]; /* the first failure */
	struct soak_counts total;
	uint64_t evictions[SOAK_CONTEXTS], misses[SOAK_CONTEXTS]; /* the cache's, at the end */
};

struct soak_worker {
	struct soak *s;
	int id;
	bool loader;
	pthread_t thread;
	struct rng rng;
	struct soak_counts n;
};

/* The first failure is kept, and every thread told to stop. */
__attribute__((format(printf, 2, 3))) void soak_fail(struct soak *s, const char *fmt, ...);
bool soak_stopping(struct soak *s);
/* True when rc is 0; DEVCACHE_ENOMEM is counted in *enomem (where not
 * NULL) and anything else fails the soak, naming call and what. */
bool soak_ok(struct soak *s, int rc, uint64_t *enomem, const char *call, const char *what);

/* The threads (soak-work.c). */
void *soak_loader(void *worker);
void *soak_allocator(void *worker);

/* The report and the checks at the end (soak-check.c). */
void soak_add_counts(struct soak *s, const struct soak_worker *w, int n);
void soak_print_setup(const struct soak *s, FILE *out);
void soak_print_report(const struct soak *s, FILE *out);
/* Check the statistics at any time, as a thread may (soak-check.c). */
void soak_check_running(struct soak *s, int c);
/* With every thread joined: the invariants, then every model evicted and
 * the caches emptied, and the invariants of an idle device. */
void soak_check_invariants(struct soak *s, bool verbose);

#endif

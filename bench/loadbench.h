/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* loadbench.h - what bench/loadbench's files share: the model files, a figure's runs, each section's results, the run's settings. */
#ifndef DEVCACHE_BENCH_LOADBENCH_H
#define DEVCACHE_BENCH_LOADBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <devcache.h>

#include "bench.h"

#define GIB ((uint64_t)1 << 30)
#define PAGE 4096u
#define MAX_REPS 15
#define N_SHARDS 4 /* the sharded set: the 4G model as this many files */

/* A Llama-like model: embeddings, LAYERS decoder blocks of grouped-query
 * attention and a gated MLP with their RMS norms, a final norm and the
 * output head, all BF16, in the names Hugging Face's Llama uses. */
struct layout {
	const char *label; /* "1G": names the figures and the targets */
	const char *file;  /* under the -d directory */
	const char *like;  /* what its shapes follow */
	unsigned hidden, inter, kv, layers, vocab;
	uint64_t seed;
};

struct tensor {
	char name[80];
	unsigned n_dims;
	uint64_t dims[2];
	bool ones; /* a norm's weight: 1.0 everywhere */
};

struct model {
	const struct layout *l;
	char file[256];  /* its name, under the -d directory */
	char path[4096];
	struct tensor *t; /* a shard's point into its whole model's list */
	size_t n;
	size_t first;    /* the index of t[0] in the whole model: seeds its data */
	char *header;    /* the 8-byte length and the JSON, padded to 8 bytes */
	size_t header_len;
	uint64_t size;   /* of the whole file */
	bool ready;
	char why[256];   /* why not ready */
};

/* A model written as N_SHARDS safetensors files and a Hugging Face index:
 * the tensors of the whole model in order, cut into runs of about equal
 * bytes, each with the bytes the single file holds. */
struct set {
	struct model shard[N_SHARDS];
	char index_file[256];
	char index_path[4096];
	uint64_t size;   /* of the shards and the index */
	size_t index_len;
	bool ready;
	char why[300];
};

struct figure {
	double t[MAX_REPS];
	int n;
	uint64_t peak;       /* the highest of the runs' peak RSS */
	uint64_t over;       /* staged: the highest peak RSS less the model's device bytes */
	uint64_t dev_bytes;  /* staged: the model's device allocation */
	bool skipped;
	bool no_rss;         /* cat: its peak RSS is not ours to measure */
	char why[256];
};

static inline double gib(uint64_t b)
{
	return (double)b / (double)GIB;
}

static inline double mib(uint64_t b)
{
	return (double)b / (double)MIB;
}

/* ---- the run's settings (loadbench.c, from the options) ------------------------------ */

extern const char *dir, *module_dir;
extern const char *extra_options; /* -o: for every context, to compare settings */
extern int reps;
extern int n_switches;
extern const char *sweep_device; /* -S */
extern bool quick;               /* -q */

/* ---- the measurement core (loadbench-measure.c) --------------------------------------- */

/* The first load that failed in the sharded or partial figures: those
 * figures are then SKIP with it, and loadbench exits 2. */
extern char load_error[1200];
extern bool load_failed;
extern bool missed;  /* a target was missed: loadbench exits 1 */
extern bool use_hwm; /* peak RSS is VmHWM (hwm_reset() worked), else sampled */

void *xcalloc(size_t n, size_t size);
/* /proc/self/status's and /proc/meminfo's kB fields, in bytes. */
uint64_t status_bytes(const char *field);
uint64_t meminfo_bytes(const char *field);
/* Peak RSS between peak_start() and peak_end(). */
bool hwm_reset(void);
void peak_start(void);
uint64_t peak_end(void);

/* Contexts with the bench device and -o's options; what fails exits 2. */
devcache_ctx_t *open_ctx(const char *extra);
devcache_device_t *device(devcache_ctx_t *ctx, const char *id);
uint64_t ring_bytes(void);
/* A fault of a figure: kept in load_error and told on stderr; false. */
bool fault(const char *fmt, ...) DEVCACHE_PRINTF(1, 2);
bool try_load(devcache_ctx_t *ctx, const char *path, devcache_device_t *dev,
	      const devcache_load_args_t *args, devcache_model_t **model_p);
uint64_t touch(const devcache_model_t *model);
bool staged_matches(const devcache_model_t *model);

/* The loaders timed, one run each into a figure. */
double median(const struct figure *f);
void record(struct figure *f, double t, uint64_t peak);
void run_cat(const struct model *m, struct figure *f);
void run_naive(const struct model *m, struct figure *f);
bool run_zero_copy(const char *path, struct figure *load_f, struct figure *touch_f);
bool run_staged(const char *path, struct figure *cold, struct figure *warm_f);

/* The report's lines. */
void print_target(const char *id, const char *verdict, const char *fmt, ...) DEVCACHE_PRINTF(3, 4);
void print_head(const char *per);
void print_row(const char *label, const struct figure *f, uint64_t bytes, const char *rss_note);

/* ---- the model files (loadbench-models.c) --------------------------------------------- */

/* The file of layout l in the -d directory, reused or written: m->ready,
 * or m->why says why not. */
void prepare(struct model *m, const struct layout *l);
/* whole's tensors as N_SHARDS files and an index: s->ready, or s->why. */
void prepare_set(struct set *s, const struct model *whole);
/* The part of the file in the page cache, 0 to 1; warm() reads it first. */
double resident(const struct model *m);
double warm(const struct model *m);
/* Whether m is written, fits in memory twice over and stays in the page
 * cache once read: else why says why, and SKIP is printed. */
bool warm_beside_copy(const struct model *m, char *why, size_t why_size);

/* ---- the sections ---------------------------------------------------------------------- */

/* One file (loadbench-size.c). */
struct size_result {
	bool measured;
	char why[300];
	struct figure cat, naive, zc, touch, cold, warm;
};

void measure_size(const struct model *m, struct size_result *r);
void size_targets(const struct model *m, const struct size_result *r, uint64_t ring);

/* A sharded set against the single file (loadbench-sharded.c). */
/* [0]: the single file, [1]: the set of shards through its index. */
struct sharded_result {
	bool measured;
	char why[1300];
	struct figure zc[2], touch[2], cold[2], warm[2];
};

void measure_sharded(const struct model *one, const struct set *s, struct sharded_result *r);
void sharded_targets(const struct model *one, const struct sharded_result *r);

/* A partial load (loadbench-partial.c). */
struct partial_result {
	bool measured;
	char why[1300];
	uint64_t budget;               /* max_cache_vram */
	struct figure cold, warm;      /* dev_bytes: the result's device_bytes */
	devcache_load_result_t res;    /* of the last load */
	devcache_model_info_t info;
};

void measure_partial(const struct model *m, struct partial_result *r);
void partial_targets(const struct model *m, const struct partial_result *r, uint64_t ring);

/* Reading into the caller's memory (loadbench-engine.c), on the 1G model. */
struct engine_result {
	bool measured;
	char why[300];
	struct figure cache_cold, cache_warm, read_cold, read_warm, naive;
};

void measure_engine(const struct model *m, struct engine_result *r);
void engine_targets(const struct model *m, const struct engine_result *r, uint64_t ring);

/* Model switching (loadbench-switch.c). */
void switching(const struct model *a, const struct model *b);

/* -S: the staging sweep (loadbench-sweep.c), of the layout full unless -q;
 * the exit status. */
int staging_sweep(const struct layout *full);

/* ---- a model manager's loop (loadbench-manager.c) ------------------------------------- */

void manager(void);

#endif

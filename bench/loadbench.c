/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* loadbench.c - benchmark: loading generated safetensors models (zero-copy on the host, staged onto a device) against cat and a naive loader, a sharded set against one file, a partial load's RSS, and RSS while switching models. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "model-writer-core.h"

extern char **environ;

#define GIB ((uint64_t)1 << 30)
#define PAGE 4096u
#define IO_BUF (64 * MIB)     /* warm-up reads */
#define MAX_REPS 15
#define GENERATOR "libdevcache bench/loadbench 1"

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

static const struct layout sizes[] = {
	{ "1G", "model-1g.safetensors", "TinyLlama-like", 2048, 5632, 512, 9, 32000, 1 },
	{ "4G", "model-4g.safetensors", "Llama-3-8B-like", 4096, 14336, 1024, 5, 128256, 4 },
};
#define N_SIZES (sizeof sizes / sizeof sizes[0])

/* The two models alternated by the switching figures: 508 MiB each. */
static const struct layout switch_models[] = {
	{ "A", "switch-a.safetensors", "TinyLlama-like", 2048, 5632, 512, 3, 32000, 11 },
	{ "B", "switch-b.safetensors", "TinyLlama-like", 2048, 5632, 512, 3, 32000, 12 },
};
#define SWITCH_BUDGET "768M" /* max_cache_ram: one model fits, two do not */

/* The sharded and partial figures use the 4G layout (sizes[SET_SIZE]). */
#define SET_SIZE 1
#define N_SHARDS 4

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

static const char *dir = ".", *module_dir;
static const char *extra_options; /* -o: for every context, to compare settings */
static int reps = 3;
static int n_switches = 50;
static bool want[N_SIZES] = { true, true };
static bool want_sharded = true, want_partial = true;

/* The first load that failed in the sharded or partial figures: those
 * figures are then SKIP with it, and loadbench exits 2. */
static char load_error[1200];
static bool load_failed;

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (!p) {
		fprintf(stderr, "loadbench: out of memory\n");
		exit(2);
	}
	return p;
}

/* ---- memory figures ---------------------------------------------------------- */

/* A kB field of /proc/self/status (VmRSS, VmHWM), in bytes; 0 if absent. */
static uint64_t status_bytes(const char *field)
{
	char buf[4096];
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
	const char *p;

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strstr(buf, field);
	return p ? strtoull(p + strlen(field), NULL, 10) * 1024 : 0;
}

static uint64_t meminfo_bytes(const char *field)
{
	char line[256];
	uint64_t v = 0;
	FILE *f = fopen("/proc/meminfo", "r");

	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, field, strlen(field)))
			v = strtoull(line + strlen(field), NULL, 10) * 1024;
	if (f)
		fclose(f);
	return v;
}

/* Peak RSS over a stretch of code: the kernel's VmHWM, reset by writing 5
 * to /proc/self/clear_refs; where that is refused, a thread sampling
 * VmRSS every millisecond (which can miss a peak shorter than that). */
static bool use_hwm;
static struct {
	pthread_t thread;
	bool on;
	uint64_t max;
} sampler;

static bool hwm_reset(void)
{
	int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
	bool ok = fd >= 0 && write(fd, "5", 1) == 1;

	if (fd >= 0)
		close(fd);
	return ok;
}

static void *sample_main(void *arg)
{
	const struct timespec ms = { 0, 1000000 };

	(void)arg;
	while (__atomic_load_n(&sampler.on, __ATOMIC_RELAXED)) {
		uint64_t rss = status_bytes("VmRSS:");

		if (rss > sampler.max)
			sampler.max = rss;
		nanosleep(&ms, NULL);
	}
	return NULL;
}

static void peak_start(void)
{
	if (use_hwm && hwm_reset())
		return;
	use_hwm = false;
	sampler.max = status_bytes("VmRSS:");
	__atomic_store_n(&sampler.on, true, __ATOMIC_RELAXED);
	if (pthread_create(&sampler.thread, NULL, sample_main, NULL) != 0) {
		fprintf(stderr, "loadbench: cannot start the RSS sampler\n");
		exit(2);
	}
}

static uint64_t peak_end(void)
{
	uint64_t rss = status_bytes("VmRSS:");

	if (use_hwm)
		return status_bytes("VmHWM:");
	__atomic_store_n(&sampler.on, false, __ATOMIC_RELAXED);
	pthread_join(sampler.thread, NULL);
	return sampler.max > rss ? sampler.max : rss;
}

/* ---- the model files ------------------------------------------------------------ */

static void add_tensor(struct model *m, const char *name, uint64_t d0, uint64_t d1)
{
	struct tensor *t = &m->t[m->n++];

	snprintf(t->name, sizeof t->name, "%s", name);
	t->n_dims = d1 ? 2 : 1;
	t->dims[0] = d0;
	t->dims[1] = d1;
	t->ones = d1 == 0;
}

static uint64_t tensor_bytes(const struct tensor *t)
{
	return t->dims[0] * (t->n_dims == 2 ? t->dims[1] : 1) * 2;
}

static void list_tensors(struct model *m)
{
	const struct layout *l = m->l;
	static const char *const proj[] = { "self_attn.q_proj", "self_attn.k_proj",
					    "self_attn.v_proj", "self_attn.o_proj",
					    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj" };
	const uint64_t rows[] = { l->hidden, l->kv, l->kv, l->hidden, l->inter, l->inter, l->hidden };
	const uint64_t cols[] = { l->hidden, l->hidden, l->hidden, l->hidden, l->hidden, l->hidden,
				  l->inter };
	char name[80];

	m->t = xcalloc((size_t)l->layers * 9 + 3, sizeof *m->t);
	add_tensor(m, "model.embed_tokens.weight", l->vocab, l->hidden);
	for (unsigned i = 0; i < l->layers; i++) {
		snprintf(name, sizeof name, "model.layers.%u.input_layernorm.weight", i);
		add_tensor(m, name, l->hidden, 0);
		for (size_t p = 0; p < 7; p++) {
			snprintf(name, sizeof name, "model.layers.%u.%s.weight", i, proj[p]);
			add_tensor(m, name, rows[p], cols[p]);
			if (p == 3) {
				snprintf(name, sizeof name,
					 "model.layers.%u.post_attention_layernorm.weight", i);
				add_tensor(m, name, l->hidden, 0);
			}
		}
	}
	add_tensor(m, "model.norm.weight", l->hidden, 0);
	add_tensor(m, "lm_head.weight", l->vocab, l->hidden);
}

/* The model's tensors for the model writer (tests/model-writer-core.h), and
 * its metadata, written first; loadbench stops when they do not fit. */
static struct mw_tensor *writer_tensors(const struct model *m, char *meta, size_t meta_size)
{
	struct mw_tensor *t = xcalloc(m->n, sizeof *t);

	for (size_t i = 0; i < m->n; i++)
		t[i] = (struct mw_tensor){ .name = m->t[i].name, .size = tensor_bytes(&m->t[i]),
					   .dtype = "BF16", .n_dims = m->t[i].n_dims,
					   .shape = m->t[i].dims };
	if ((size_t)snprintf(meta, meta_size,
			     "{\"format\":\"pt\",\"generator\":\"%s\",\"like\":\"%s\"}",
			     GENERATOR, m->l->like) >= meta_size) {
		fprintf(stderr, "loadbench: the metadata of %s is too long\n", m->file);
		exit(2);
	}
	return t;
}

/* The header as the file holds it (the model writer's): its length
 * (little-endian), then the JSON, padded with spaces to a multiple of 8 so
 * that the data is aligned. */
static void build_header(struct model *m)
{
	char meta[256];
	struct mw_tensor *t = writer_tensors(m, meta, sizeof meta);
	const struct mw_opts o = { .metadata_json = meta };
	unsigned char *header;
	uint64_t data;
	struct mw_err err;

	if (mw_st_header(t, m->n, MW_ALL_SHARDS, &o, &header, &m->header_len, &data, &err)) {
		fprintf(stderr, "loadbench: %s: %s\n", m->file, err.msg);
		exit(2);
	}
	free(t);
	m->header = (char *)header;
	m->size = m->header_len + data;
}

/* Deterministic BF16 weights: random sign and mantissa, magnitudes from
 * 2^-7 to 2^-4 as in a trained model's projections; norms are 1.0. */
struct filler {
	struct rng rng;
	uint64_t word;
	unsigned left; /* 16-bit lanes of word not used yet */
	bool ones;
};

static void fill(struct filler *fl, uint16_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (fl->ones) {
			v[i] = 0x3f80;
			continue;
		}
		if (!fl->left) {
			fl->word = rng_next(&fl->rng);
			fl->left = 4;
		}
		uint16_t r = (uint16_t)fl->word;

		fl->word >>= 16;
		fl->left--;
		v[i] = (uint16_t)((r & 0x807f) | ((0x78u + ((r >> 7) & 3u)) << 7));
	}
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The model writer's fill callback: tensor i's weights, its filler
 * seeded afresh at its first byte (sizes are even: whole BF16 values). */
struct generation {
	const struct model *m;
	struct filler fl;
};

static void generate_fill(void *user, size_t i, uint64_t off, unsigned char *buf, size_t n)
{
	struct generation *g = user;
	uint16_t v[4096];

	if (off == 0) {
		g->fl = (struct filler){ .ones = g->m->t[i].ones };
		rng_seed(&g->fl.rng, g->m->l->seed * 1000003 + g->m->first + i);
	}
	for (size_t done = 0, k; done + 2 <= n; done += 2 * k) {
		k = (n - done) / 2 < 4096 ? (n - done) / 2 : 4096;
		fill(&g->fl, v, k);
		memcpy(buf + done, v, 2 * k);
	}
}

/* Writes the file with the model writer, under a temporary name renamed
 * into place once complete and on disk. */
static int generate(struct model *m)
{
	char tmp[4200], meta[256];
	struct mw_tensor *t = writer_tensors(m, meta, sizeof meta);
	struct generation g = { .m = m };
	const struct mw_opts o = { .fill = generate_fill, .fill_user = &g, .metadata_json = meta,
				   .flags = MW_FSYNC };
	struct mw_err err;
	int rc = 0;

	snprintf(tmp, sizeof tmp, "%s.tmp", m->path);
	if (mw_st_write(tmp, t, m->n, MW_ALL_SHARDS, &o, &err)) {
		snprintf(m->why, sizeof m->why, "%.250s", err.msg);
		rc = -1;
	} else if (rename(tmp, m->path)) {
		snprintf(m->why, sizeof m->why, "cannot rename %.160s: %s", tmp, strerror(errno));
		rc = -1;
	}
	if (rc)
		unlink(tmp);
	free(t);
	return rc;
}

/* A file left by an earlier run is reused when its size and header are
 * those this run would write: same layout, same generator. */
static bool reusable(const struct model *m)
{
	struct stat st;
	char *head;
	bool same = false;
	int fd = open(m->path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return false;
	if (fstat(fd, &st) == 0 && (uint64_t)st.st_size == m->size &&
	    (head = malloc(m->header_len)) != NULL) {
		same = pread(fd, head, m->header_len, 0) == (ssize_t)m->header_len &&
		       memcmp(head, m->header, m->header_len) == 0;
		free(head);
	}
	close(fd);
	return same;
}

static double gib(uint64_t b)
{
	return (double)b / (double)GIB;
}

static void set_name(struct model *m, const char *file)
{
	snprintf(m->file, sizeof m->file, "%s", file);
	snprintf(m->path, sizeof m->path, "%s/%s", dir, file);
}

/* The file on disk: reused, or written when there is room. */
static void materialize(struct model *m)
{
	struct statvfs vfs;
	double t0;

	build_header(m);
	if (reusable(m)) {
		m->ready = true;
		printf("%-36s %6.2f GiB  reused  %s, %zu BF16 tensors\n", m->file, gib(m->size),
		       m->l->like, m->n);
		return;
	}
	unlink(m->path);
	if (statvfs(dir, &vfs) == 0 &&
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < m->size + 256 * MIB) {
		snprintf(m->why, sizeof m->why,
			 "not enough disk space for %.60s: %.2f GiB free in %s, %.2f GiB needed "
			 "(and 256 MiB to spare)", m->file,
			 gib((uint64_t)vfs.f_bavail * vfs.f_frsize), dir, gib(m->size));
		printf("%-36s %6.2f GiB  SKIP  %s\n", m->file, gib(m->size), m->why);
		return;
	}
	t0 = now_seconds();
	if (generate(m) != 0) {
		printf("%-36s %6.2f GiB  FAILED  %s\n", m->file, gib(m->size), m->why);
		return;
	}
	m->ready = true;
	printf("%-36s %6.2f GiB  written in %.1f s  %s, %zu BF16 tensors\n", m->file, gib(m->size),
	       now_seconds() - t0, m->l->like, m->n);
}

static void prepare(struct model *m, const struct layout *l)
{
	memset(m, 0, sizeof *m);
	m->l = l;
	set_name(m, l->file);
	list_tensors(m);
	materialize(m);
}

/* ---- the sharded set ------------------------------------------------------------ */

/* The index as Hugging Face writes it (the model writer's): the tensors'
 * bytes in all, and the shard of each tensor. */
static char *index_json(const struct set *s, size_t *len_p)
{
	size_t n = 0, stem = strlen(s->index_file) - strlen(".safetensors.index.json");
	struct mw_tensor *t;
	struct mw_err err;
	char name[256], *json;

	for (size_t k = 0; k < N_SHARDS; k++)
		n += s->shard[k].n;
	t = xcalloc(n, sizeof *t);
	n = 0;
	for (size_t k = 0; k < N_SHARDS; k++)
		for (size_t i = 0; i < s->shard[k].n; i++)
			t[n++] = (struct mw_tensor){ .name = s->shard[k].t[i].name,
						     .size = tensor_bytes(&s->shard[k].t[i]),
						     .shard = (unsigned)k };
	snprintf(name, sizeof name, "%.*s", (int)stem, s->index_file);
	if (mw_index_json(name, t, n, N_SHARDS, 0, &json, &err)) {
		fprintf(stderr, "loadbench: %s\n", err.msg);
		exit(2);
	}
	free(t);
	*len_p = strlen(json);
	return json;
}

/* Writes the index unless the file holds exactly that text. */
static int write_index(struct set *s, bool *reused_p)
{
	size_t len;
	char *json = index_json(s, &len), *old = malloc(len + 1), tmp[4200];
	int fd = open(s->index_path, O_RDONLY | O_CLOEXEC);
	struct stat st;

	*reused_p = false;
	s->index_len = len;
	if (fd >= 0 && old && fstat(fd, &st) == 0 && (uint64_t)st.st_size == len &&
	    pread(fd, old, len, 0) == (ssize_t)len && memcmp(old, json, len) == 0)
		*reused_p = true;
	if (fd >= 0)
		close(fd);
	free(old);
	if (*reused_p) {
		free(json);
		return 0;
	}
	snprintf(tmp, sizeof tmp, "%s.tmp", s->index_path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write_all(fd, json, len) || fsync(fd) || close(fd) ||
	    rename(tmp, s->index_path)) {
		snprintf(s->why, sizeof s->why, "cannot write %.200s: %s", tmp, strerror(errno));
		unlink(tmp);
		free(json);
		return -1;
	}
	free(json);
	return 0;
}

/* The whole model's tensors in order, cut where the running total of
 * bytes passes a quarter, a half, three quarters (by each tensor's
 * middle), and written as model-4g-0000K-of-00004.safetensors with
 * model-4g.safetensors.index.json. */
static void prepare_set(struct set *s, const struct model *whole)
{
	size_t start[N_SHARDS + 1] = { 0 }, k = 0, stem;
	uint64_t total = 0, cum = 0;
	char name[256];
	bool reused;

	memset(s, 0, sizeof *s);
	for (size_t i = 0; i < whole->n; i++)
		total += tensor_bytes(&whole->t[i]);
	for (size_t i = 0; i < whole->n; i++) {
		uint64_t b = tensor_bytes(&whole->t[i]);
		size_t to = (size_t)((cum + b / 2) * N_SHARDS / total);

		if (to > N_SHARDS - 1)
			to = N_SHARDS - 1;
		while (k < to)
			start[++k] = i;
		cum += b;
	}
	while (k < N_SHARDS)
		start[++k] = whole->n;
	stem = strlen(whole->l->file) - strlen(".safetensors");
	for (k = 0; k < N_SHARDS; k++) {
		struct model *m = &s->shard[k];

		m->l = whole->l;
		m->t = whole->t + start[k];
		m->first = start[k];
		m->n = start[k + 1] - start[k];
		snprintf(name, sizeof name, "%.*s-%05zu-of-%05d.safetensors", (int)stem,
			 whole->l->file, k + 1, N_SHARDS);
		set_name(m, name);
		if (m->n == 0) {
			snprintf(s->why, sizeof s->why, "shard %s would be empty", name);
			return;
		}
	}
	snprintf(s->index_file, sizeof s->index_file, "%.*s.safetensors.index.json", (int)stem,
		 whole->l->file);
	snprintf(s->index_path, sizeof s->index_path, "%s/%s", dir, s->index_file);
	for (k = 0; k < N_SHARDS; k++) {
		materialize(&s->shard[k]);
		if (!s->shard[k].ready) {
			snprintf(s->why, sizeof s->why, "%s", s->shard[k].why);
			return;
		}
		s->size += s->shard[k].size;
	}
	if (write_index(s, &reused) != 0) {
		printf("%-36s %10s  FAILED  %s\n", s->index_file, "", s->why);
		return;
	}
	s->size += s->index_len;
	s->ready = true;
	printf("%-36s %6.1f KiB  %s  the index of the %d shards above (%.2f GiB in all)\n",
	       s->index_file, (double)s->index_len / 1024, reused ? "reused" : "written", N_SHARDS,
	       gib(s->size));
}

/* The part of the file in the page cache (mincore), 0 to 1. */
static double resident(const struct model *m)
{
	int fd = open(m->path, O_RDONLY | O_CLOEXEC);
	uint64_t in = 0, pages = (m->size + PAGE - 1) / PAGE;
	unsigned char *vec = malloc(pages ? pages : 1);
	void *map;

	if (!vec || fd < 0) {
		fprintf(stderr, "loadbench: %s: %s\n", m->path, strerror(errno));
		exit(2);
	}
	map = mmap(NULL, m->size, PROT_READ, MAP_SHARED, fd, 0);
	if (map != MAP_FAILED && mincore(map, m->size, vec) == 0)
		for (uint64_t i = 0; i < pages; i++)
			in += vec[i] & 1;
	if (map != MAP_FAILED)
		munmap(map, m->size);
	close(fd);
	free(vec);
	return pages ? (double)in / (double)pages : 1;
}

/* Reads the file once so that the timed loads find it in the page cache,
 * and returns the part of it resident afterwards (mincore), 0 to 1. */
static double warm(const struct model *m)
{
	char *buf = malloc(IO_BUF);
	int fd = open(m->path, O_RDONLY | O_CLOEXEC);

	if (!buf || fd < 0) {
		fprintf(stderr, "loadbench: %s: %s\n", m->path, strerror(errno));
		exit(2);
	}
	while (read(fd, buf, IO_BUF) > 0)
		;
	close(fd);
	free(buf);
	return resident(m);
}

/* ---- contexts and the model cache ------------------------------------------------- */

static devcache_ctx_t *open_ctx(const char *extra)
{
	char opts[8400];
	devcache_ctx_t *ctx;
	int err;

	/* Only the bench module besides the built-in host backend, so that
	 * backends installed on the machine play no part. */
	snprintf(opts, sizeof opts, "backend_path:%s,backends:benchdev%s%s%s%s", module_dir,
		 extra ? "," : "", extra ? extra : "", extra_options ? "," : "",
		 extra_options ? extra_options : "");
	if ((err = bench_open(&ctx, opts)) != 0)
		bench_fail(opts, err);
	return ctx;
}

static devcache_device_t *device(devcache_ctx_t *ctx, const char *id)
{
	devcache_device_t *dev;
	int err = devcache_device_get(ctx, id, &dev);

	if (err)
		bench_fail(id, err);
	return dev;
}

static devcache_model_t *load(devcache_ctx_t *ctx, const char *path, devcache_device_t *dev)
{
	devcache_model_t *model;
	int err = devcache_model_load(ctx, path, dev, NULL, &model);

	if (err)
		bench_fail(path, err);
	return model;
}

/* A fault of a figure: kept in load_error and told on stderr; false. */
static bool fault(const char *fmt, ...) DEVCACHE_PRINTF(1, 2);

static bool fault(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(load_error, sizeof load_error, fmt, ap);
	va_end(ap);
	fprintf(stderr, "loadbench: %s\n", load_error);
	load_failed = true;
	return false;
}

/* devcache_model_load(), its failure kept in load_error. */
static bool try_load(devcache_ctx_t *ctx, const char *path, devcache_device_t *dev,
		     const devcache_load_args_t *args, devcache_model_t **model_p)
{
	devcache_device_info_t info;
	int err = devcache_model_load(ctx, path, dev, args, model_p);

	if (err) {
		char why[1024];

		snprintf(why, sizeof why, "%s", devcache_last_error());
		if (devcache_device_info(dev, &info))
			snprintf(info.id, sizeof info.id, "?");
		return fault("devcache_model_load(%s onto %s) failed: %s (%s)", path, info.id,
			     devcache_strerror(err), why);
	}
	return true;
}

/* Reads one byte of every page of every tensor (a host model's bytes). */
static uint64_t touch(const devcache_model_t *model)
{
	size_t n = devcache_model_file_tensor_count(devcache_model_file(model));
	uint64_t sum = 0;

	for (size_t i = 0; i < n; i++) {
		devcache_tensor_info_t info;
		void *data;

		if (devcache_model_tensor_at(model, i, &info, &data))
			bench_fail("devcache_model_tensor_at", DEVCACHE_ENOENT);
		for (uint64_t off = 0; off < info.size; off += PAGE)
			sum += ((const volatile unsigned char *)data)[off];
	}
	return sum;
}

/* A staged model's tensors must hold the file's bytes: the first and last
 * 4 KiB of each are compared with the file, or with its shard in a set
 * (the emulated device's memory is host memory; a partial model's host
 * tensors are the file's mapping). */
static bool staged_matches(const devcache_model_t *model)
{
	const devcache_model_file_t *mf = devcache_model_file(model);
	size_t n = devcache_model_file_tensor_count(mf);
	size_t n_files = devcache_model_file_shard_count(mf);
	int *fds = xcalloc(n_files, sizeof *fds);
	char buf[PAGE];
	bool ok = true;

	for (size_t k = 0; k < n_files; k++) {
		const char *path;
		uint64_t size;

		fds[k] = devcache_model_file_shard(mf, k, &path, &size) ? -1
			 : open(path, O_RDONLY | O_CLOEXEC);
		ok &= fds[k] >= 0;
	}
	for (size_t i = 0; ok && i < n; i++) {
		devcache_tensor_info_t info;
		void *data;

		if (devcache_model_tensor_at(model, i, &info, &data) || info.shard >= n_files) {
			ok = false;
			break;
		}
		size_t len = info.size < PAGE ? (size_t)info.size : PAGE;
		uint64_t tail = info.size - len;
		int fd = fds[info.shard];

		ok = pread(fd, buf, len, (off_t)info.offset) == (ssize_t)len &&
		     !memcmp(buf, data, len) &&
		     pread(fd, buf, len, (off_t)(info.offset + tail)) == (ssize_t)len &&
		     !memcmp(buf, (char *)data + tail, len);
	}
	for (size_t k = 0; k < n_files; k++)
		if (fds[k] >= 0)
			close(fds[k]);
	free(fds);
	return ok;
}

/* ---- the figures -------------------------------------------------------------------- */

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

static double median(const struct figure *f)
{
	double s[MAX_REPS];

	memcpy(s, f->t, (size_t)f->n * sizeof *s);
	qsort(s, (size_t)f->n, sizeof *s, bench_cmp_double);
	return f->n % 2 ? s[f->n / 2] : (s[f->n / 2 - 1] + s[f->n / 2]) / 2;
}

static void record(struct figure *f, double t, uint64_t peak)
{
	f->t[f->n++] = t;
	if (peak > f->peak)
		f->peak = peak;
}

/* cat FILE > /dev/null, spawned and waited for.  Its peak RSS is not
 * reported: with posix_spawn's vfork, ru_maxrss counts this process's. */
static void run_cat(const struct model *m, struct figure *f)
{
	char *argv[] = { "cat", (char *)m->path, NULL };
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int status, err;
	double t0 = now_seconds();

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	err = posix_spawn(&pid, "/bin/cat", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (err) {
		f->skipped = true;
		snprintf(f->why, sizeof f->why, "cannot run /bin/cat: %s", strerror(err));
		return;
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		f->skipped = true;
		snprintf(f->why, sizeof f->why, "/bin/cat %.200s failed", m->path);
		return;
	}
	record(f, now_seconds() - t0, 0);
	f->no_rss = true;
}

/* What a program does without a loader: malloc the file's size and read()
 * the whole file into it. */
static void run_naive(const struct model *m, struct figure *f)
{
	double t0;
	char *buf;
	uint64_t done = 0;
	int fd;

	peak_start();
	t0 = now_seconds();
	buf = malloc(m->size);
	fd = open(m->path, O_RDONLY | O_CLOEXEC);
	if (!buf || fd < 0) {
		fprintf(stderr, "loadbench: naive loader: %s: %s\n", m->path, strerror(errno));
		exit(2);
	}
	while (done < m->size) {
		ssize_t n = read(fd, buf + done, m->size - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "loadbench: naive loader: %s: short read\n", m->path);
			exit(2);
		}
		done += (uint64_t)n;
	}
	close(fd);
	double t = now_seconds() - t0;

	record(f, t, peak_end());
	free(buf);
}

/* A fresh context each run, so every load is a miss.  path is a file or a
 * set's index.  False (load_error says why) when the load fails. */
static bool run_zero_copy(const char *path, struct figure *load_f, struct figure *touch_f)
{
	devcache_ctx_t *ctx = open_ctx(NULL);
	devcache_device_t *host = device(ctx, "host");
	devcache_cache_stats_t cs;
	devcache_model_t *model;
	double t0;
	bool ok;

	peak_start();
	t0 = now_seconds();
	ok = try_load(ctx, path, host, NULL, &model);
	double t = now_seconds() - t0;
	uint64_t peak = peak_end();

	if (!ok) {
		devcache_close(ctx);
		return false;
	}
	record(load_f, t, peak);
	devcache_cache_stats(ctx, &cs);
	if (cs.misses != 1 || cs.hits != 0) {
		devcache_model_release(model);
		devcache_close(ctx);
		return fault("zero-copy load of %s was not a miss", path);
	}
	peak_start();
	t0 = now_seconds();
	touch(model);
	t = now_seconds() - t0;
	record(touch_f, t, peak_end());
	devcache_model_release(model);
	devcache_close(ctx);
	return true;
}

static bool staged_load(devcache_ctx_t *ctx, devcache_device_t *dev, const char *path,
			struct figure *f)
{
	devcache_model_t *model;
	uint64_t used, budget, peak;
	double t0;
	bool ok;

	peak_start();
	t0 = now_seconds();
	ok = try_load(ctx, path, dev, NULL, &model);
	double t = now_seconds() - t0;

	peak = peak_end();
	if (!ok)
		return false;
	record(f, t, peak);
	if (devcache_cache_device_usage(ctx, dev, &used, &budget))
		bench_fail("devcache_cache_device_usage", DEVCACHE_EINVAL);
	f->dev_bytes = used;
	if (peak > used && peak - used > f->over)
		f->over = peak - used;
	ok = staged_matches(model);
	devcache_model_release(model);
	return ok || fault("the staged copy of %s differs from the file", path);
}

/* The staging path onto benchdev:0: a first load into fresh device memory
 * (the emulated device's pages are faulted in by the copies), then, after
 * evicting it, a load into the block the allocator kept cached, as device
 * memory already in use is on a GPU. */
static bool run_staged(const char *path, struct figure *cold, struct figure *warm_f)
{
	devcache_ctx_t *ctx = open_ctx(NULL);
	devcache_device_t *dev = device(ctx, "benchdev:0");
	bool ok = staged_load(ctx, dev, path, cold);

	if (ok && devcache_cache_evict_all(ctx) != 1)
		ok = fault("%s was not evicted", path);
	ok = ok && staged_load(ctx, dev, path, warm_f);
	devcache_close(ctx);
	return ok;
}

/* ---- the report ------------------------------------------------------------------------- */

static bool missed;

static void print_target(const char *id, const char *verdict, const char *fmt, ...)
	DEVCACHE_PRINTF(3, 4);

static void print_target(const char *id, const char *verdict, const char *fmt, ...)
{
	va_list ap;

	missed |= strcmp(verdict, "MISS") == 0;
	printf("TARGET %-28s %s  ", id, verdict);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

static double mib(uint64_t b)
{
	return (double)b / (double)MIB;
}

/* The head of a table of loads; the GB/s are of what (the file, the upload). */
static void print_head(const char *per)
{
	char unit[32];

	snprintf(unit, sizeof unit, "(%s)", per);
	printf("%-46s %10s %10s %10s\n", "loader (median of runs; peak RSS: highest)", "time ms",
	       "GB/s", "peak RSS");
	printf("%-46s %10s %10s %10s\n", "", "", unit, "MiB");
}

static void print_row(const char *label, const struct figure *f, uint64_t bytes,
		      const char *rss_note)
{
	if (f->skipped) {
		printf("%-46s SKIP  %s\n", label, f->why);
		return;
	}
	double t = median(f);

	printf("%-46s %10.2f %10.2f ", label, t * 1e3, (double)bytes / t / 1e9);
	if (f->no_rss)
		printf("%10s  (another process)\n", "-");
	else
		printf("%10.1f%s\n", mib(f->peak), rss_note ? rss_note : "");
}

struct size_result {
	bool measured;
	char why[300];
	struct figure cat, naive, zc, touch, cold, warm;
};

static uint64_t ring_bytes(void)
{
	devcache_ctx_t *ctx = open_ctx(NULL);
	char n[64], size[64];
	uint64_t ring;

	if (devcache_config_get(ctx, "staging_buffers", n, sizeof n, NULL) ||
	    devcache_config_get(ctx, "staging_buffer_size", size, sizeof size, NULL))
		bench_fail("devcache_config_get", DEVCACHE_ENOENT);
	char *unit;
	double v = strtod(size, &unit);
	uint64_t mult = *unit == 'K' ? 1024 : *unit == 'M' ? MIB : *unit == 'G' ? GIB : 1;

	ring = (uint64_t)strtoull(n, NULL, 10) * (uint64_t)(v * (double)mult);
	printf("staging ring: staging_buffers %s x staging_buffer_size %s = %.0f MiB%s\n", n, size,
	       mib(ring), extra_options ? "" : " (the defaults)");
	devcache_close(ctx);
	return ring;
}

static void measure_size(const struct model *m, struct size_result *r)
{
	uint64_t avail = meminfo_bytes("MemAvailable:");
	double resident;

	memset(r, 0, sizeof *r);
	printf("\n-- %s: %s, %llu bytes (%.2f GiB), %zu tensors\n", m->l->label, m->l->file,
	       (unsigned long long)m->size, gib(m->size), m->n);
	if (!m->ready) {
		snprintf(r->why, sizeof r->why, "%s", m->why);
		printf("SKIP  %s\n", r->why);
		return;
	}
	/* The file in the page cache, and one copy of it beside it. */
	if (avail < 2 * m->size + GIB) {
		snprintf(r->why, sizeof r->why,
			 "not enough memory to keep %s in the page cache beside a copy: "
			 "%.1f GiB available, %.1f GiB needed", m->l->file, gib(avail),
			 gib(2 * m->size + GIB));
		printf("SKIP  %s\n", r->why);
		return;
	}
	resident = warm(m);
	printf("page cache: %.1f%% of the file resident after one read (mincore)\n", resident * 100);
	if (resident < 0.99) {
		snprintf(r->why, sizeof r->why, "the page cache kept only %.1f%% of %s",
			 resident * 100, m->l->file);
		printf("SKIP  %s\n", r->why);
		return;
	}
	r->measured = true;
	/* The runs of each loader are interleaved with the others'. */
	for (int i = 0; i < reps; i++) {
		if (!r->cat.skipped)
			run_cat(m, &r->cat);
		run_naive(m, &r->naive);
		if (!run_zero_copy(m->path, &r->zc, &r->touch) ||
		    !run_staged(m->path, &r->cold, &r->warm))
			exit(2);
	}
	print_head("file");
	print_row("cat FILE > /dev/null (page-cache read limit)", &r->cat, m->size, NULL);
	print_row("naive: malloc(size) + read() into it", &r->naive, m->size, NULL);
	print_row("zero-copy host load (devcache_model_load)", &r->zc, m->size, NULL);
	print_row("  then reading 1 byte per page (separately)", &r->touch, m->size,
		  "  (file pages mapped)");
	print_row("staged load onto benchdev:0, fresh memory", &r->cold, m->size, NULL);
	print_row("staged load onto benchdev:0, memory cached", &r->warm, m->size, NULL);
	printf("staged loads: peak RSS less the model's device bytes (%.1f MiB, counted in RSS on "
	       "benchdev): %.1f MiB into fresh memory, %.1f MiB into cached memory\n",
	       mib(r->cold.dev_bytes), mib(r->cold.over), mib(r->warm.over));
}

static void size_targets(const struct model *m, const struct size_result *r, uint64_t ring)
{
	char id[64];
	const char *l = m->l->label;

	snprintf(id, sizeof id, "load/staging-bandwidth-%s", l);
	if (!r->measured || r->cat.skipped) {
		print_target(id, "SKIP", "%s", r->measured ? r->cat.why : r->why);
	} else {
		double cat = (double)m->size / median(&r->cat) / 1e9;
		double st = (double)m->size / median(&r->warm) / 1e9;
		double cold = (double)m->size / median(&r->cold) / 1e9;

		print_target(id, st >= 0.9 * cat ? "PASS" : "MISS",
			     "staged %.2f GB/s (device memory cached; %.2f into fresh) = %.0f%% of "
			     "cat's %.2f GB/s (target >= 90%%)", st, cold, 100 * st / cat, cat);
	}
	snprintf(id, sizeof id, "load/staging-rss-%s", l);
	if (!r->measured) {
		print_target(id, "SKIP", "%s", r->why);
	} else {
		uint64_t over = r->cold.over > r->warm.over ? r->cold.over : r->warm.over;
		uint64_t limit = ring + 32 * MIB;

		print_target(id, over <= limit ? "PASS" : "MISS",
			     "peak RSS %.1f MiB - model on device %.1f MiB = %.1f MiB (target <= "
			     "ring %.0f MiB + 32 MiB = %.0f MiB)",
			     mib(r->cold.peak > r->warm.peak ? r->cold.peak : r->warm.peak),
			     mib(r->cold.dev_bytes), mib(over), mib(ring), mib(limit));
	}
}

/* ---- a sharded set against the single file ------------------------------------------- */

/* [0]: the single file, [1]: the set of shards through its index. */
struct sharded_result {
	bool measured;
	char why[1300];
	struct figure zc[2], touch[2], cold[2], warm[2];
};

static void measure_sharded(const struct model *one, const struct set *s, struct sharded_result *r)
{
	uint64_t avail = meminfo_bytes("MemAvailable:");
	double in_one, in_set = 1, t0 = now_seconds();

	memset(r, 0, sizeof *r);
	printf("\n-- sharded %s: %s, %d shards and their index, %llu bytes (%.2f GiB) in all, "
	       "against the single file %s\n", one->l->label, s->index_file, N_SHARDS,
	       (unsigned long long)s->size, gib(s->size), one->file);
	for (size_t k = 0; s->ready && k < N_SHARDS; k++)
		printf("   %s: %zu tensors (%s .. %s), %.1f MiB\n", s->shard[k].file, s->shard[k].n,
		       s->shard[k].t[0].name, s->shard[k].t[s->shard[k].n - 1].name,
		       mib(s->shard[k].size));
	if (!one->ready || !s->ready) {
		snprintf(r->why, sizeof r->why, "%s", !one->ready ? one->why : s->why);
		printf("SKIP  %s\n", r->why);
		return;
	}
	/* Both in the page cache, and one copy of the model beside them. */
	if (avail < one->size + s->size + one->size + GIB) {
		snprintf(r->why, sizeof r->why,
			 "not enough memory to keep %s and its shards in the page cache beside a "
			 "copy: %.1f GiB available, %.1f GiB needed", one->file, gib(avail),
			 gib(2 * one->size + s->size + GIB));
		printf("SKIP  %s\n", r->why);
		return;
	}
	warm(one);
	for (size_t k = 0; k < N_SHARDS; k++)
		warm(&s->shard[k]);
	in_one = resident(one);
	for (size_t k = 0; k < N_SHARDS; k++) {
		double in = resident(&s->shard[k]);

		if (in < in_set)
			in_set = in;
	}
	printf("page cache: %.1f%% of the single file and at least %.1f%% of each shard resident "
	       "after one read of each (mincore)\n", in_one * 100, in_set * 100);
	if (in_one < 0.99 || in_set < 0.99) {
		snprintf(r->why, sizeof r->why, "the page cache kept only %.1f%% of %s and %.1f%% of "
			 "a shard", in_one * 100, one->file, in_set * 100);
		printf("SKIP  %s\n", r->why);
		return;
	}
	/* Interleaved, and which of the two goes first alternates. */
	for (int i = 0; i < reps; i++) {
		const char *path[2] = { one->path, s->index_path };
		bool ok = true;

		for (int j = 0; ok && j < 2; j++) {
			int w = (i + j) % 2;

			ok = run_zero_copy(path[w], &r->zc[w], &r->touch[w]);
		}
		for (int j = 0; ok && j < 2; j++) {
			int w = (i + j) % 2;

			ok = run_staged(path[w], &r->cold[w], &r->warm[w]);
		}
		if (!ok) {
			snprintf(r->why, sizeof r->why, "%s", load_error);
			printf("FAILED  %s\n", r->why);
			return;
		}
	}
	r->measured = true;
	print_head("file");
	print_row("zero-copy host load: the single file", &r->zc[0], one->size, NULL);
	print_row("zero-copy host load: 4 shards + index", &r->zc[1], one->size, NULL);
	print_row("  then 1 byte per page: the single file", &r->touch[0], one->size,
		  "  (file pages mapped)");
	print_row("  then 1 byte per page: 4 shards", &r->touch[1], one->size,
		  "  (file pages mapped)");
	print_row("staged, fresh memory: the single file", &r->cold[0], one->size, NULL);
	print_row("staged, fresh memory: 4 shards + index", &r->cold[1], one->size, NULL);
	print_row("staged, memory cached: the single file", &r->warm[0], one->size, NULL);
	print_row("staged, memory cached: 4 shards + index", &r->warm[1], one->size, NULL);
	printf("4 shards / the single file: zero-copy %.2fx, staged into fresh memory %.2fx, "
	       "staged into cached memory %.2fx\n", median(&r->zc[1]) / median(&r->zc[0]),
	       median(&r->cold[1]) / median(&r->cold[0]), median(&r->warm[1]) / median(&r->warm[0]));
	printf("(these figures took %.0f s)\n", now_seconds() - t0);
}

static void sharded_targets(const struct model *one, const struct sharded_result *r)
{
	char id[64];
	const char *l = one->l->label;

	snprintf(id, sizeof id, "load/sharded-host-%s", l);
	if (!r->measured) {
		print_target(id, "SKIP", "%s", r->why);
	} else {
		double a = median(&r->zc[1]), b = median(&r->zc[0]);

		print_target(id, a <= 1.05 * b ? "PASS" : "MISS",
			     "zero-copy: 4 shards %.3f ms / single file %.3f ms = %.2fx (target <= 1.05x)",
			     a * 1e3, b * 1e3, a / b);
	}
	snprintf(id, sizeof id, "load/sharded-staged-%s", l);
	if (!r->measured) {
		print_target(id, "SKIP", "%s", r->why);
	} else {
		double a = median(&r->warm[1]), b = median(&r->warm[0]);
		double fa = median(&r->cold[1]), fb = median(&r->cold[0]);

		print_target(id, a <= 1.05 * b ? "PASS" : "MISS",
			     "staged (device memory cached): 4 shards %.1f ms / single file %.1f ms = "
			     "%.2fx; into fresh memory %.1f / %.1f ms = %.2fx (target <= 1.05x)",
			     a * 1e3, b * 1e3, a / b, fa * 1e3, fb * 1e3, fa / fb);
	}
}

/* ---- a partial load ---------------------------------------------------------------------- */

struct partial_result {
	bool measured;
	char why[1300];
	uint64_t budget;               /* max_cache_vram */
	struct figure cold, warm;      /* dev_bytes: the result's device_bytes */
	devcache_load_result_t res;    /* of the last load */
	devcache_model_info_t info;
};

/* One partial load onto benchdev:0: peak RSS over it, less the device
 * bytes the load says it placed (benchdev's memory is host memory). */
static bool partial_load(devcache_ctx_t *ctx, devcache_device_t *dev, const struct model *m,
			 struct partial_result *r, struct figure *f)
{
	devcache_load_args_t args = { 0 };
	devcache_model_t *model;
	uint64_t peak;
	double t0;
	bool ok;

	args.struct_size = sizeof args;
	args.result = &r->res;
	peak_start();
	t0 = now_seconds();
	ok = try_load(ctx, m->path, dev, &args, &model);
	double t = now_seconds() - t0;

	peak = peak_end();
	if (!ok)
		return false;
	record(f, t, peak);
	f->dev_bytes = r->res.device_bytes;
	if (peak > r->res.device_bytes && peak - r->res.device_bytes > f->over)
		f->over = peak - r->res.device_bytes;
	if (devcache_model_info(model, &r->info))
		ok = fault("devcache_model_info(%s) failed: %s", m->path, devcache_last_error());
	else if (r->res.hit || !r->info.partial || !r->res.device_bytes || !r->res.host_bytes ||
		 r->res.device_bytes > r->budget)
		ok = fault("the load of %s with partial_loading:true and max_cache_vram:%llu is not "
			   "a partial miss within the budget: hit %d, partial %d, device bytes %llu, "
			   "host bytes %llu", m->path, (unsigned long long)r->budget, r->res.hit,
			   r->info.partial, (unsigned long long)r->res.device_bytes,
			   (unsigned long long)r->res.host_bytes);
	else if (!staged_matches(model))
		ok = fault("the partially loaded copy of %s differs from the file", m->path);
	devcache_model_release(model);
	return ok;
}

/* The whole model onto benchdev:0 with a budget of half its size, in a
 * fresh context each run: into fresh device memory, then after evicting
 * it into the tensors' blocks the allocator kept cached. */
static void measure_partial(const struct model *m, struct partial_result *r)
{
	uint64_t avail = meminfo_bytes("MemAvailable:");
	double t0 = now_seconds();
	char opts[128];

	memset(r, 0, sizeof *r);
	r->budget = m->size / 2;
	snprintf(opts, sizeof opts, "partial_loading:true,max_cache_vram:%llu",
		 (unsigned long long)r->budget);
	printf("\n-- partial %s: %s onto benchdev:0 with %s (half the file, %.1f MiB)\n",
	       m->l->label, m->file, opts, mib(r->budget));
	if (!m->ready) {
		snprintf(r->why, sizeof r->why, "%s", m->why);
		printf("SKIP  %s\n", r->why);
		return;
	}
	if (avail < 2 * m->size + GIB) {
		snprintf(r->why, sizeof r->why,
			 "not enough memory to keep %s in the page cache beside a copy: "
			 "%.1f GiB available, %.1f GiB needed", m->file, gib(avail),
			 gib(2 * m->size + GIB));
		printf("SKIP  %s\n", r->why);
		return;
	}
	double in = warm(m);

	printf("page cache: %.1f%% of the file resident after one read (mincore)\n", in * 100);
	if (in < 0.99) {
		snprintf(r->why, sizeof r->why, "the page cache kept only %.1f%% of %s", in * 100,
			 m->file);
		printf("SKIP  %s\n", r->why);
		return;
	}
	for (int i = 0; i < reps; i++) {
		devcache_ctx_t *ctx = open_ctx(opts);
		devcache_device_t *dev = device(ctx, "benchdev:0");
		bool ok = partial_load(ctx, dev, m, r, &r->cold);

		if (ok && devcache_cache_evict_all(ctx) != 1)
			ok = fault("%s (partial) was not evicted", m->path);
		ok = ok && partial_load(ctx, dev, m, r, &r->warm);
		devcache_close(ctx);
		if (!ok) {
			snprintf(r->why, sizeof r->why, "%s", load_error);
			printf("FAILED  %s\n", r->why);
			return;
		}
	}
	r->measured = true;
	print_head("upload");
	print_row("partial load onto benchdev:0, fresh memory", &r->cold, r->res.device_bytes, NULL);
	print_row("partial load onto benchdev:0, memory cached", &r->warm, r->res.device_bytes, NULL);
	printf("placed: device bytes %.1f MiB (%zu of %zu tensors, each its own allocation), host "
	       "bytes %.1f MiB (the file's mapping); read %.1f MiB, uploaded %.1f MiB\n",
	       mib(r->res.device_bytes), r->info.device_tensors, r->info.tensors,
	       mib(r->res.host_bytes), mib(r->res.bytes_read), mib(r->res.bytes_uploaded));
	printf("partial loads: peak RSS less the device bytes (counted in RSS on benchdev): "
	       "%.1f MiB into fresh memory, %.1f MiB into cached memory\n", mib(r->cold.over),
	       mib(r->warm.over));
	printf("(these figures took %.0f s)\n", now_seconds() - t0);
}

static void partial_targets(const struct model *m, const struct partial_result *r, uint64_t ring)
{
	char id[64];

	snprintf(id, sizeof id, "load/partial-rss-%s", m->l->label);
	if (!r->measured) {
		print_target(id, "SKIP", "%s", r->why);
		return;
	}
	uint64_t over = r->cold.over > r->warm.over ? r->cold.over : r->warm.over;
	uint64_t limit = ring + 32 * MIB;

	print_target(id, over <= limit ? "PASS" : "MISS",
		     "peak RSS %.1f MiB - device bytes %.1f MiB = %.1f MiB (target <= ring %.0f MiB "
		     "+ 32 MiB = %.0f MiB, as for a whole model)",
		     mib(r->cold.peak > r->warm.peak ? r->cold.peak : r->warm.peak),
		     mib(r->cold.dev_bytes), mib(over), mib(ring), mib(limit));
}

/* ---- model switching ------------------------------------------------------------------ */

static bool is_mark(int i)
{
	return i == 1 || i == 2 || i == 5 || i == 10 || i == 25 || i == 50 || i == n_switches;
}

static void run_switching(const struct model *a, const struct model *b, const char *mmap_opt)
{
	char opts[128], id[64], line[512] = "";
	devcache_ctx_t *ctx;
	devcache_device_t *host;
	devcache_cache_stats_t cs;
	double *t = xcalloc((size_t)n_switches, sizeof *t);
	uint64_t first = 0, last = 0;
	size_t len = 0;

	snprintf(opts, sizeof opts, "max_cache_ram:%s,%s", SWITCH_BUDGET, mmap_opt);
	ctx = open_ctx(opts);
	host = device(ctx, "host");
	for (int i = 1; i <= n_switches; i++) {
		double t0 = now_seconds();
		devcache_model_t *model = load(ctx, (i % 2 ? a : b)->path, host);

		touch(model);
		devcache_model_release(model);
		t[i - 1] = now_seconds() - t0;
		last = status_bytes("VmRSS:");
		if (i == 1)
			first = last;
		if (is_mark(i) && len < sizeof line)
			len += (size_t)snprintf(line + len, sizeof line - len, " %d:%.1f", i, mib(last));
	}
	devcache_cache_stats(ctx, &cs);
	devcache_close(ctx);
	qsort(t, (size_t)n_switches, sizeof *t, bench_cmp_double);
	printf("%-11s RSS MiB after switch%s\n", mmap_opt, line);
	printf("%-11s %.1f ms per switch (load + touch, median), %llu misses, %llu hits, "
	       "%llu evictions, %.2f GiB read\n", "", t[n_switches / 2] * 1e3,
	       (unsigned long long)cs.misses, (unsigned long long)cs.hits,
	       (unsigned long long)cs.evictions, gib(cs.bytes_read));
	free(t);
	double change = first ? ((double)last - (double)first) / (double)first : 0;

	snprintf(id, sizeof id, "load/switch-rss [%s]", mmap_opt);
	print_target(id, change <= 0.05 && change >= -0.05 ? "PASS" : "MISS",
		     "RSS after %d switches %.1f MiB, after the first %.1f MiB: %+.1f%% (target "
		     "within 5%%)", n_switches, mib(last), mib(first), 100 * change);
}

static void switching(const struct model *a, const struct model *b)
{
	printf("\n-- Model switching: %s and %s (%.1f MiB each) alternated %d times on the host, "
	       "max_cache_ram:%s (fits one: each load evicts the other); each switch loads, "
	       "reads 1 byte per page and releases\n", a->l->file, b->l->file, mib(a->size),
	       n_switches, SWITCH_BUDGET);
	printf("mmap:false: the model is read into anonymous memory, which RSS counts; "
	       "mmap:true (the default): the file is mapped, and RSS counts the pages read\n");
	if (!a->ready || !b->ready) {
		const char *why = !a->ready ? a->why : b->why;

		print_target("load/switch-rss [mmap:false]", "SKIP", "%s", why);
		print_target("load/switch-rss [mmap:true]", "SKIP", "%s", why);
		return;
	}
	warm(a);
	warm(b);
	run_switching(a, b, "mmap:false");
	run_switching(a, b, "mmap:true");
}

/* ---- the staging sweep: a device's figures for staging_buffer_size -------------------- */

/* -S: the model is staged onto one device (a GPU, through -o's options)
 * with each staging_buffer_size, against cat of the same file (what the
 * page cache gives) and a plain copy from pinned host memory (what the
 * device's link takes: the physical limit).  -q: a small model, once. */
static const char *sweep_device;
static bool quick;
static const unsigned sweep_sizes_mib[] = { 1, 4, 16, 64 };
#define N_SWEEP (sizeof sweep_sizes_mib / sizeof sweep_sizes_mib[0])
static const struct layout sweep_quick = { "quick", "model-quick.safetensors",
					   "TinyLlama-like, scaled down", 256, 688, 64, 2, 4000,
					   21 };

static devcache_ctx_t *sweep_ctx(unsigned staging_mib)
{
	char opts[8400];
	devcache_ctx_t *ctx;
	int err;

	snprintf(opts, sizeof opts, "log_level:error%s%s,staging_buffer_size:%uM",
		 extra_options ? "," : "", extra_options ? extra_options : "", staging_mib);
	if ((err = bench_open(&ctx, opts)) != 0)
		bench_fail(opts, err);
	return ctx;
}

/* The first and last 4 KiB of every tensor, read back from the device
 * (its memory is not the host's), against the file. */
static bool device_matches(devcache_device_t *dev, const devcache_model_t *model, const char *path)
{
	size_t n = devcache_model_file_tensor_count(devcache_model_file(model));
	char expect[PAGE], got[PAGE];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool ok = fd >= 0;

	for (size_t i = 0; ok && i < n; i++) {
		devcache_tensor_info_t info;
		void *data;

		if (devcache_model_tensor_at(model, i, &info, &data)) {
			ok = false;
			break;
		}
		size_t len = info.size < PAGE ? (size_t)info.size : PAGE;
		uint64_t at[2] = { 0, info.size - len };

		for (int k = 0; ok && k < 2; k++)
			ok = pread(fd, expect, len, (off_t)(info.offset + at[k])) == (ssize_t)len &&
			     !devcache_copy_to_host(dev, got, (char *)data + at[k], len, NULL) &&
			     !memcmp(expect, got, len);
	}
	if (fd >= 0)
		close(fd);
	return ok;
}

/* One load of m onto the device, timed; false (load_error says why) if
 * it fails or the copy differs from the file. */
static bool sweep_load(devcache_ctx_t *ctx, devcache_device_t *dev, const struct model *m,
		       struct figure *f)
{
	devcache_model_t *model;
	double t0 = now_seconds();

	if (!try_load(ctx, m->path, dev, NULL, &model))
		return false;
	record(f, now_seconds() - t0, 0);
	bool ok = device_matches(dev, model, m->path);

	devcache_model_release(model);
	return ok || fault("the copy of %s on %s differs from the file", m->path, sweep_device);
}

/* A copy of size bytes from pinned host memory (the backend's) into one
 * device allocation, reps times; false if the device refuses either. */
static bool pinned_copy(uint64_t size, struct figure *f)
{
	devcache_ctx_t *ctx = sweep_ctx(16);
	devcache_device_t *dev = device(ctx, sweep_device);
	void *host = NULL, *d = NULL;
	bool ok;

	ok = !devcache_host_alloc(dev, (size_t)size, &host) &&
	     !devcache_alloc(dev, (size_t)size, NULL, &d);
	if (!ok) {
		snprintf(f->why, sizeof f->why, "%.250s", devcache_last_error());
		f->skipped = true;
	}
	if (ok)
		memset(host, 0x5a, (size_t)size);
	for (int i = 0; ok && i < reps; i++) {
		double t0 = now_seconds();

		ok = !devcache_copy_to_device(dev, d, host, (size_t)size, NULL);
		if (ok)
			record(f, now_seconds() - t0, 0);
		else
			ok = fault("pinned copy onto %s failed: %s", sweep_device,
				   devcache_last_error());
	}
	if (d)
		devcache_free(dev, d);
	if (host)
		devcache_host_free(dev, host);
	devcache_close(ctx);
	return ok || f->skipped;
}

static double gbps(uint64_t bytes, const struct figure *f)
{
	return (double)bytes / median(f) / 1e9;
}

static int sweep(struct model *mp)
{
	struct model m;
	struct figure cat = { 0 }, pinned = { 0 }, cold[N_SWEEP], warm_f[N_SWEEP];
	devcache_device_info_t info;
	size_t best = 0, rec = 0;

	memset(cold, 0, sizeof cold);
	memset(warm_f, 0, sizeof warm_f);
	printf("== Staging sweep: %s onto %s, staging_buffer_size %s\n",
	       quick ? "a small model" : "the 1G model", sweep_device, "1, 4, 16 and 64 MiB");
	prepare(&m, quick ? &sweep_quick : &sizes[0]);
	*mp = m; /* what the caller frees, whatever happens below */
	if (!m.ready) {
		printf("SKIP  %s\n", m.why);
		return 2;
	}
	{
		devcache_ctx_t *ctx = sweep_ctx(16);

		if (devcache_device_info(device(ctx, sweep_device), &info))
			bench_fail(sweep_device, DEVCACHE_EINVAL);
		devcache_close(ctx);
	}
	if (info.free_memory < 2 * m.size) {
		printf("SKIP  %s has %.1f MiB free, %.1f MiB needed\n", sweep_device,
		       mib(info.free_memory), mib(2 * m.size));
		return 2;
	}
	printf("page cache: %.1f%% of the file resident after one read (mincore)\n",
	       warm(&m) * 100);
	for (int i = 0; i < reps && !cat.skipped; i++)
		run_cat(&m, &cat);
	if (!pinned_copy(m.size, &pinned))
		return 2;
	for (size_t k = 0; k < N_SWEEP; k++) {
		for (int i = 0; i < reps; i++) {
			devcache_ctx_t *ctx = sweep_ctx(sweep_sizes_mib[k]);
			devcache_device_t *dev = device(ctx, sweep_device);
			bool ok = sweep_load(ctx, dev, &m, &cold[k]);

			if (ok && devcache_cache_evict_all(ctx) != 1)
				ok = fault("%s was not evicted", m.path);
			ok = ok && sweep_load(ctx, dev, &m, &warm_f[k]);
			devcache_close(ctx);
			if (!ok)
				return 2;
		}
		if (gbps(m.size, &warm_f[k]) > gbps(m.size, &warm_f[best]))
			best = k;
	}
	/* The smallest buffer within 5% of the best: the ring is pinned memory. */
	for (rec = 0; rec < best; rec++)
		if (gbps(m.size, &warm_f[rec]) >= 0.95 * gbps(m.size, &warm_f[best]))
			break;
	printf("\n== summary\n");
	printf("device: %s, %s (%s), %.1f GiB; model %s, %.1f MiB, %d run%s a figure (median)\n",
	       info.id, info.name, info.backend, gib(info.total_memory), m.file, mib(m.size), reps,
	       reps == 1 ? "" : "s");
	if (cat.skipped)
		printf("cat FILE > /dev/null: SKIP %s\n", cat.why);
	else
		printf("cat FILE > /dev/null: %.2f GB/s (the page cache's limit)\n", gbps(m.size, &cat));
	if (pinned.skipped)
		printf("pinned host-to-device copy: SKIP %s\n", pinned.why);
	else
		printf("pinned host-to-device copy: %.2f GB/s (the link's limit)\n",
		       gbps(m.size, &pinned));
	printf("| staging_buffer_size | staged GB/s (memory cached) | staged GB/s (fresh memory) | "
	       "of cat | of pinned copy |\n");
	printf("|---:|---:|---:|---:|---:|\n");
	for (size_t k = 0; k < N_SWEEP; k++) {
		double w = gbps(m.size, &warm_f[k]);

		printf("| %u MiB%s | %.2f | %.2f | ", sweep_sizes_mib[k], k == rec ? " (recommended)" : "",
		       w, gbps(m.size, &cold[k]));
		if (cat.skipped)
			printf("- | ");
		else
			printf("%.0f%% | ", 100 * w / gbps(m.size, &cat));
		if (pinned.skipped)
			printf("- |\n");
		else
			printf("%.0f%% |\n", 100 * w / gbps(m.size, &pinned));
	}
	printf("recommended staging_buffer_size: %uM (the smallest within 5%% of the best, %u MiB)\n",
	       sweep_sizes_mib[rec], sweep_sizes_mib[best]);
	return 0;
}

/* -S: the sweep, and its model's lists freed (a leak checker runs it in
 * make check's bundle and fakes runs). */
static int staging_sweep(void)
{
	struct model m = { 0 };
	int rc = sweep(&m);

	free(m.t);
	free(m.header);
	return rc;
}

/* ---- main --------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: loadbench [-d DIR] [-m MODULEDIR] [-o OPTIONS] [-r REPS] [-n SWITCHES]\n"
		   "                 [-s 1G|4G|sharded|partial]...\n"
		   "       loadbench -S DEVICE [-q] [-d DIR] [-o OPTIONS] [-r REPS]\n"
		   "  Generates Llama-like BF16 safetensors files in DIR (reused when present)\n"
		   "  and times loading them: cat, a naive read() loader, devcache's zero-copy\n"
		   "  host load and its staging path onto the bench device; the 4G model as 4\n"
		   "  shards and an index against the single file; the 4G model loaded\n"
		   "  partially onto the bench device; then alternates two models under a RAM\n"
		   "  budget that fits one.\n"
		   "  -d DIR        where the model files are (default .)\n"
		   "  -m MODULEDIR  where benchdev.so is (default DIR/modules/.libs)\n"
		   "  -o OPTIONS    tunables (\"key:value,...\") for every context, to compare\n"
		   "                (the targets assume the defaults)\n"
		   "  -r REPS       runs per figure, the median time reported (default 3)\n"
		   "  -n SWITCHES   model switches (default 50; 0: no switching figures)\n"
		   "  -s GROUP      only these figures (repeatable; default all): a file size\n"
		   "                (1G, 4G), sharded (4G as a set) or partial (4G, half fits)\n"
		   "  -S DEVICE     instead: the 1G model staged onto DEVICE (reached through\n"
		   "                -o's options) with staging_buffer_size 1, 4, 16 and 64 MiB,\n"
		   "                against cat and a pinned host-to-device copy\n"
		   "  -q            with -S: a small model, one run a figure (a quick check)\n");
}

static void parse_args(int argc, char **argv)
{
	static char mdir[4200];
	bool sized = false, reps_set = false;
	int opt;

	while ((opt = getopt(argc, argv, "d:m:o:r:n:s:S:qh")) != -1) {
		switch (opt) {
		case 'o': extra_options = *optarg ? optarg : NULL; break;
		case 'd': dir = optarg; break;
		case 'm': module_dir = optarg; break;
		case 'r': reps = atoi(optarg); reps_set = true; break;
		case 'n': n_switches = atoi(optarg); break;
		case 'S': sweep_device = optarg; break;
		case 'q': quick = true; break;
		case 's': {
			bool known = false;

			if (!sized) {
				memset(want, 0, sizeof want);
				want_sharded = want_partial = false;
			}
			sized = true;
			for (size_t i = 0; i < N_SIZES; i++)
				if (strcmp(optarg, sizes[i].label) == 0)
					want[i] = known = true;
			if (strcmp(optarg, "sharded") == 0)
				want_sharded = known = true;
			if (strcmp(optarg, "partial") == 0)
				want_partial = known = true;
			if (!known) {
				fprintf(stderr, "loadbench: -s %s: not a group of figures\n", optarg);
				usage(stderr);
				exit(2);
			}
			break;
		}
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (quick && !reps_set)
		reps = 1;
	if (optind != argc || reps < 1 || reps > MAX_REPS || n_switches < 0 ||
	    (quick && !sweep_device)) {
		usage(stderr);
		exit(2);
	}
	if (!module_dir) {
		snprintf(mdir, sizeof mdir, "%s/modules/.libs", dir);
		module_dir = mdir;
	}
}

int main(int argc, char **argv)
{
	struct model files[N_SIZES], sw[2];
	struct size_result res[N_SIZES];
	static struct set set;
	static struct sharded_result sharded;
	static struct partial_result partial;
	bool need_set_size = want_sharded || want_partial;
	uint64_t ring;

	parse_args(argc, argv);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (sweep_device)
		return staging_sweep();
	use_hwm = hwm_reset();
	printf("== Model loading: generated safetensors files, warm page cache\n");
	printf("GB/s: file bytes / time (10^9 bytes per second); peak RSS: %s\n",
	       use_hwm ? "VmHWM, reset through /proc/self/clear_refs before each figure"
		       : "VmRSS sampled every 1 ms (clear_refs refused)");
	if (extra_options)
		printf("tunables:   %s (-o; the targets assume the defaults)\n", extra_options);
	printf("benchdev:0: the bench device, bench/modules/benchdev.c: device memory is "
	       "mmap()ed host memory, copies are memcpy\n");
	ring = ring_bytes();
	printf("\n");
	for (size_t i = 0; i < N_SIZES; i++)
		if (want[i] || (i == SET_SIZE && need_set_size))
			prepare(&files[i], &sizes[i]);
	if (want_sharded && files[SET_SIZE].ready)
		prepare_set(&set, &files[SET_SIZE]);
	else if (want_sharded)
		snprintf(set.why, sizeof set.why, "%s", files[SET_SIZE].why);
	for (size_t i = 0; i < 2 && n_switches; i++)
		prepare(&sw[i], &switch_models[i]);
	for (size_t i = 0; i < N_SIZES; i++)
		if (want[i])
			measure_size(&files[i], &res[i]);
	if (want_sharded)
		measure_sharded(&files[SET_SIZE], &set, &sharded);
	if (want_partial)
		measure_partial(&files[SET_SIZE], &partial);

	printf("\n");
	bool zc_ok = want[1] && res[1].measured;
	if (zc_ok) {
		double t4 = median(&res[1].zc);

		print_target("load/zero-copy-4G", t4 < 0.010 ? "PASS" : "MISS",
			     "zero-copy host load of 4 GiB %.3f ms (target < 10 ms)", t4 * 1e3);
	} else {
		print_target("load/zero-copy-4G", "SKIP", "%s",
			     want[1] ? res[1].why : "the 4G file was not asked for (-s)");
	}
	if (zc_ok && want[0] && res[0].measured)
		printf("(info) zero-copy load: 1G %.3f ms, 4G %.3f ms: %.2fx for 4x the bytes\n",
		       median(&res[0].zc) * 1e3, median(&res[1].zc) * 1e3,
		       median(&res[1].zc) / median(&res[0].zc));
	for (size_t i = 0; i < N_SIZES; i++)
		if (want[i])
			size_targets(&files[i], &res[i], ring);
	if (want_sharded)
		sharded_targets(&files[SET_SIZE], &sharded);
	if (want_partial)
		partial_targets(&files[SET_SIZE], &partial, ring);
	if (n_switches) {
		switching(&sw[0], &sw[1]);
	} else {
		print_target("load/switch-rss [mmap:false]", "SKIP", "not asked for (-n 0)");
		print_target("load/switch-rss [mmap:true]", "SKIP", "not asked for (-n 0)");
	}
	return load_failed ? 2 : missed ? 1 : 0;
}

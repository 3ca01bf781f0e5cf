/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* loadbench-models.c - bench/loadbench's model files: Llama-like BF16 safetensors, one file or a sharded set, written once and reused; how much of each the page cache holds. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "loadbench.h"
#include "model-writer-core.h"

#define IO_BUF (64 * MIB)     /* warm-up reads */
#define GENERATOR "libdevcache bench/loadbench 1"

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

void prepare(struct model *m, const struct layout *l)
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
void prepare_set(struct set *s, const struct model *whole)
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
double resident(const struct model *m)
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
double warm(const struct model *m)
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

/* Whether m can be measured from the page cache: it was written, memory
 * holds its pages and one copy beside them, and its pages stayed resident
 * after one read (warm()).  If not, why says so and "SKIP  why" is printed. */
bool warm_beside_copy(const struct model *m, char *why, size_t why_size)
{
	uint64_t avail = meminfo_bytes("MemAvailable:");
	double in;

	if (!m->ready) {
		snprintf(why, why_size, "%s", m->why);
	} else if (avail < 2 * m->size + GIB) {
		snprintf(why, why_size,
			 "not enough memory to keep %s in the page cache beside a copy: "
			 "%.1f GiB available, %.1f GiB needed", m->file, gib(avail),
			 gib(2 * m->size + GIB));
	} else {
		in = warm(m);
		printf("page cache: %.1f%% of the file resident after one read (mincore)\n",
		       in * 100);
		if (in >= 0.99)
			return true;
		snprintf(why, why_size, "the page cache kept only %.1f%% of %s", in * 100, m->file);
	}
	printf("SKIP  %s\n", why);
	return false;
}

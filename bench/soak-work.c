/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* soak-work.c - bench/soak's threads: loaders that verify what they load, and allocators that check their blocks' bytes. */
#include "soak.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The largest tensor of the models (huge.gguf's are under 2.5 MiB). */
#define SOAK_MAX_TENSOR ((size_t)4 << 20)

static uint64_t pick(struct soak_worker *w, uint64_t n)
{
	return rng_next(&w->rng) % n;
}

/* ---- loaders ----------------------------------------------------------------------- */

/* One tensor's bytes, chosen at random, against the file's: through
 * devcache_model_tensor_copy, or (a model whose tensors cannot move)
 * through its pointer, copied from the device or read in place. */
static void verify(struct soak_worker *w, int c, devcache_model_t *m, const struct soak_model *sm,
		   bool partial, devcache_stream_t stream, unsigned char *buf)
{
	struct soak *s = w->s;
	size_t i = pick(w, sm->n), bad;
	const struct soak_tensor *t = &sm->t[i];

	if (partial || pick(w, 2)) {
		if (!soak_ok(s, devcache_model_tensor_copy(m, t->name, buf, t->size), NULL,
			     "devcache_model_tensor_copy", t->name))
			return;
	} else {
		devcache_tensor_info_t info;
		void *data;

		if (!soak_ok(s, devcache_model_tensor_at(m, i, &info, &data), NULL,
			     "devcache_model_tensor_at", t->name))
			return;
		if (strcmp(info.name, t->name) != 0 || info.size != t->size) {
			soak_fail(s, "%s: tensor %zu is %s, %llu bytes; expected %s, %zu bytes",
				  sm->label, i, info.name, (unsigned long long)info.size, t->name,
				  t->size);
			return;
		}
		if (info.place == DEVCACHE_PLACE_DEVICE && !s->host_memory) {
			if (!soak_ok(s, devcache_copy_to_host(s->dev[c], buf, data, t->size, stream),
				     NULL, "devcache_copy_to_host", t->name))
				return;
		} else {
			memcpy(buf, data, t->size);
		}
	}
	if ((bad = soak_check(t, buf, 0, t->size)) != (size_t)-1) {
		soak_fail(s, "%s in context %d: tensor %s byte %zu of %zu is %u, not %u (%s)",
			  sm->label, c, t->name, bad, t->size, buf[bad], soak_byte(t->hash, bad),
			  partial ? "a partial model" : "a whole model");
		return;
	}
	w->n.verified++;
	w->n.verified_bytes += t->size;
}

/* Move some of a partial model's tensors: onto the device (named ones, or
 * all of them, which often does not fit), or back to the host. */
static void move_tensors(struct soak_worker *w, devcache_model_t *m, const struct soak_model *sm,
			 devcache_stream_t stream)
{
	const char *names[3];
	size_t n = 1 + pick(w, 3);
	uint64_t op = pick(w, 8);

	for (size_t j = 0; j < n; j++)
		names[j] = sm->t[pick(w, sm->n)].name;
	if (op < 5) {
		w->n.resident++;
		soak_ok(w->s, devcache_model_make_resident(m, op ? names : NULL, op ? n : 0, stream),
			&w->n.resident_enomem, "devcache_model_make_resident", sm->label);
	} else {
		w->n.to_host++;
		soak_ok(w->s, devcache_model_move_to_host(m, op < 7 ? names : NULL, op < 7 ? n : 0),
			NULL, "devcache_model_move_to_host", sm->label);
	}
}

/* What the model says of itself agrees with the file. */
static bool check_info(struct soak *s, int c, devcache_model_t *m, const struct soak_model *sm,
		       devcache_model_info_t *info)
{
	if (!soak_ok(s, devcache_model_info(m, info), NULL, "devcache_model_info", sm->label))
		return false;
	if (info->tensors != sm->n || info->device_bytes + info->host_bytes != sm->bytes ||
	    info->locks < 1 || info->device != s->dev[c] || info->device_tensors > sm->n) {
		soak_fail(s,
			  "%s in context %d: devcache_model_info says %zu tensors (%zu on the "
			  "device), %llu + %llu bytes, %d locks; the file has %zu tensors, %llu bytes",
			  sm->label, c, info->tensors, info->device_tensors,
			  (unsigned long long)info->device_bytes, (unsigned long long)info->host_bytes,
			  info->locks, sm->n, (unsigned long long)sm->bytes);
		return false;
	}
	return true;
}

/* A load cancelled once this many bytes are done. */
static int cancel_at(void *user, uint64_t done, uint64_t total)
{
	(void)total;
	return done >= *(const uint64_t *)user;
}

static void load_once(struct soak_worker *w, devcache_stream_t *streams, unsigned char *buf)
{
	struct soak *s = w->s;
	int c = (int)pick(w, SOAK_CONTEXTS);
	const struct soak_model *sm = &s->ms->m[pick(w, s->ms->n)];
	devcache_load_result_t res;
	devcache_load_args_t args = {.struct_size = sizeof args, .result = &res,
				     .stream = pick(w, 2) ? streams[c] : NULL};
	devcache_model_info_t info;
	devcache_model_t *m;

	uint64_t cancel = pick(w, 16) ? 0 : 1 + pick(w, sm->bytes);
	int rc;

	/* Writable (a private mapping) is a different entry of the same file. */
	if (s->host_memory && pick(w, 4) == 0)
		args.flags = DEVCACHE_LOAD_WRITABLE;
	/* Some loads are cancelled part way (a hit on the device reports no
	 * progress, and is not). */
	if (cancel) {
		args.progress = cancel_at;
		args.progress_user = &cancel;
	}
	rc = devcache_model_load(s->ctx[c], sm->path, s->dev[c], &args, &m);
	if (rc == DEVCACHE_ECANCELED && cancel) {
		w->n.cancelled[c]++;
		return;
	}
	if (!soak_ok(s, rc, &w->n.load_enomem[c], "devcache_model_load", sm->label))
		return;
	w->n.loads[c]++;
	w->n.hits[c] += res.hit != 0;
	w->n.from_ram += res.from_ram != 0;
	if (check_info(s, c, m, sm, &info)) {
		w->n.partial += info.partial != 0;
		verify(w, c, m, sm, info.partial, args.stream, buf);
		if (info.partial && pick(w, 2))
			move_tensors(w, m, sm, args.stream);
		usleep((useconds_t)pick(w, 2000));
		if (!soak_stopping(s))
			verify(w, c, m, sm, info.partial, args.stream, buf);
	}
	devcache_model_release(m);
	if (pick(w, 64) == 0) {
		w->n.evict_all++;
		w->n.evicted += devcache_cache_evict_all(s->ctx[c]);
	}
	if (pick(w, 32) == 0) {
		w->n.stat_reads++;
		soak_check_running(s, c);
	}
}

static void make_streams(struct soak *s, devcache_stream_t *streams, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!soak_ok(s, devcache_stream_create(s->dev[i % SOAK_CONTEXTS], &streams[i]), NULL,
			     "devcache_stream_create", s->device))
			streams[i] = NULL;
}

static void drop_streams(struct soak *s, devcache_stream_t *streams, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		devcache_device_t *dev = s->dev[i % SOAK_CONTEXTS];

		if (!streams[i])
			continue;
		soak_ok(s, devcache_stream_synchronize(dev, streams[i]), NULL,
			"devcache_stream_synchronize", s->device);
		soak_ok(s, devcache_stream_destroy(dev, streams[i]), NULL, "devcache_stream_destroy",
			s->device);
	}
}

void *soak_loader(void *arg)
{
	struct soak_worker *w = arg;
	devcache_stream_t streams[SOAK_CONTEXTS] = {0};
	unsigned char *buf = malloc(SOAK_MAX_TENSOR);

	if (!buf)
		soak_fail(w->s, "out of memory");
	make_streams(w->s, streams, SOAK_CONTEXTS);
	while (!soak_stopping(w->s))
		load_once(w, streams, buf);
	drop_streams(w->s, streams, SOAK_CONTEXTS);
	free(buf);
	return NULL;
}

/* ---- allocators -------------------------------------------------------------------- */

#define SOAK_BLOCKS 12
#define SOAK_STREAMS 2 /* of each context, for each thread */
#define PATTERN ((size_t)4096) /* bytes checked at each end of a block */

struct block {
	void *p;
	size_t size;
	int c;
	int stream; /* the index of the stream it was allocated on; -1: the default */
	uint32_t tag;
	bool pinned;
};

struct allocator {
	struct soak_worker *w;
	devcache_stream_t streams[SOAK_CONTEXTS * SOAK_STREAMS];
	struct block b[SOAK_BLOCKS];
	int n;
	unsigned char buf[PATTERN];
};

static devcache_stream_t stream_of(const struct allocator *a, int c, int i)
{
	return i < 0 ? NULL : a->streams[i * SOAK_CONTEXTS + c];
}

/* The pattern at the two ends of a block: byte j of the block is
 * soak_byte(tag, j), so that the ends agree where they overlap.  Memory the
 * host cannot address is written and read through copies. */
static bool pattern(struct allocator *a, const struct block *b, bool write)
{
	struct soak *s = a->w->s;
	size_t k = b->size < PATTERN ? b->size : PATTERN, at[2] = {0, b->size - k};
	bool direct = b->pinned || s->host_memory;

	for (int e = 0; e < 2; e++) {
		unsigned char *p = direct ? (unsigned char *)b->p + at[e] : a->buf;
		devcache_device_t *dev = s->dev[b->c];
		devcache_stream_t st = stream_of(a, b->c, b->stream);
		struct soak_tensor t = {.hash = b->tag};
		size_t bad;

		if (write) {
			for (size_t j = 0; j < k; j++)
				p[j] = soak_byte(b->tag, at[e] + j);
			if (!direct && !soak_ok(s, devcache_copy_to_device(dev, (char *)b->p + at[e], p, k,
									 st),
						 NULL, "devcache_copy_to_device", "a block's pattern"))
				return false;
			continue;
		}
		if (!direct && !soak_ok(s, devcache_copy_to_host(dev, p, (char *)b->p + at[e], k, st),
					NULL, "devcache_copy_to_host", "a block's pattern"))
			return false;
		if ((bad = soak_check(&t, p, at[e], k)) != (size_t)-1) {
			soak_fail(s,
				  "a %s block of %zu bytes at %p in context %d: byte %zu is %u, not %u: "
				  "something else wrote it",
				  b->pinned ? "pinned" : "device", b->size, b->p, b->c, bad, p[bad - at[e]],
				  soak_byte(b->tag, bad));
			return false;
		}
	}
	return true;
}

static void alloc_one(struct allocator *a, bool pinned)
{
	struct soak_worker *w = a->w;
	struct soak *s = w->s;
	struct block b = {.c = (int)pick(w, SOAK_CONTEXTS), .pinned = pinned,
			  .tag = (uint32_t)rng_next(&w->rng)};
	int rc;

	b.size = (size_t)rng_log_uniform(&w->rng, 256, pinned ? 256 << 10 : 12 << 20);
	b.stream = pick(w, 3) ? (int)pick(w, SOAK_STREAMS) : -1;
	if (pinned) {
		rc = devcache_host_alloc(s->dev[b.c], b.size, &b.p);
		if (!soak_ok(s, rc, &w->n.pinned_enomem, "devcache_host_alloc", "pinned memory"))
			return;
		w->n.pinned++;
	} else {
		rc = devcache_alloc(s->dev[b.c], b.size, stream_of(a, b.c, b.stream), &b.p);
		if (!soak_ok(s, rc, &w->n.alloc_enomem, "devcache_alloc", "device memory"))
			return;
		w->n.allocs++;
	}
	a->b[a->n++] = b;
	pattern(a, &b, true);
}

/* Free block i, checking its pattern; a device block is sometimes first
 * recorded on another of the thread's streams. */
static void free_one(struct allocator *a, int i)
{
	struct soak_worker *w = a->w;
	struct soak *s = w->s;
	struct block b = a->b[i];

	a->b[i] = a->b[--a->n];
	pattern(a, &b, false);
	if (b.pinned) {
		soak_ok(s, devcache_host_free(s->dev[b.c], b.p), NULL, "devcache_host_free", "pinned");
		return;
	}
	if (pick(w, 4) == 0) {
		int other = b.stream < 0 ? 0 : (b.stream + 1) % SOAK_STREAMS;

		w->n.records++;
		soak_ok(s, devcache_record_stream(s->dev[b.c], b.p, stream_of(a, b.c, other)), NULL,
			"devcache_record_stream", "device memory");
	}
	w->n.frees++;
	soak_ok(s, devcache_free(s->dev[b.c], b.p), NULL, "devcache_free", "device memory");
}

static void alloc_once(struct allocator *a)
{
	struct soak_worker *w = a->w;
	struct soak *s = w->s;
	uint64_t op = pick(w, 100);
	int c = (int)pick(w, SOAK_CONTEXTS);

	if (a->n == SOAK_BLOCKS || (a->n && op < 45)) {
		free_one(a, (int)pick(w, (uint64_t)a->n));
	} else if (op < 47) {
		w->n.empties++;
		soak_ok(s, op == 45 ? devcache_empty_cache(s->dev[c]) : devcache_host_empty_cache(s->dev[c]),
			NULL, "devcache_empty_cache", s->device);
	} else if (op < 49) {
		w->n.stat_reads++;
		soak_check_running(s, c);
	} else if (op < 50) {
		int i = (int)pick(w, SOAK_STREAMS);

		w->n.syncs++;
		soak_ok(s, devcache_stream_synchronize(s->dev[c], stream_of(a, c, i)), NULL,
			"devcache_stream_synchronize", s->device);
	} else {
		alloc_one(a, op < 55);
	}
}

void *soak_allocator(void *arg)
{
	struct allocator *a = calloc(1, sizeof *a);
	struct soak_worker *w = arg;

	if (!a) {
		soak_fail(w->s, "out of memory");
		return NULL;
	}
	a->w = w;
	make_streams(w->s, a->streams, SOAK_CONTEXTS * SOAK_STREAMS);
	while (!soak_stopping(w->s))
		alloc_once(a);
	while (a->n)
		free_one(a, a->n - 1);
	drop_streams(w->s, a->streams, SOAK_CONTEXTS * SOAK_STREAMS);
	free(a);
	return NULL;
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-registry.h - the fake vendor runtimes' shared bookkeeping of live objects: ranges, handles, held events, leaks. */
#ifndef FAKE_REGISTRY_H
#define FAKE_REGISTRY_H

/* twalk_r and secure_getenv want the _GNU_SOURCE each fake defines before any include. */
#include <errno.h>
#include <pthread.h>
#include <search.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

/* Everything here is static, as in fake-controls.h: a fake exports only the
 * vendor's API and its own fake_<vendor>_* controls. The helpers are inline
 * so that a fake using only some of them compiles without warnings. */

/* The most range kinds a fake has (device allocation, host allocation, ...). */
#define FAKE_REGISTRY_KINDS 8

/* What the registry keeps of every live address range. Each fake's own range
 * begins with one, so that the trees, which hold the fake's ranges, can be
 * searched and counted here. */
struct fake_range {
	uintptr_t base;
	size_t size;
	unsigned kind; /* the fake's range kind, an index into kind_names */
	unsigned ipc_opens;
	unsigned long serial; /* tells a reused address from the one an IPC handle named */
	size_t *used; /* device memory: what counts its device's capacity in use; else NULL */
};

/* The counts behind a fake's leak report and live count; all but the names
 * are under the fake's lock, as its trees are. */
struct fake_registry {
	const char *fake;              /* "fake-cuda": what every report line begins with */
	const char *leaks_env;         /* "FAKE_CUDA_LEAKS": a file the report is appended to too */
	const char *const *kind_names; /* "device allocation", by range kind */
	int n_kinds;
	unsigned long next_serial;
	unsigned long live_count[FAKE_REGISTRY_KINDS];
	size_t live_bytes[FAKE_REGISTRY_KINDS];
	unsigned long open_ipc; /* IPC handles opened and not closed, over all ranges */
};

/* A fake's struct fake_registry: the fake is "fake-" vendor, its leak
 * report also goes to the file FAKE_<VENDOR>_LEAKS names, and names is the
 * array of its range kinds' names. */
#define FAKE_REGISTRY_INIT(vendor, VENDOR, names)                                                  \
	{                                                                                          \
		.fake = "fake-" #vendor, .leaks_env = "FAKE_" #VENDOR "_LEAKS",                    \
		.kind_names = (names), .n_kinds = (int)(sizeof(names) / sizeof *(names))           \
	}

/* ---- address ranges ---- */

/* Orders non-overlapping ranges; a one-byte key finds the range that holds it. */
static inline int fake_range_cmp(const void *a, const void *b)
{
	const struct fake_range *x = a, *y = b;

	if (x->base + x->size <= y->base)
		return -1;
	if (y->base + y->size <= x->base)
		return 1;
	return 0; /* overlapping: for a one-byte key, the range that holds it */
}

/* A live range of tree overlapping [p, p + size), under lock; NULL if none.
 * It is the fake's own range, hence void. */
static inline void *fake_range_in(void *const *tree, uintptr_t p, size_t size)
{
	struct fake_range key = {.base = p, .size = size ? size : 1};
	void *node = tfind(&key, tree, fake_range_cmp);

	return node ? *(void **)node : NULL;
}

/* Enters r, the first member of a fake's range, in tree, under lock; returns
 * that fake's range, or the one it overlaps instead, or NULL when out of memory. */
static inline void *fake_range_add(struct fake_registry *reg, void **tree, struct fake_range *r)
{
	void *node = tsearch(r, tree, fake_range_cmp);

	if (!node)
		return NULL;
	if (*(struct fake_range **)node != r)
		return *(void **)node;
	r->serial = ++reg->next_serial;
	reg->live_count[r->kind]++;
	reg->live_bytes[r->kind] += r->size;
	return r;
}

/* Takes r out of tree, under lock; IPC handles still open on it close with
 * it, and device memory goes back to its device. */
static inline void fake_range_remove(struct fake_registry *reg, void **tree, struct fake_range *r)
{
	tdelete(r, tree, fake_range_cmp);
	if (r->used)
		*r->used -= r->size;
	reg->live_count[r->kind]--;
	reg->live_bytes[r->kind] -= r->size;
	reg->open_ipc -= r->ipc_opens;
}

/* ---- IPC ---- */

/* An IPC handle opened on r, or closed, under lock. */
static inline void fake_range_ipc_open(struct fake_registry *reg, struct fake_range *r)
{
	r->ipc_opens++;
	reg->open_ipc++;
}

static inline void fake_range_ipc_close(struct fake_registry *reg, struct fake_range *r)
{
	r->ipc_opens--;
	reg->open_ipc--;
}

/* What a CUDA-like IPC handle carries: the range's base and serial, so that
 * the handle of a freed range is refused even where its address is reused,
 * and the offset of the pointer exported. It must fit the vendor's handle. */
struct fake_ipc_handle {
	char magic[8]; /* the fake's own, to refuse what it did not make */
	pid_t pid;     /* the memory is this process's heap: only it can open the handle */
	int dev;
	uintptr_t base;
	size_t offset;
	unsigned long serial;
};

/* The handle of pointer p, inside range r of device dev, under lock. */
static inline void fake_ipc_export(struct fake_ipc_handle *h, const char magic[8],
				   const struct fake_range *r, int dev, uintptr_t p)
{
	memset(h, 0, sizeof *h);
	memcpy(h->magic, magic, sizeof h->magic);
	h->pid = getpid();
	h->dev = dev;
	h->base = r->base;
	h->offset = p - r->base;
	h->serial = r->serial;
}

/* The range of kind at base in tree, if it is still the one with serial that
 * a handle named, with the opening counted; under lock. NULL if none. */
static inline void *fake_ipc_open(struct fake_registry *reg, void *const *tree, uintptr_t base,
				  unsigned long serial, unsigned kind)
{
	struct fake_range *r = fake_range_in(tree, base, 1);

	if (!r || r->kind != kind || r->base != base || r->serial != serial)
		return NULL;
	fake_range_ipc_open(reg, r);
	return r;
}

/* ---- handles ---- */

/* Handles are the objects' own addresses. */
static inline int fake_handle_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;

	return x < y ? -1 : x > y;
}

/* Whether h is in tree, under lock; NULL never is. */
static inline int fake_handle_known(void *const *tree, const void *h)
{
	return h && tfind(h, tree, fake_handle_cmp);
}

/* Enters handle h in tree, counting it in *live, under lock; 0 when out of memory. */
static inline int fake_handle_add(void **tree, void *h, unsigned long *live)
{
	if (!tsearch(h, tree, fake_handle_cmp))
		return 0;
	++*live;
	return 1;
}

/* Enters handle h, just made, in tree, taking lock; h is freed when out of
 * memory. Returns h, or NULL. */
static inline void *fake_handle_register(pthread_mutex_t *lock, void **tree, void *h,
					 unsigned long *live)
{
	int ok;

	pthread_mutex_lock(lock);
	ok = fake_handle_add(tree, h, live);
	pthread_mutex_unlock(lock);
	if (ok)
		return h;
	free(h);
	return NULL;
}

/* Takes handle h out of tree, uncounting it, under lock; 0 if it was not there. */
static inline int fake_handle_remove(void **tree, const void *h, unsigned long *live)
{
	if (!h || !tdelete(h, tree, fake_handle_cmp))
		return 0;
	--*live;
	return 1;
}

/* ---- held events ---- */

/* What holding events needs of an event; each fake's event begins with one.
 * Work completes at once in the fakes; a test holds events to see how the
 * backend copes with work that is still running. */
struct fake_event {
	int dev;
	int pending;  /* recorded while events were held, and not waited for since */
	void *stream; /* where last recorded; NULL for the default streams */
};

/* Which pending events a walk picks; it ends their pending state unless
 * count_only. */
struct fake_release_filter {
	int dev;      /* -1: any */
	void *stream; /* used when by_stream */
	int by_stream;
	int count_only; /* count pending ones, release none */
	unsigned long count;
};

static inline void fake_release_visit(const void *node, VISIT which, void *closure)
{
	struct fake_event *e = *(struct fake_event *const *)node;
	struct fake_release_filter *f = closure;

	if ((which != postorder && which != leaf) || !e->pending)
		return;
	if ((f->dev >= 0 && e->dev != f->dev) || (f->by_stream && e->stream != f->stream))
		return;
	f->count++;
	if (!f->count_only)
		e->pending = 0;
}

/* Walks the events of tree that f picks, taking lock; returns how many it picked. */
static inline unsigned long fake_events_release(pthread_mutex_t *lock, void *const *tree,
						struct fake_release_filter *f)
{
	pthread_mutex_lock(lock);
	twalk_r(*tree, fake_release_visit, f);
	pthread_mutex_unlock(lock);
	return f->count;
}

/* Held events recorded on f's stream (of f's device, unless -1): what its work
 * still waits for. Synchronizing (release) lets them complete; a query only
 * looks. Returns whether the stream is still busy, for a query while events
 * are held. */
static inline int fake_events_stream_busy(pthread_mutex_t *lock, void *const *tree,
					  struct fake_release_filter *f, int release,
					  const int *hold)
{
	f->by_stream = 1;
	f->count_only = !release;
	fake_events_release(lock, tree, f);
	return !release && f->count && __atomic_load_n(hold, __ATOMIC_RELAXED);
}

static inline void fake_forget_stream_visit(const void *node, VISIT which, void *closure)
{
	struct fake_event *e = *(struct fake_event *const *)node;

	if ((which == postorder || which == leaf) && e->stream == closure)
		e->stream = NULL;
}

/* A stream is going, under lock: an event's stream is only compared, but a new
 * stream may reuse the address. */
static inline void fake_events_forget_stream(void *const *tree, void *stream)
{
	twalk_r(*tree, fake_forget_stream_visit, stream);
}

/* ---- leaks ---- */

/* A line of the leak report for the objects that are not ranges. */
struct fake_leak {
	const char *what; /* "stream": the line says "stream(s)" */
	unsigned long count;
	int has_bytes;
	size_t bytes;
	const char *still; /* "live", or "retained" where the caller holds references */
};

static inline void fake_registry_report(const struct fake_registry *reg,
					const struct fake_leak *others, size_t n_others, FILE *out)
{
	for (int k = 0; k < reg->n_kinds; k++)
		if (reg->live_count[k])
			fprintf(out, "%s: %lu %s(s), %zu bytes, still live at unload\n", reg->fake,
				reg->live_count[k], reg->kind_names[k], reg->live_bytes[k]);
	for (size_t i = 0; i < n_others; i++) {
		if (!others[i].count)
			continue;
		if (others[i].has_bytes)
			fprintf(out, "%s: %lu %s(s), %zu bytes, still live at unload\n", reg->fake,
				others[i].count, others[i].what, others[i].bytes);
		else
			fprintf(out, "%s: %lu %s(s) still %s at unload\n", reg->fake,
				others[i].count, others[i].what, others[i].still);
	}
	if (reg->open_ipc)
		fprintf(out, "%s: %lu IPC mapping(s) still open at unload\n", reg->fake,
			reg->open_ipc);
}

/* The fake's destructor, under its lock: says what is still live, on stderr
 * and appended to the file the leaks variable names, so that a test run
 * under the fake can fail on it. What is live is left as it is: the program
 * may yet use it. */
static inline void fake_registry_unload(const struct fake_registry *reg,
					const struct fake_leak *others, size_t n_others)
{
	const char *path = secure_getenv(reg->leaks_env);
	int leaks = reg->open_ipc != 0;
	FILE *f;

	for (int k = 0; k < reg->n_kinds; k++)
		leaks |= reg->live_count[k] != 0;
	for (size_t i = 0; i < n_others; i++)
		leaks |= others[i].count != 0;
	if (!leaks)
		return;
	fake_registry_report(reg, others, n_others, stderr);
	if (!path || !*path)
		return;
	if ((f = fopen(path, "a"))) {
		fake_registry_report(reg, others, n_others, f);
		fclose(f);
	} else {
		fprintf(stderr, "%s: %s: %s: %s\n", reg->fake, reg->leaks_env, path,
			strerror(errno));
	}
}

/* Pages of [len rounded to page], mapped with prot, at an alignment of at
 * least a page; the length to munmap() goes to *mapped_p.  NULL if none. */
static inline void *fake_map_aligned(size_t len, size_t align, int prot, size_t *mapped_p)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), total, head;
	uintptr_t p;
	void *m;

	len = (len + page - 1) & ~(page - 1);
	if (align < page)
		align = page;
	if (len > SIZE_MAX - align)
		return NULL;
	total = len + align - page;
	m = mmap(NULL, total, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	p = ((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1);
	head = p - (uintptr_t)m;
	if (head)
		munmap(m, head);
	if (total - head > len)
		munmap((void *)(p + len), total - head - len);
	*mapped_p = len;
	return (void *)p;
}

#endif

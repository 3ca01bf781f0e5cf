/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* host.c - the built-in host backend: "device" memory is host memory, so everything works without a GPU. */
#include "internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bytes.h"

struct host_state {
	const struct devcache_backend_host *host;
	long page;
	uint64_t total;
	/* host_memory: the emulated device's size, enforced as a driver
	 * does, with what its allocations hold; 0 where it is auto. */
	uint64_t limit;
	_Atomic uint64_t used;
	char name[256];
};

/* Streams and events are plain tokens: host copies finish before they
 * return, so every stream is idle and every event complete. */
struct host_token {
	int magic;
};

static void read_cpu_name(char *buf, size_t size)
{
	FILE *f = fopen("/proc/cpuinfo", "re");
	char line[512];

	snprintf(buf, size, "Host memory");
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) == 0 && colon) {
			colon += 1 + strspn(colon + 1, " \t");
			colon[strcspn(colon, "\n")] = '\0';
			snprintf(buf, size, "Host memory (%.200s)", colon);
			break;
		}
	}
	fclose(f);
}

static int host_init(const struct devcache_backend_host *host, void **state_p, int *n_devices_p,
		     char *why, size_t why_size)
{
	struct host_state *s = calloc(1, sizeof *s);

	(void)why;
	(void)why_size;
	if (!s)
		return host->error(DEVCACHE_ENOMEM, _("host: out of memory"));
	s->host = host;
	s->page = sysconf(_SC_PAGESIZE);
	s->total = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)s->page;
	read_cpu_name(s->name, sizeof s->name);
	const char *text = host->tunable(host->cookie, "host_memory");
	struct tunable_value v;
	char bad[256];
	if (text && tunable_parse(TUN_host_memory, text, &v, bad, sizeof bad) == 0 &&
	    v.special != TV_AUTO) {
		s->limit = v.u.size;
		s->total = v.u.size;
		char size[32];

		format_bytes(v.u.size, size, sizeof size);
		snprintf(s->name, sizeof s->name, "Host memory, %s (host_memory)", size);
	}
	*state_p = s;
	*n_devices_p = 1;
	return 0;
}

static void host_fini(void *state)
{
	free(state);
}

static int host_device_info(void *state, int dev, devcache_backend_device_t *info)
{
	struct host_state *s = state;

	(void)dev;
	memset(info, 0, sizeof *info);
	snprintf(info->name, sizeof info->name, "%s", s->name);
	info->total_memory = s->total;
	info->caps = DEVCACHE_CAP_HOST_MEMORY | DEVCACHE_CAP_VMM;
	return 0;
}

/* MemAvailable is what the kernel could give without swapping. */
static int host_mem_get_info(void *state, int dev, uint64_t *free_p, uint64_t *total_p)
{
	struct host_state *s = state;
	FILE *f = fopen("/proc/meminfo", "re");
	unsigned long long kb;
	char line[256];

	(void)dev;
	*total_p = s->total;
	if (s->limit) { /* the emulated device's */
		*free_p = s->limit - atomic_load(&s->used);
		return 0;
	}
	*free_p = (uint64_t)sysconf(_SC_AVPHYS_PAGES) * (uint64_t)s->page;
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
			*free_p = kb * 1024;
			break;
		}
	fclose(f);
	return 0;
}

/* Host allocations never come from the malloc heap: each is its own mapping,
 * returned to the kernel when freed.  The first page records its length. */
/* Takes size bytes of the emulated device's memory, as its driver would;
 * false where that passes host_memory. */
static bool charge(struct host_state *s, uint64_t size)
{
	uint64_t used = atomic_load(&s->used);

	do {
		if (s->limit && (size > s->limit || used > s->limit - size))
			return false;
	} while (!atomic_compare_exchange_weak(&s->used, &used, used + size));
	return true;
}

static void uncharge(struct host_state *s, uint64_t size)
{
	atomic_fetch_sub(&s->used, size);
}

static int over_limit(struct host_state *s, size_t size)
{
	char have[32];

	format_bytes(s->limit - atomic_load(&s->used), have, sizeof have);
	return s->host->error(DEVCACHE_ENOMEM,
			      _("host: cannot allocate %zu bytes: %s of host_memory is free"),
			      size, have);
}

/* An emulated device (host_memory) commits its memory only as it is
 * written, as a replay never writes it: a trace of an 80 GiB GPU replays
 * on a machine with less. */
static int map_flags(const struct host_state *s, bool device)
{
	return MAP_PRIVATE | MAP_ANONYMOUS | (device && s->limit ? MAP_NORESERVE : 0);
}

static int map_alloc(struct host_state *s, size_t size, bool device, void **ptr_p)
{
	size_t len;

	if (size == 0)
		size = 1;
	if (size > SIZE_MAX - 2 * (size_t)s->page)
		return s->host->error(DEVCACHE_ENOMEM, _("host: cannot allocate %zu bytes"), size);
	len = (size + 2 * (size_t)s->page - 1) & ~((size_t)s->page - 1);
	void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, map_flags(s, device), -1, 0);
	if (base == MAP_FAILED)
		return s->host->error(DEVCACHE_ENOMEM, _("host: cannot allocate %zu bytes: %s"), size,
				      strerror(errno));
	*(size_t *)base = len;
	*ptr_p = (char *)base + s->page;
	return 0;
}

static int map_free(struct host_state *s, void *ptr)
{
	if (!ptr)
		return 0;
	char *base = (char *)ptr - s->page;
	if (munmap(base, *(size_t *)base) != 0)
		return s->host->error(DEVCACHE_EINVAL, _("host: cannot free %p: %s"), ptr,
				      strerror(errno));
	return 0;
}

/* Device memory counts against host_memory; pinned host memory does not. */
static int host_mem_alloc(void *state, int dev, size_t size, void **ptr_p)
{
	struct host_state *s = state;
	int rc;

	(void)dev;
	if (!charge(s, size))
		return over_limit(s, size);
	if ((rc = map_alloc(s, size, true, ptr_p)))
		uncharge(s, size);
	else /* beside the mapping's length, in its first page */
		((size_t *)((char *)*ptr_p - s->page))[1] = size;
	return rc;
}

static int host_mem_free(void *state, int dev, void *ptr)
{
	struct host_state *s = state;
	size_t size = ptr ? ((size_t *)((char *)ptr - s->page))[1] : 0;
	int rc;

	(void)dev;
	if ((rc = map_free(s, ptr)) == 0 && ptr)
		uncharge(s, size);
	return rc;
}

static int host_host_alloc(void *state, size_t size, void **ptr_p)
{
	return map_alloc(state, size, false, ptr_p);
}

static int host_host_free(void *state, void *ptr)
{
	return map_free(state, ptr);
}

static int host_memcpy(void *state, int dev, void *dst, const void *src, size_t size,
		       devcache_stream_t stream)
{
	(void)state, (void)dev, (void)stream;
	memmove(dst, src, size);
	return 0;
}

static int token_create(struct host_state *s, void **token_p)
{
	struct host_token *t = malloc(sizeof *t);

	if (!t)
		return s->host->error(DEVCACHE_ENOMEM, _("host: out of memory"));
	t->magic = 0x486f7374;
	*token_p = t;
	return 0;
}

static int host_stream_create(void *state, int dev, devcache_stream_t *stream_p)
{
	(void)dev;
	return token_create(state, stream_p);
}

static int host_token_destroy(void *state, int dev, void *token)
{
	(void)state, (void)dev;
	free(token);
	return 0;
}

static int host_nothing_pending(void *state, int dev, void *token)
{
	(void)state, (void)dev, (void)token;
	return 0;
}

static int host_event_create(void *state, int dev, devcache_event_t *event_p)
{
	(void)dev;
	return token_create(state, event_p);
}

static int host_event_record(void *state, int dev, devcache_event_t event, devcache_stream_t stream)
{
	(void)state, (void)dev, (void)event, (void)stream;
	return 0;
}

/* Virtual memory, for expandable segments.  A reservation is address space
 * with no access and no commitment; mapping a handle there makes it
 * ordinary anonymous memory, and unmapping gives the pages back to the
 * kernel.  A host handle only records its size: its memory exists while it
 * is mapped, which is all the allocator asks (it maps each handle once, and
 * never keeps contents across an unmap). */
struct host_vm_handle {
	size_t size;
};

static int host_vm_granularity(void *state, int dev, size_t *granularity_p)
{
	struct host_state *s = state;

	(void)dev;
	*granularity_p = (size_t)s->page;
	return 0;
}

static int host_vm_reserve(void *state, int dev, size_t size, void **va_p)
{
	struct host_state *s = state;
	void *va;

	(void)dev;
	va = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (va == MAP_FAILED)
		return s->host->error(DEVCACHE_ENOMEM, _("host: cannot reserve %zu bytes of address space: %s"),
				      size, strerror(errno));
	*va_p = va;
	return 0;
}

static int host_vm_release(void *state, int dev, void *va, size_t size)
{
	struct host_state *s = state;

	(void)dev;
	if (munmap(va, size) != 0)
		return s->host->error(DEVCACHE_EINVAL, _("host: cannot release %p: %s"), va,
				      strerror(errno));
	return 0;
}

static int host_vm_create(void *state, int dev, size_t size, void **handle_p)
{
	struct host_state *s = state;
	struct host_vm_handle *h = malloc(sizeof *h);

	(void)dev;
	if (!h)
		return s->host->error(DEVCACHE_ENOMEM, _("host: out of memory"));
	/* The physical memory of expandable segments: what a driver refuses. */
	if (!charge(s, size)) {
		free(h);
		return over_limit(s, size);
	}
	h->size = size;
	*handle_p = h;
	return 0;
}

static int host_vm_destroy(void *state, int dev, void *handle)
{
	struct host_state *s = state;
	struct host_vm_handle *h = handle;

	(void)dev;
	if (h)
		uncharge(s, h->size);
	free(handle);
	return 0;
}

static int host_vm_map(void *state, int dev, void *va, size_t size, void *handle)
{
	struct host_state *s = state;
	struct host_vm_handle *h = handle;

	(void)dev;
	if (size > h->size)
		return s->host->error(DEVCACHE_EINVAL, _("host: cannot map %zu bytes of a %zu-byte handle"),
				      size, h->size);
	if (mmap(va, size, PROT_READ | PROT_WRITE, MAP_FIXED | map_flags(s, true), -1, 0) ==
	    MAP_FAILED)
		return s->host->error(DEVCACHE_ENOMEM, _("host: cannot map %zu bytes at %p: %s"), size,
				      va, strerror(errno));
	return 0;
}

static int host_vm_unmap(void *state, int dev, void *va, size_t size)
{
	struct host_state *s = state;

	(void)dev;
	if (mmap(va, size, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
		 0) == MAP_FAILED)
		return s->host->error(DEVCACHE_EINVAL, _("host: cannot unmap %zu bytes at %p: %s"), size,
				      va, strerror(errno));
	return 0;
}

static const struct devcache_backend_ops host_ops = {
	.abi_version = DEVCACHE_BACKEND_ABI_VERSION,
	.abi_minor = DEVCACHE_BACKEND_ABI_MINOR,
	.name = "host",
	.dlpack_device_type = 1, /* kDLCPU */
	.init = host_init,
	.fini = host_fini,
	.device_info = host_device_info,
	.mem_get_info = host_mem_get_info,
	.mem_alloc = host_mem_alloc,
	.mem_free = host_mem_free,
	.host_alloc = host_host_alloc,
	.host_free = host_host_free,
	.memcpy_htod = host_memcpy,
	.memcpy_dtoh = host_memcpy,
	.stream_create = host_stream_create,
	.stream_destroy = host_token_destroy,
	.stream_synchronize = host_nothing_pending,
	.event_create = host_event_create,
	.event_destroy = host_token_destroy,
	.event_record = host_event_record,
	.event_query = host_nothing_pending,
	.event_synchronize = host_nothing_pending,
	.vm_granularity = host_vm_granularity,
	.vm_reserve = host_vm_reserve,
	.vm_release = host_vm_release,
	.vm_create = host_vm_create,
	.vm_destroy = host_vm_destroy,
	.vm_map = host_vm_map,
	.vm_unmap = host_vm_unmap,
};

const struct devcache_backend_ops *host_backend_ops(void)
{
	return &host_ops;
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake.h - a test-only backend module; each tests/modules/NAME.c sets FAKE_* and includes it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <devcache-backend.h>

#ifndef FAKE_NAME
#error "define FAKE_NAME"
#endif
#ifndef FAKE_ABI
#define FAKE_ABI DEVCACHE_BACKEND_ABI_VERSION
#endif
#ifndef FAKE_DEVICES
#define FAKE_DEVICES 2
#endif
#ifndef FAKE_WHY
#define FAKE_WHY ""
#endif
#ifndef FAKE_MEM_ALLOC
#define FAKE_MEM_ALLOC fake_mem_alloc
#endif
#ifndef FAKE_MINOR
#define FAKE_MINOR DEVCACHE_BACKEND_ABI_MINOR
#endif
#ifndef FAKE_PRIORITY
#define FAKE_PRIORITY 0
#endif
/* The DLPack device type the module declares (ABI minor 2). */
#ifndef FAKE_DLPACK
#define FAKE_DLPACK 0
#endif
/* FAKE_TUNABLES: the name of a struct devcache_backend_tunable array the
 * module defines before including this file; FAKE_SHOW_TUNABLE: one of them,
 * whose value init logs. */
#ifndef FAKE_TUNABLES
#define FAKE_TUNABLES NULL
#endif

const struct devcache_backend_ops *devcache_backend_module(void);

/* Test controls, reached with dlsym() by tests that dlopen() this module:
 * device memory is limited to the device's total (dev + 1 GiB), and events
 * stay pending while hold_events is set, as work queued on a busy GPU. */
void fake_hold_events(int hold);
unsigned long fake_allocs(void);
/* Fault injection: the nth call from now (1: the next) of the named entry
 * ("mem_alloc", "host_alloc", "memcpy_htod", "memcpy_dtoh", "event_create",
 * "event_record") fails as a driver would, and with FAKE_FAIL_ON every call
 * from the nth on does; 0 disarms it. */
#define FAKE_FAIL_ON 0x80000000u
void fake_fail(const char *entry, unsigned nth);

static uint64_t used[FAKE_DEVICES > 0 ? FAKE_DEVICES : 1];
static unsigned long n_allocs;
static int hold_events;

enum { F_MEM_ALLOC, F_HOST_ALLOC, F_HTOD, F_DTOH, F_EVENT_CREATE, F_EVENT_RECORD, F_COUNT };
static const char *const fault_names[F_COUNT] = {"mem_alloc", "host_alloc", "memcpy_htod",
						  "memcpy_dtoh", "event_create", "event_record"};
static unsigned fault_at[F_COUNT]; /* calls to go before the failing one; 0: none */

void fake_fail(const char *entry, unsigned nth)
{
	for (int i = 0; i < F_COUNT; i++)
		if (strcmp(entry, fault_names[i]) == 0)
			__atomic_store_n(&fault_at[i], nth, __ATOMIC_RELAXED);
}

/* Whether this call of entry f is to fail. */
static int faulty(int f)
{
	unsigned n = __atomic_load_n(&fault_at[f], __ATOMIC_RELAXED), next;

	do {
		if ((n & ~FAKE_FAIL_ON) == 0)
			return 0;
		/* Count down to 1; from then on, FAKE_FAIL_ON stays armed. */
		next = (n & ~FAKE_FAIL_ON) == 1 ? (n & FAKE_FAIL_ON ? n : 0) : n - 1;
	} while (!__atomic_compare_exchange_n(&fault_at[f], &n, next, 0, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return (n & ~FAKE_FAIL_ON) == 1;
}

void fake_hold_events(int hold)
{
	__atomic_store_n(&hold_events, hold, __ATOMIC_RELAXED);
}

unsigned long fake_allocs(void)
{
	return __atomic_load_n(&n_allocs, __ATOMIC_RELAXED);
}

/* Like a driver: 512-byte aligned, the size kept in a header before it. */
#define FAKE_HEADER 512

static int fake_init(const struct devcache_backend_host *host, void **state_p, int *n_devices_p,
		     char *why, size_t why_size)
{
#ifdef FAKE_INIT_FAILS
	return host->error(DEVCACHE_EBACKEND, "%s", FAKE_INIT_FAILS);
#endif
	/* The core's tunables are readable from a backend. */
	const char *level = host->tunable(host->cookie, "log_level");

	host->log(host->cookie, DEVCACHE_LOG_DEBUG, "initialised (log_level is %s)",
		  level ? level : "?");
#ifdef FAKE_SHOW_TUNABLE
	/* And so are its own. */
	const char *own = host->tunable(host->cookie, FAKE_SHOW_TUNABLE);

	host->log(host->cookie, DEVCACHE_LOG_DEBUG, "%s is %s", FAKE_SHOW_TUNABLE,
		  own ? own : "unknown");
#endif
	snprintf(why, why_size, "%s", FAKE_WHY);
	*state_p = (void *)host;
	*n_devices_p = FAKE_DEVICES;
	return 0;
}

static void fake_fini(void *state)
{
	(void)state;
}

static int fake_device_info(void *state, int dev, devcache_backend_device_t *info)
{
	(void)state;
	memset(info, 0, sizeof *info);
	snprintf(info->name, sizeof info->name, "Fake device %d", dev);
	snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "0000:%02x:00.0", dev + 1);
	info->total_memory = (uint64_t)(dev + 1) << 30;
#ifdef FAKE_VMM
	info->caps = DEVCACHE_CAP_ASYNC_COPY | DEVCACHE_CAP_VMM;
#else
	/* Device 1 claims virtual memory without the entries: the core must drop it. */
	info->caps = DEVCACHE_CAP_ASYNC_COPY | (dev == 1 ? DEVCACHE_CAP_VMM : 0);
#endif
	return 0;
}

static int fake_mem_get_info(void *state, int dev, uint64_t *free_p, uint64_t *total_p)
{
	(void)state;
	*total_p = (uint64_t)(dev + 1) << 30;
	*free_p = *total_p - __atomic_load_n(&used[dev], __ATOMIC_RELAXED);
	return 0;
}

/* Unused where a module leaves the entry out on purpose. */
__attribute__((unused)) static int fake_mem_alloc(void *state, int dev, size_t size, void **ptr_p)
{
	const struct devcache_backend_host *host = state;
	uint64_t cap = (uint64_t)(dev + 1) << 30;
	uint64_t now;
	char *p;

	__atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED); /* calls, failed ones too */
	if (faulty(F_MEM_ALLOC))
		return host->error(DEVCACHE_ENOMEM, "fake: injected failure of mem_alloc");
	now = __atomic_add_fetch(&used[dev], size, __ATOMIC_RELAXED);

	if (now > cap || !(p = aligned_alloc(FAKE_HEADER, FAKE_HEADER + ((size + 511) & ~(size_t)511)))) {
		__atomic_sub_fetch(&used[dev], size, __ATOMIC_RELAXED);
		return host->error(DEVCACHE_ENOMEM, "fake: out of memory: %zu bytes", size);
	}
	*(size_t *)p = size;
	*(int *)(p + sizeof(size_t)) = dev;
	*ptr_p = p + FAKE_HEADER;
	return 0;
}

static int fake_free(void *state, int dev, void *ptr)
{
	(void)state, (void)dev;
	if (!ptr)
		return 0;
	char *p = (char *)ptr - FAKE_HEADER;
	__atomic_sub_fetch(&used[*(int *)(p + sizeof(size_t))], *(size_t *)p, __ATOMIC_RELAXED);
	free(p);
	return 0;
}

static int fake_host_alloc(void *state, size_t size, void **ptr_p)
{
	const struct devcache_backend_host *host = state;

	if (faulty(F_HOST_ALLOC))
		return host->error(DEVCACHE_ENOMEM, "fake: injected failure of host_alloc");
	if (!(*ptr_p = malloc(size ? size : 1)))
		return host->error(DEVCACHE_ENOMEM, "fake: out of pinned host memory: %zu bytes",
				   size);
	return 0;
}

static int fake_host_free(void *state, void *ptr)
{
	(void)state;
	free(ptr);
	return 0;
}

static int fake_copy(void *state, int dev, void *dst, const void *src, size_t size,
		     devcache_stream_t stream)
{
	(void)state, (void)dev, (void)stream;
	memcpy(dst, src, size);
	return 0;
}

static int fake_htod(void *state, int dev, void *dst, const void *src, size_t size,
		     devcache_stream_t stream)
{
	const struct devcache_backend_host *host = state;

	if (faulty(F_HTOD))
		return host->error(DEVCACHE_EBACKEND, "fake: injected failure of memcpy_htod");
	return fake_copy(state, dev, dst, src, size, stream);
}

static int fake_dtoh(void *state, int dev, void *dst, const void *src, size_t size,
		     devcache_stream_t stream)
{
	const struct devcache_backend_host *host = state;

	if (faulty(F_DTOH))
		return host->error(DEVCACHE_EBACKEND, "fake: injected failure of memcpy_dtoh");
	return fake_copy(state, dev, dst, src, size, stream);
}

static int fake_handle_create(void *state, int dev, void **handle_p)
{
	const struct devcache_backend_host *host = state;

	(void)dev;
	if (!(*handle_p = malloc(1)))
		return host->error(DEVCACHE_ENOMEM, "fake: out of memory for a handle");
	return 0;
}

static int fake_event_create(void *state, int dev, void **event_p)
{
	const struct devcache_backend_host *host = state;

	if (faulty(F_EVENT_CREATE))
		return host->error(DEVCACHE_EBACKEND, "fake: injected failure of event_create");
	return fake_handle_create(state, dev, event_p);
}

static int fake_handle_destroy(void *state, int dev, void *handle)
{
	(void)state, (void)dev;
	free(handle);
	return 0;
}

static int fake_event_query(void *state, int dev, void *event)
{
	(void)state, (void)dev, (void)event;
	return __atomic_load_n(&hold_events, __ATOMIC_RELAXED) ? DEVCACHE_EAGAIN : 0;
}

/* Waiting for work completes it. */
static int fake_wait(void *state, int dev, void *handle)
{
	(void)state, (void)dev, (void)handle;
	fake_hold_events(0);
	return 0;
}

static int fake_record(void *state, int dev, devcache_event_t event, devcache_stream_t stream)
{
	const struct devcache_backend_host *host = state;

	(void)dev, (void)event, (void)stream;
	if (faulty(F_EVENT_RECORD))
		return host->error(DEVCACHE_EBACKEND, "fake: injected failure of event_record");
	return 0;
}

#ifdef FAKE_VMM
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

/* Virtual memory as a GPU driver has it: 2 MiB granularity, which the
 * module checks the core respects; physical memory counts against the
 * device's capacity from vm_create to vm_destroy; a handle maps once. */
#define FAKE_GRANULARITY ((size_t)2 << 20)

struct fake_vm_handle {
	size_t size;
	int dev;
	void *mapped_at;
	struct fake_vm_handle *next; /* on the mapped list while mapped */
};

static struct fake_vm_handle *vm_mapped;
static pthread_mutex_t vm_lock = PTHREAD_MUTEX_INITIALIZER;

static int fake_vm_granularity(void *state, int dev, size_t *granularity_p)
{
	(void)state, (void)dev;
	*granularity_p = FAKE_GRANULARITY;
	return 0;
}

static int fake_vm_reserve(void *state, int dev, size_t size, void **va_p)
{
	const struct devcache_backend_host *host = state;
	void *va;

	(void)dev;
	if (size == 0 || size % FAKE_GRANULARITY)
		return host->error(DEVCACHE_EINVAL, "fake: reserve of %zu bytes", size);
	/* Over-reserve to align the range to the granularity. */
	va = mmap(NULL, size + FAKE_GRANULARITY, PROT_NONE,
		  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (va == MAP_FAILED)
		return host->error(DEVCACHE_ENOMEM, "fake: cannot reserve %zu bytes", size);
	uintptr_t base = ((uintptr_t)va + FAKE_GRANULARITY - 1) & ~(uintptr_t)(FAKE_GRANULARITY - 1);
	if (base > (uintptr_t)va)
		munmap(va, base - (uintptr_t)va);
	munmap((void *)(base + size), (uintptr_t)va + FAKE_GRANULARITY - base);
	*va_p = (void *)base;
	return 0;
}

static int fake_vm_release(void *state, int dev, void *va, size_t size)
{
	const struct devcache_backend_host *host = state;

	(void)dev;
	if ((uintptr_t)va % FAKE_GRANULARITY || munmap(va, size))
		return host->error(DEVCACHE_EINVAL, "fake: bad release of %p", va);
	return 0;
}

static int fake_vm_create(void *state, int dev, size_t size, void **handle_p)
{
	const struct devcache_backend_host *host = state;
	uint64_t cap = (uint64_t)(dev + 1) << 30;
	struct fake_vm_handle *h;

	__atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
	if (size == 0 || size % FAKE_GRANULARITY)
		return host->error(DEVCACHE_EINVAL, "fake: handle of %zu bytes", size);
	if (__atomic_add_fetch(&used[dev], size, __ATOMIC_RELAXED) > cap ||
	    !(h = calloc(1, sizeof *h))) {
		__atomic_sub_fetch(&used[dev], size, __ATOMIC_RELAXED);
		return host->error(DEVCACHE_ENOMEM, "fake: out of memory: %zu bytes", size);
	}
	h->size = size;
	h->dev = dev;
	*handle_p = h;
	return 0;
}

static int fake_vm_destroy(void *state, int dev, void *handle)
{
	const struct devcache_backend_host *host = state;
	struct fake_vm_handle *h = handle;

	(void)dev;
	if (h->mapped_at)
		return host->error(DEVCACHE_EBUSY, "fake: handle destroyed while mapped");
	__atomic_sub_fetch(&used[h->dev], h->size, __ATOMIC_RELAXED);
	free(h);
	return 0;
}

static int fake_vm_map(void *state, int dev, void *va, size_t size, void *handle)
{
	const struct devcache_backend_host *host = state;
	struct fake_vm_handle *h = handle;

	(void)dev;
	if ((uintptr_t)va % FAKE_GRANULARITY || size != h->size || h->mapped_at)
		return host->error(DEVCACHE_EINVAL, "fake: bad map of %zu bytes at %p", size, va);
	if (mmap(va, size, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) ==
	    MAP_FAILED)
		return host->error(DEVCACHE_ENOMEM, "fake: cannot map at %p", va);
	pthread_mutex_lock(&vm_lock);
	h->mapped_at = va;
	h->next = vm_mapped;
	vm_mapped = h;
	pthread_mutex_unlock(&vm_lock);
	return 0;
}

/* Unmapping must cover whole mappings, as with cuMemUnmap. */
static int fake_vm_unmap(void *state, int dev, void *va, size_t size)
{
	const struct devcache_backend_host *host = state;
	uintptr_t lo = (uintptr_t)va, hi = lo + size;
	size_t covered = 0;

	(void)dev;
	if (lo % FAKE_GRANULARITY || size % FAKE_GRANULARITY)
		return host->error(DEVCACHE_EINVAL, "fake: bad unmap of %zu bytes at %p", size, va);
	pthread_mutex_lock(&vm_lock);
	for (struct fake_vm_handle **l = &vm_mapped; *l;) {
		struct fake_vm_handle *h = *l;
		uintptr_t at = (uintptr_t)h->mapped_at;

		if (at >= lo && at + h->size <= hi) {
			covered += h->size;
			h->mapped_at = NULL;
			*l = h->next;
		} else {
			l = &h->next;
		}
	}
	pthread_mutex_unlock(&vm_lock);
	if (covered != size ||
	    mmap(va, size, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
		 0) == MAP_FAILED)
		return host->error(DEVCACHE_EINVAL, "fake: bad unmap of %zu bytes at %p", size, va);
	return 0;
}
#endif

static const struct devcache_backend_ops fake_ops = {
	.abi_version = FAKE_ABI,
	.abi_minor = FAKE_MINOR,
	.name = FAKE_NAME,
	.priority = FAKE_PRIORITY,
	.dlpack_device_type = FAKE_DLPACK,
	.tunables = FAKE_TUNABLES,
	.init = fake_init,
	.fini = fake_fini,
	.device_info = fake_device_info,
	.mem_get_info = fake_mem_get_info,
	.mem_alloc = FAKE_MEM_ALLOC,
	.mem_free = fake_free,
	.host_alloc = fake_host_alloc,
	.host_free = fake_host_free,
	.memcpy_htod = fake_htod,
	.memcpy_dtoh = fake_dtoh,
	.stream_create = fake_handle_create,
	.stream_destroy = fake_handle_destroy,
	.stream_synchronize = fake_wait,
	.event_create = fake_event_create,
	.event_destroy = fake_handle_destroy,
	.event_record = fake_record,
	.event_query = fake_event_query,
	.event_synchronize = fake_wait,
#ifdef FAKE_VMM
	.vm_granularity = fake_vm_granularity,
	.vm_reserve = fake_vm_reserve,
	.vm_release = fake_vm_release,
	.vm_create = fake_vm_create,
	.vm_destroy = fake_vm_destroy,
	.vm_map = fake_vm_map,
	.vm_unmap = fake_vm_unmap,
#endif
};

const struct devcache_backend_ops *devcache_backend_module(void)
{
	return &fake_ops;
}

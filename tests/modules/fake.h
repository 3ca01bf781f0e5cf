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

const struct devcache_backend_ops *devcache_backend_module(void);

/* Test controls, reached with dlsym() by tests that dlopen() this module:
 * device memory is limited to the device's total (dev + 1 GiB), and events
 * stay pending while hold_events is set, as work queued on a busy GPU. */
void fake_hold_events(int hold);
unsigned long fake_allocs(void);

static uint64_t used[FAKE_DEVICES > 0 ? FAKE_DEVICES : 1];
static unsigned long n_allocs;
static int hold_events;

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

static int fake_init(const struct devcache_backend_host *host, void **state_p, char *why,
		     size_t why_size)
{
#ifdef FAKE_INIT_FAILS
	return host->error(DEVCACHE_EBACKEND, "%s", FAKE_INIT_FAILS);
#endif
	/* The core's tunables are readable from a backend. */
	const char *level = host->tunable(host->cookie, "log_level");

	host->log(host->cookie, DEVCACHE_LOG_DEBUG, "initialised (log_level is %s)",
		  level ? level : "?");
	snprintf(why, why_size, "%s", FAKE_WHY);
	*state_p = (void *)host;
	return 0;
}

static void fake_fini(void *state)
{
	(void)state;
}

static int fake_device_count(void *state, int *count_p)
{
	(void)state;
	*count_p = FAKE_DEVICES;
	return 0;
}

static int fake_device_info(void *state, int dev, devcache_backend_device_t *info)
{
	(void)state;
	memset(info, 0, sizeof *info);
	snprintf(info->name, sizeof info->name, "Fake device %d", dev);
	snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "0000:%02x:00.0", dev + 1);
	info->total_memory = (uint64_t)(dev + 1) << 30;
	/* Device 1 claims virtual memory without the entries: the core must drop it. */
	info->caps = DEVCACHE_CAP_ASYNC_COPY | (dev == 1 ? DEVCACHE_CAP_VMM : 0);
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
	(void)state;
	*ptr_p = malloc(size ? size : 1);
	return *ptr_p ? 0 : DEVCACHE_ENOMEM;
}

static int fake_host_free(void *state, void *ptr)
{
	(void)state;
	free(ptr);
	return 0;
}

static int fake_register(void *state, void *ptr, size_t size)
{
	(void)state, (void)ptr, (void)size;
	return 0;
}

static int fake_unregister(void *state, void *ptr)
{
	(void)state, (void)ptr;
	return 0;
}

static int fake_copy(void *state, int dev, void *dst, const void *src, size_t size,
		     devcache_stream_t stream)
{
	(void)state, (void)dev, (void)stream;
	memcpy(dst, src, size);
	return 0;
}

static int fake_handle_create(void *state, int dev, void **handle_p)
{
	(void)state, (void)dev;
	*handle_p = malloc(1);
	return *handle_p ? 0 : DEVCACHE_ENOMEM;
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
	(void)state, (void)dev, (void)event, (void)stream;
	return 0;
}

static const struct devcache_backend_ops fake_ops = {
	.abi_version = FAKE_ABI,
	.name = FAKE_NAME,
	.init = fake_init,
	.fini = fake_fini,
	.device_count = fake_device_count,
	.device_info = fake_device_info,
	.mem_get_info = fake_mem_get_info,
	.mem_alloc = FAKE_MEM_ALLOC,
	.mem_free = fake_free,
	.host_alloc = fake_host_alloc,
	.host_free = fake_host_free,
	.host_register = fake_register,
	.host_unregister = fake_unregister,
	.memcpy_htod = fake_copy,
	.memcpy_dtoh = fake_copy,
	.stream_create = fake_handle_create,
	.stream_destroy = fake_handle_destroy,
	.stream_synchronize = fake_wait,
	.event_create = fake_handle_create,
	.event_destroy = fake_handle_destroy,
	.event_record = fake_record,
	.event_query = fake_event_query,
	.event_synchronize = fake_wait,
};

const struct devcache_backend_ops *devcache_backend_module(void)
{
	return &fake_ops;
}

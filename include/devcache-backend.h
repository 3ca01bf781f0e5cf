/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* devcache-backend.h - the ABI between libdevcache and its backend modules. */
#ifndef DEVCACHE_BACKEND_H
#define DEVCACHE_BACKEND_H

#include <devcache.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The major version of the module ABI: bumped whenever struct
 * devcache_backend_ops or struct devcache_backend_host changes incompatibly.
 * The loader refuses a module built for another one. */
#define DEVCACHE_BACKEND_ABI_VERSION 2
/* The minor version: bumped when a reserved slot of either structure becomes
 * an entry.  Each side uses an entry only when the other side's abi_minor
 * says it has it, so a module built for an older or a newer minor loads. */
#define DEVCACHE_BACKEND_ABI_MINOR 2

/* A module exports one symbol with this name: a function returning its ops. */
#define DEVCACHE_BACKEND_ENTRY "devcache_backend_module"

/* What the core offers a backend: logging and the tunables' values. */
struct devcache_backend_host {
	unsigned abi_version;
	unsigned abi_minor;
	void *cookie;
	void (*log)(void *cookie, enum devcache_log_level level, const char *fmt, ...)
		DEVCACHE_PRINTF(3, 4);
	/* The value of any tunable, the core's or the module's own, formatted
	 * as in devcache.conf (a list is comma-separated); NULL for an unknown
	 * name.  Valid until fini. */
	const char *(*tunable)(void *cookie, const char *name);
	/* Set the calling thread's detail message; returns err, so a backend
	 * can write "return host->error(DEVCACHE_EBACKEND, ...)". */
	int (*error)(int err, const char *fmt, ...) DEVCACHE_PRINTF(2, 3);
	void *reserved[8];
};

/* A tunable that a module declares: set like any other (devcache.conf,
 * DEVCACHE_OPTIONS, devcache_open), listed by `devcache config`, read by
 * the module with host->tunable().  Its name begins with the module's name
 * and an underscore ("cuda_library"). */
struct devcache_backend_tunable {
	const char *name;
	const char *type;          /* "bool", "int", "size", "enum", "string", "list" */
	const char *default_value; /* parsed as user input is */
	const char *range;         /* int, size: "[lo,hi]"; enum: "a|b|c"; else "" */
	const char *summary;       /* one line, English */
	const char *description;   /* paragraphs separated by a blank line */
	void *reserved[2];
};

typedef struct devcache_backend_device {
	char name[256];
	char pci_bus_id[32];
	uint64_t total_memory;
	uint64_t caps; /* DEVCACHE_CAP_* */
	/* Since ABI minor 1: the largest single mem_alloc the device takes;
	 * 0 where its driver sets no limit below total_memory. */
	uint64_t max_alloc_size;
	uint64_t reserved[7];
} devcache_backend_device_t;

/* Streams (devcache_stream_t, in devcache.h) and events are the backend's own
 * opaque handles.  Stream NULL is the device's default stream. */
typedef void *devcache_event_t;

/* Every entry returns 0 or a negative DEVCACHE_E* code; on failure it writes a
 * reason into the thread's detail message through host->error(). */
struct devcache_backend_ops {
	unsigned abi_version; /* DEVCACHE_BACKEND_ABI_VERSION */
	unsigned abi_minor;   /* DEVCACHE_BACKEND_ABI_MINOR */
	const char *name;     /* "cuda": devices are named "cuda:N" */
	/* Where the module's devices come among all backends' when the
	 * backends tunable names no order: higher first.  The modules shipped
	 * with libdevcache use 100 to 300. */
	int priority;
	/* Its own tunables, ended by an entry whose name is NULL; may be NULL. */
	const struct devcache_backend_tunable *tunables;

	/* Mandatory.  init reports how many devices it found; it may succeed
	 * with zero, and then *why (up to why_size bytes) says why, in the
	 * vendor's own words; with devices, *why may say what they lack
	 * (a device that cannot map memory, and why), or stay empty. */
	int (*init)(const struct devcache_backend_host *host, void **state_p, int *n_devices_p,
		    char *why, size_t why_size);
	void (*fini)(void *state);
	int (*device_info)(void *state, int dev, devcache_backend_device_t *info);
	int (*mem_get_info)(void *state, int dev, uint64_t *free_p, uint64_t *total_p);
	int (*mem_alloc)(void *state, int dev, size_t size, void **ptr_p);
	int (*mem_free)(void *state, int dev, void *ptr);
	int (*host_alloc)(void *state, size_t size, void **ptr_p);
	int (*host_free)(void *state, void *ptr);
	int (*memcpy_htod)(void *state, int dev, void *dst, const void *src, size_t size,
			   devcache_stream_t stream);
	int (*memcpy_dtoh)(void *state, int dev, void *dst, const void *src, size_t size,
			   devcache_stream_t stream);
	int (*stream_create)(void *state, int dev, devcache_stream_t *stream_p);
	int (*stream_destroy)(void *state, int dev, devcache_stream_t stream);
	int (*stream_synchronize)(void *state, int dev, devcache_stream_t stream);
	int (*event_create)(void *state, int dev, devcache_event_t *event_p);
	int (*event_destroy)(void *state, int dev, devcache_event_t event);
	int (*event_record)(void *state, int dev, devcache_event_t event,
			    devcache_stream_t stream);
	/* 0 when complete, DEVCACHE_EAGAIN while pending. */
	int (*event_query)(void *state, int dev, devcache_event_t event);
	int (*event_synchronize)(void *state, int dev, devcache_event_t event);

	/* Optional: called only on devices with DEVCACHE_CAP_VMM.  The core
	 * reserves address space (vm_reserve), creates physical memory of a
	 * multiple of the granularity (vm_create: this is the allocation that
	 * may fail for want of memory), maps it at a reserved address with read
	 * and write access for the device (vm_map), and undoes each step with
	 * vm_unmap, vm_destroy and vm_release.  Sizes and addresses passed are
	 * multiples of the granularity; each handle is mapped at most once. */
	int (*vm_granularity)(void *state, int dev, size_t *granularity_p);
	int (*vm_reserve)(void *state, int dev, size_t size, void **va_p);
	int (*vm_release)(void *state, int dev, void *va, size_t size);
	int (*vm_create)(void *state, int dev, size_t size, void **handle_p);
	int (*vm_destroy)(void *state, int dev, void *handle);
	int (*vm_map)(void *state, int dev, void *va, size_t size, void *handle);
	int (*vm_unmap)(void *state, int dev, void *va, size_t size);

	/* Since ABI minor 2: what the module's device pointers are to a
	 * framework, as DLPack numbers device types (DLDeviceType in dlpack.h:
	 * 2 CUDA, 10 ROCm, 14 oneAPI); devcache_device_info_t passes it on, and
	 * the Python package builds __dlpack_device__ and the CUDA array
	 * interface from it.  0: none that a framework can import. */
	int dlpack_device_type;
	int reserved_int;

	void *reserved[15];
};

typedef const struct devcache_backend_ops *(*devcache_backend_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif /* DEVCACHE_BACKEND_H */

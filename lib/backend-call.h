/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* backend-call.h - the core's one route into a backend's vtable: a small inline wrapper per entry. */
#ifndef DEVCACHE_BACKEND_CALL_H
#define DEVCACHE_BACKEND_CALL_H

#include "backend.h"

/* The allocator, device.c and the model cache call a backend only through
 * these, never through ->ops-> at the call site, so that a check, a trace
 * or a change of calling convention has one place to go (as libfabric's
 * ofi_hmem_* wrappers).  Device-level calls take the device; the loader's
 * take the backend (it calls init itself, before it adopts the vtable). */

static inline void bk_fini(struct backend *be)
{
	be->ops->fini(be->state);
}

static inline int bk_device_info(struct backend *be, int ordinal, devcache_backend_device_t *info)
{
	return be->ops->device_info(be->state, ordinal, info);
}

static inline int bk_mem_get_info(const devcache_device_t *dev, uint64_t *free_p, uint64_t *total_p)
{
	return dev->backend->ops->mem_get_info(dev->backend->state, dev->ordinal, free_p, total_p);
}

static inline int bk_mem_alloc(const devcache_device_t *dev, size_t size, void **ptr_p)
{
	return dev->backend->ops->mem_alloc(dev->backend->state, dev->ordinal, size, ptr_p);
}

static inline int bk_mem_free(const devcache_device_t *dev, void *ptr)
{
	return dev->backend->ops->mem_free(dev->backend->state, dev->ordinal, ptr);
}

static inline int bk_host_alloc(const devcache_device_t *dev, size_t size, void **ptr_p)
{
	return dev->backend->ops->host_alloc(dev->backend->state, size, ptr_p);
}

static inline int bk_host_free(const devcache_device_t *dev, void *ptr)
{
	return dev->backend->ops->host_free(dev->backend->state, ptr);
}

static inline int bk_memcpy_htod(const devcache_device_t *dev, void *dst, const void *src,
				 size_t size, devcache_stream_t stream)
{
	return dev->backend->ops->memcpy_htod(dev->backend->state, dev->ordinal, dst, src, size,
					      stream);
}

static inline int bk_memcpy_dtoh(const devcache_device_t *dev, void *dst, const void *src,
				 size_t size, devcache_stream_t stream)
{
	return dev->backend->ops->memcpy_dtoh(dev->backend->state, dev->ordinal, dst, src, size,
					      stream);
}

static inline int bk_stream_create(const devcache_device_t *dev, devcache_stream_t *stream_p)
{
	return dev->backend->ops->stream_create(dev->backend->state, dev->ordinal, stream_p);
}

static inline int bk_stream_destroy(const devcache_device_t *dev, devcache_stream_t stream)
{
	return dev->backend->ops->stream_destroy(dev->backend->state, dev->ordinal, stream);
}

static inline int bk_stream_synchronize(const devcache_device_t *dev, devcache_stream_t stream)
{
	return dev->backend->ops->stream_synchronize(dev->backend->state, dev->ordinal, stream);
}

static inline int bk_event_create(const devcache_device_t *dev, devcache_event_t *event_p)
{
	return dev->backend->ops->event_create(dev->backend->state, dev->ordinal, event_p);
}

static inline int bk_event_destroy(const devcache_device_t *dev, devcache_event_t event)
{
	return dev->backend->ops->event_destroy(dev->backend->state, dev->ordinal, event);
}

static inline int bk_event_record(const devcache_device_t *dev, devcache_event_t event,
				  devcache_stream_t stream)
{
	return dev->backend->ops->event_record(dev->backend->state, dev->ordinal, event, stream);
}

static inline int bk_event_query(const devcache_device_t *dev, devcache_event_t event)
{
	return dev->backend->ops->event_query(dev->backend->state, dev->ordinal, event);
}

static inline int bk_event_synchronize(const devcache_device_t *dev, devcache_event_t event)
{
	return dev->backend->ops->event_synchronize(dev->backend->state, dev->ordinal, event);
}

/* Virtual memory: only on devices with DEVCACHE_CAP_VMM. */
static inline int bk_vm_granularity(const devcache_device_t *dev, size_t *granularity_p)
{
	return dev->backend->ops->vm_granularity(dev->backend->state, dev->ordinal, granularity_p);
}

static inline int bk_vm_reserve(const devcache_device_t *dev, size_t size, void **va_p)
{
	return dev->backend->ops->vm_reserve(dev->backend->state, dev->ordinal, size, va_p);
}

static inline int bk_vm_release(const devcache_device_t *dev, void *va, size_t size)
{
	return dev->backend->ops->vm_release(dev->backend->state, dev->ordinal, va, size);
}

static inline int bk_vm_create(const devcache_device_t *dev, size_t size, void **handle_p)
{
	return dev->backend->ops->vm_create(dev->backend->state, dev->ordinal, size, handle_p);
}

static inline int bk_vm_destroy(const devcache_device_t *dev, void *handle)
{
	return dev->backend->ops->vm_destroy(dev->backend->state, dev->ordinal, handle);
}

static inline int bk_vm_map(const devcache_device_t *dev, void *va, size_t size, void *handle)
{
	return dev->backend->ops->vm_map(dev->backend->state, dev->ordinal, va, size, handle);
}

static inline int bk_vm_unmap(const devcache_device_t *dev, void *va, size_t size)
{
	return dev->backend->ops->vm_unmap(dev->backend->state, dev->ordinal, va, size);
}

#endif

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* device.c - naming, finding and describing backends and devices. */
#include "alloc.h"
#include "backend-call.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t devcache_backend_count(devcache_ctx_t *ctx)
{
	return ctx ? ctx->n_backends : 0;
}

int devcache_backend_info(devcache_ctx_t *ctx, size_t index, devcache_backend_info_t *info)
{
	if (!ctx || !info)
		return err_set(DEVCACHE_EINVAL, _("devcache_backend_info: NULL argument"));
	if (index >= ctx->n_backends)
		return err_set(DEVCACHE_ENOENT, _("no backend %zu: the context has %zu"), index,
			       ctx->n_backends);
	const struct backend *be = ctx->backends[index];
	memset(info, 0, sizeof *info);
	info->name = be->name;
	info->path = be->path;
	info->status = be->status;
	info->reason = be->reason ? be->reason : "";
	info->device_count = (unsigned)be->n_devices;
	return 0;
}

size_t devcache_device_count(devcache_ctx_t *ctx)
{
	return ctx ? ctx->n_devices : 0;
}

int devcache_device_at(devcache_ctx_t *ctx, size_t index, devcache_device_t **dev_p)
{
	if (!ctx || !dev_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_device_at: NULL argument"));
	if (index >= ctx->n_devices)
		return err_set(DEVCACHE_ENODEV, _("no device %zu: the context has %zu"), index,
			       ctx->n_devices);
	*dev_p = &ctx->devices[index];
	return 0;
}

static struct backend *find_backend(devcache_ctx_t *ctx, const char *name, size_t len)
{
	for (size_t i = 0; i < ctx->n_backends; i++)
		if (strlen(ctx->backends[i]->name) == len &&
		    strncmp(ctx->backends[i]->name, name, len) == 0)
			return ctx->backends[i];
	return NULL;
}

int devcache_device_get(devcache_ctx_t *ctx, const char *name, devcache_device_t **dev_p)
{
	if (!ctx || !name || !dev_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_device_get: NULL argument"));
	size_t len = strcspn(name, ":");
	long ordinal = 0;

	if (name[len] == ':') {
		const char *num = name + len + 1;
		char *end;

		ordinal = isdigit((unsigned char)*num) ? strtol(num, &end, 10) : -1;
		if (ordinal < 0 || *end || ordinal > 4096)
			return err_set(DEVCACHE_EINVAL,
				       _("invalid device name '%s' (expected NAME or NAME:INDEX, "
					 "such as host or cuda:0)"),
				       name);
	}
	struct backend *be = find_backend(ctx, name, len);
	if (!be)
		return err_set(DEVCACHE_ENODEV,
			       _("no device '%s': there is no backend named '%.*s' (devcache info "
				 "lists them)"),
			       name, (int)len, name);
	if (be->status != DEVCACHE_BACKEND_LOADED)
		return err_set(DEVCACHE_ENODEV, _("no device '%s': the %s backend is unavailable: %s"),
			       name, be->name, be->reason ? be->reason : "");
	for (size_t i = 0; i < ctx->n_devices; i++)
		if (ctx->devices[i].backend == be && ctx->devices[i].ordinal == ordinal) {
			*dev_p = &ctx->devices[i];
			return 0;
		}
	if (be->n_devices == 0)
		return err_set(DEVCACHE_ENODEV, _("no device '%s': the %s backend has no device: %s"),
			       name, be->name, be->reason ? be->reason : "");
	return err_set(DEVCACHE_ENODEV, P_("no device '%s': the %s backend has %d device",
				   "no device '%s': the %s backend has %d devices",
				   (unsigned long)be->n_devices),
		       name,
		       be->name, be->n_devices);
}

uint64_t device_max_alloc(const devcache_device_t *dev)
{
	uint64_t limit = dev->backend->ops->abi_minor >= 1 ? dev->info.max_alloc_size : 0;

	return limit && limit < dev->info.total_memory ? limit : dev->info.total_memory;
}

int devcache_device_info(devcache_device_t *dev, devcache_device_info_t *info)
{
	uint64_t free_mem = 0, total = 0;

	if (!dev || !info)
		return err_set(DEVCACHE_EINVAL, _("devcache_device_info: NULL argument"));
	int rc = bk_mem_get_info(dev, &free_mem, &total);
	if (rc)
		return err_set(rc, _("%s: cannot read memory information: %s"), dev->id,
			       devcache_last_error());
	memset(info, 0, sizeof *info);
	snprintf(info->id, sizeof info->id, "%s", dev->id);
	snprintf(info->name, sizeof info->name, "%s", dev->info.name);
	snprintf(info->backend, sizeof info->backend, "%s", dev->backend->name);
	snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "%s", dev->info.pci_bus_id);
	info->ordinal = dev->ordinal;
	info->total_memory = total ? total : dev->info.total_memory;
	info->free_memory = free_mem;
	info->caps = dev->info.caps;
	info->max_alloc_size = device_max_alloc(dev);
	if (info->max_alloc_size > info->total_memory)
		info->max_alloc_size = info->total_memory;
	if (dev->backend->ops->abi_minor >= 2)
		info->dlpack_device_type = dev->backend->ops->dlpack_device_type;
	return 0;
}

int devices_start_allocators(devcache_ctx_t *ctx)
{
	for (size_t i = 0; i < ctx->n_devices; i++) {
		struct devcache_device *dev = &ctx->devices[i];
		int rc = allocator_create(dev, ALLOC_DEVICE, &dev->alloc);

		if (rc == 0)
			rc = allocator_create(dev, ALLOC_PINNED, &dev->pinned);
		if (rc)
			return rc;
	}
	return 0;
}

void devices_stop_allocators(devcache_ctx_t *ctx)
{
	for (size_t i = 0; i < ctx->n_devices; i++) {
		allocator_destroy(ctx->devices[i].alloc);
		allocator_destroy(ctx->devices[i].pinned);
		ctx->devices[i].alloc = ctx->devices[i].pinned = NULL;
	}
}

void device_event_destroy(devcache_device_t *dev, void *event)
{
	if (bk_event_destroy(dev, event))
		log_msg(&dev->ctx->log, DEVCACHE_LOG_ERROR, _("%s: the driver refused to release %p: %s"),
			dev->id, event, devcache_last_error());
}

static int copy(devcache_device_t *dev, void *dst, const void *src, size_t size,
		devcache_stream_t stream, bool to_device)
{
	const char *fn = to_device ? "devcache_copy_to_device" : "devcache_copy_to_host";
	int rc;

	if (!dev || ((!dst || !src) && size))
		return err_set(DEVCACHE_EINVAL, _("%s: NULL argument"), fn);
	if (!size)
		return 0;
	rc = to_device ? bk_memcpy_htod(dev, dst, src, size, stream)
		       : bk_memcpy_dtoh(dev, dst, src, size, stream);
	if (rc == 0)
		rc = bk_stream_synchronize(dev, stream);
	return rc;
}

int devcache_copy_to_device(devcache_device_t *dev, void *dst, const void *src, size_t size,
			    devcache_stream_t stream)
{
	return copy(dev, dst, src, size, stream, true);
}

int devcache_copy_to_host(devcache_device_t *dev, void *dst, const void *src, size_t size,
			  devcache_stream_t stream)
{
	return copy(dev, dst, src, size, stream, false);
}

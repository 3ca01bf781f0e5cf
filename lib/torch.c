/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* torch.c - PyTorch's CUDAPluggableAllocator entry points, on one process-wide context opened at first use. */

/*
 * torch calls a plain malloc and free and passes no state, so these entry
 * points keep one: the library's only global mutable state, documented as
 * such in devcache-torch.h and devcache-torch(3).
 *
 * - The context is opened once, under pthread_once, by the first call of
 *   any entry point; the result (the context, or the error code and its
 *   message) never changes after, so it is read without a lock.  A failed
 *   open is not retried: the environment it read will not change either.
 * - The context is never closed.  torch frees tensors until the interpreter
 *   is gone, after any atexit handler of ours would have run.
 * - torch's device indices map to devices through a table of atomic
 *   pointers.  Two threads that miss at once both look the device up and
 *   store the same pointer, so the race is harmless.
 * - malloc and free have no error to return: the reason goes to the
 *   context's log handler, and to standard error (once) when there is no
 *   context to log through.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

#include <devcache-torch.h>

/* torch's device indices cached; larger ones are looked up at each call. */
#define TORCH_DEVICES 64

static struct {
	pthread_once_t once;
	devcache_ctx_t *ctx;
	int rc;                  /* the open's result */
	char error[1024];        /* and its detail message */
	int reported;            /* the failed open was written to stderr; atomic */
	devcache_device_t *devices[TORCH_DEVICES]; /* atomic */
} torch = {.once = PTHREAD_ONCE_INIT};

static void torch_open(void)
{
	devcache_open_args_t args = {.struct_size = sizeof args};

	torch.rc = context_open(&torch.ctx, &args, secure_getenv("PYTORCH_CUDA_ALLOC_CONF"),
				secure_getenv("PYTORCH_NO_CUDA_MEMORY_CACHING") != NULL);
	if (torch.rc)
		snprintf(torch.error, sizeof torch.error, "%s", devcache_last_error());
}

/* The context, or the failed open's code and detail message once more. */
static int torch_ctx(devcache_ctx_t **ctx_p)
{
	pthread_once(&torch.once, torch_open);
	if (torch.rc)
		return err_set(torch.rc, "%s", torch.error);
	*ctx_p = torch.ctx;
	return 0;
}

/* cuda:N, or hip:N for a ROCm build of torch; the error says why neither. */
static int lookup(devcache_ctx_t *ctx, int device, devcache_device_t **dev_p)
{
	char name[32], cuda[512], hip[512];

	snprintf(name, sizeof name, "cuda:%d", device);
	if (devcache_device_get(ctx, name, dev_p) == 0)
		return 0;
	snprintf(cuda, sizeof cuda, "%s", devcache_last_error());
	snprintf(name, sizeof name, "hip:%d", device);
	if (devcache_device_get(ctx, name, dev_p) == 0)
		return 0;
	/* Copied: err_set writes where devcache_last_error() points. */
	snprintf(hip, sizeof hip, "%s", devcache_last_error());
	return err_set(DEVCACHE_ENODEV, _("torch device %d: %s; %s"), device, cuda, hip);
}

static int torch_dev(int device, devcache_device_t **dev_p)
{
	devcache_ctx_t *ctx = NULL;
	int rc;

	if (device < 0)
		return err_set(DEVCACHE_EINVAL, _("torch device %d: a device index cannot be negative"),
			       device);
	rc = torch_ctx(&ctx);
	if (rc)
		return rc;
	if (device < TORCH_DEVICES) {
		*dev_p = __atomic_load_n(&torch.devices[device], __ATOMIC_ACQUIRE);
		if (*dev_p)
			return 0;
	}
	rc = lookup(ctx, device, dev_p);
	if (rc == 0 && device < TORCH_DEVICES)
		__atomic_store_n(&torch.devices[device], *dev_p, __ATOMIC_RELEASE);
	return rc;
}

/* Why fn failed (this thread's detail message), for an entry point that
 * cannot return it. */
static void report(const char *fn)
{
	pthread_once(&torch.once, torch_open);
	if (torch.ctx) {
		log_msg(&torch.ctx->log, DEVCACHE_LOG_ERROR, "%s: %s", fn, devcache_last_error());
		return;
	}
	/* No context, so no handler of its own: the default one's words, once,
	 * as every later call fails for the same reason. */
	if (__atomic_exchange_n(&torch.reported, 1, __ATOMIC_RELAXED))
		return;
	char text[1280];

	snprintf(text, sizeof text, _("%s: cannot open the context for PyTorch: %s"), fn,
		 torch.error);
	log_default_handler(NULL, DEVCACHE_LOG_ERROR, text);
}

void *devcache_torch_malloc(ssize_t size, int device, void *stream)
{
	devcache_device_t *dev;
	void *ptr = NULL;
	int rc;

	/* torch asks for 0 bytes for an empty tensor, and keeps NULL as it is. */
	if (size == 0)
		return NULL;
	if (size < 0)
		rc = err_set(DEVCACHE_EINVAL, _("torch device %d: invalid size %zd"), device, size);
	else if (!(rc = torch_dev(device, &dev)))
		rc = devcache_alloc(dev, (size_t)size, stream, &ptr);
	if (rc) {
		report("devcache_torch_malloc");
		return NULL;
	}
	return ptr;
}

void devcache_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
	devcache_device_t *dev;

	/* The allocator knows each block's size and stream. */
	(void)size;
	(void)stream;
	if (!ptr)
		return;
	if (torch_dev(device, &dev) || devcache_free(dev, ptr))
		report("devcache_torch_free");
}

int devcache_torch_context(devcache_ctx_t **ctx_p)
{
	if (!ctx_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_torch_context: NULL argument"));
	*ctx_p = NULL;
	return torch_ctx(ctx_p);
}

int devcache_torch_device(int device, devcache_device_t **dev_p)
{
	if (!dev_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_torch_device: NULL argument"));
	*dev_p = NULL;
	return torch_dev(device, dev_p);
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* devcache-torch.h - PyTorch's CUDAPluggableAllocator entry points, on one process-wide context. */
#ifndef DEVCACHE_TORCH_H
#define DEVCACHE_TORCH_H

#include <sys/types.h>

#include <devcache.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The process-wide context ----------------------------------------------
 * torch.cuda.memory.CUDAPluggableAllocator calls two plain functions and
 * passes no state, so these entry points share one context for the whole
 * process: the one documented exception to libdevcache's rule of no global
 * mutable state.  It is opened at the first call of any of the four
 * functions, from the usual sources (configuration files, DEVCACHE_CONF,
 * DEVCACHE_BACKEND_PATH, DEVCACHE_OPTIONS) and also from PyTorch's own
 * PYTORCH_CUDA_ALLOC_CONF, which ranks above the files and
 * DEVCACHE_BACKEND_PATH and below DEVCACHE_OPTIONS; devcache_config_get()
 * names it as the origin "PYTORCH_CUDA_ALLOC_CONF".  The environment is read
 * once.  The context is never closed: it lives until the process exits, as
 * torch frees tensors until then.  When it cannot be opened, the failure is
 * kept and every later call fails the same way, without trying again.
 * See devcache-torch(3). */

/* Allocate size bytes on torch's device index device, for use on stream (a
 * cudaStream_t or hipStream_t; NULL is the default stream), from the caching
 * allocator.  Returns NULL for size 0, without an error.  On failure (size
 * negative, no such device, out of memory, the context could not be opened)
 * returns NULL, leaves the reason as this thread's devcache_last_error() and
 * logs it at DEVCACHE_LOG_ERROR through the context's log handler; when the
 * context could not be opened, in the default handler's form on standard
 * error, once for the process.  Never aborts. */
DEVCACHE_API void *devcache_torch_malloc(ssize_t size, int device, void *stream);

/* Free what devcache_torch_malloc() returned; the block is reused on the
 * stream it was allocated on.  ptr NULL does nothing.  size and stream are
 * what torch passes back and are not needed; an error (a pointer this
 * allocator did not give) is logged as for devcache_torch_malloc(). */
DEVCACHE_API void devcache_torch_free(void *ptr, ssize_t size, int device, void *stream);

/* The process-wide context, opened if it was not yet, in *ctx_p: for reading
 * its statistics and configuration, or setting its log handler.  The caller
 * must not close it.  Returns 0, or the error of the failed open each time,
 * with the same detail message (devcache_last_error()). */
DEVCACHE_API int devcache_torch_context(devcache_ctx_t **ctx_p);

/* The context's device for torch's device index: cuda:DEVICE when the
 * context has that CUDA device, otherwise hip:DEVICE (a ROCm build of
 * torch).  DEVCACHE_ENODEV when it has neither, DEVCACHE_EINVAL for a
 * negative index. */
DEVCACHE_API int devcache_torch_device(int device, devcache_device_t **dev_p);

#ifdef __cplusplus
}
#endif
#endif /* DEVCACHE_TORCH_H */

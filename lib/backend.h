/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* backend.h - a loaded backend: its module, its ops, its state, and what went wrong if it failed. */
#ifndef DEVCACHE_BACKEND_INTERNAL_H
#define DEVCACHE_BACKEND_INTERNAL_H

#include "internal.h"

struct backend {
	char *name;
	char *path;      /* the module file, or "built-in" */
	void *dl;        /* dlopen() handle, NULL for host */
	const struct devcache_backend_ops *opened; /* checked, not yet started */
	const struct devcache_backend_ops *ops;    /* started */
	void *state;     /* the backend's own, from init */
	enum devcache_backend_status status;
	char *reason;
	int n_devices;
	struct devcache_backend_host host; /* what the core offers this backend */
	devcache_ctx_t *ctx;
};

#endif

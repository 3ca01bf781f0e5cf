/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* dtype.h - the one table of tensor dtypes, which both file readers and the public dtype calls use. */
#ifndef DEVCACHE_DTYPE_H
#define DEVCACHE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

/* One dtype: its public number (enum devcache_dtype), its name, its block
 * (elements, bytes) and where it may appear.  A retired ggml number keeps
 * its name, with a block of 0, so that the GGUF reader can say so. */
struct dtype_desc {
	int32_t id;
	const char *name;
	uint32_t blck;  /* elements per block; 0: retired from GGUF files */
	uint32_t bytes; /* bytes per block */
	uint32_t flags; /* DEVCACHE_DTYPE_* */
};

/* GGUF's tensor type number (ggml's): NULL when it never had one. */
const struct dtype_desc *dtype_ggml(uint32_t type);
/* A safetensors dtype by its name (len bytes, which may hold a NUL). */
const struct dtype_desc *dtype_safetensors(const char *s, size_t len);
/* By public number: NULL when it is none (a retired number included). */
const struct dtype_desc *dtype_by_id(int32_t id);
/* The name's public number, DEVCACHE_DTYPE_UNKNOWN for a name no format has. */
int32_t dtype_id_of(const char *name);

#endif

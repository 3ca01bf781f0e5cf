/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bytes.h - byte counts as text: the one formatter of the library and the tool. */
#ifndef DEVCACHE_BYTES_H
#define DEVCACHE_BYTES_H

#include <stddef.h>
#include <stdint.h>

/*
 * Built into the library and into the devcache tool alike (it has no
 * other dependency), so a size reads the same in a message, a summary and
 * the tool's output.  PyTorch's OutOfMemoryError keeps its own two-decimal
 * form (alloc-oom.c), which matches PyTorch's text byte for byte.
 */

/* For people: "512 B", "6.5 MiB", one decimal, binary units up to TiB. */
void format_bytes(uint64_t bytes, char *buf, size_t size);
/* Exactly, as devcache.conf writes it, with the largest unit that divides
 * the count: "512", "64K", "1536M". */
void format_size(uint64_t bytes, char *buf, size_t size);

#endif

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pytorch-model.h - an independent model of PyTorch's CUDA caching allocator policy, for the differential test and the benchmark. */
#ifndef DEVCACHE_PYTORCH_MODEL_H
#define DEVCACHE_PYTORCH_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The settings PyTorch reads from PYTORCH_CUDA_ALLOC_CONF and
 * torch.cuda.set_per_process_memory_fraction, resolved. */
struct ptm_config {
	uint64_t device_total;          /* bytes the simulated device has */
	size_t max_split_size;          /* SIZE_MAX: unlimited (PyTorch's default) */
	size_t max_non_split_rounding;  /* bytes; PyTorch's default is 20 MiB */
	unsigned divisions[16];         /* roundup_power2_divisions per interval
					   from 1 MiB (index 0) up; 0 or 1: none */
	double gc_threshold;            /* 0: off */
	bool fraction_set;              /* set_per_process_memory_fraction was called */
	double memory_fraction;
	bool expandable;                /* expandable_segments:True */
	/* Not PyTorch's: the address of the model's first byte of address
	 * space (its driver hands out addresses from here up, first fit, as
	 * the arena test device does from its base).  Any value but 0, the
	 * address that an allocation of 0 bytes returns, will do. */
	uint64_t address_base;
};

struct ptm_stats {
	int64_t allocated, allocated_peak; /* allocated_bytes, all pools */
	int64_t reserved, reserved_peak;   /* reserved_bytes, all pools */
	int64_t requested, requested_peak; /* requested_bytes, all pools */
	uint64_t num_device_alloc, num_device_free, num_alloc_retries, num_ooms;
	/* Not PyTorch's, for tests to see which paths a trace takes: segments
	 * released by garbage collection, and by release_available_cached_blocks. */
	uint64_t gc_releases, oversize_releases;
};

struct ptm;

/* NULL when out of memory. */
struct ptm *ptm_new(const struct ptm_config *config);
void ptm_delete(struct ptm *m);
/* 0, or -1 when PyTorch would raise OutOfMemoryError; -2 when the model
 * itself ran out of host memory, after which it does nothing more. */
int ptm_alloc(struct ptm *m, size_t size, unsigned stream, uint64_t *addr_p);
void ptm_free(struct ptm *m, uint64_t addr);
void ptm_empty_cache(struct ptm *m);
void ptm_stats(const struct ptm *m, struct ptm_stats *out);

#endif

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-chunks.c - a model on a device: its tensors in one allocation, or in several where the device's largest single allocation is smaller. */
#include "model-cache.h"
#include "model-file.h"

#include <stdlib.h>

/*
 * The layout is one rule (device_layout): tensors packed at TENSOR_ALIGN
 * in file order, as if in one allocation; m->bytes is its size.  Where
 * that is more than the device's largest single allocation (Level Zero's
 * maxMemAllocSize without relaxed limits), the layout is cut between
 * tensors into chunks, each allocated on its own and no larger than the
 * limit: a tensor is never split, and one larger than the limit cannot be
 * placed.  A tensor's offset stays its offset in the whole layout, which
 * is also where it lies in a RAM copy (keep_ram_copy), so a copy moves
 * chunk by chunk to and from the same places.
 */

struct dev_chunk {
	void *base;     /* the allocation; NULL while not on the device */
	uint64_t start; /* where it begins in the layout */
	uint64_t size;
};

/* The tensors' offsets (when not NULL) in the layout, and its size. */
uint64_t device_layout(const devcache_model_file_t *mf, uint64_t *offsets)
{
	uint64_t cur = 0;

	for (size_t i = 0; i < mf->n_tensors; i++) {
		cur = (cur + TENSOR_ALIGN - 1) & ~(TENSOR_ALIGN - 1);
		if (offsets)
			offsets[i] = cur;
		cur += mf->tensors[i].size;
	}
	return cur;
}

int mc_tensor_too_large(const struct devcache_model *m, size_t i, uint64_t limit)
{
	char size_s[32], limit_s[32];

	format_bytes(m->mf->tensors[i].size, size_s, sizeof size_s);
	format_bytes(limit, limit_s, sizeof limit_s);
	return err_set(DEVCACHE_ENOTSUP,
		       _("%s: tensor '%s' of %s (%llu bytes) is larger than %s's largest single "
			 "allocation, %s (%llu bytes)"),
		       m->mf->path, m->mf->tensors[i].name, size_s,
		       (unsigned long long)m->mf->tensors[i].size, m->dev->id, limit_s,
		       (unsigned long long)limit);
}

/* A new chunk beginning at start; false without memory. */
static bool chunk_add(struct devcache_model *m, size_t *cap, uint64_t start)
{
	if (m->n_chunks == *cap) {
		size_t n = *cap ? *cap * 2 : 4;
		struct dev_chunk *grown = realloc(m->chunks, n * sizeof *grown);

		if (!grown)
			return false;
		m->chunks = grown;
		*cap = n;
	}
	m->chunks[m->n_chunks++] = (struct dev_chunk){.start = start};
	return true;
}

int chunks_plan(struct devcache_model *m, uint64_t limit)
{
	const devcache_model_file_t *mf = m->mf;
	size_t n = mf->n_tensors ? mf->n_tensors : 1, cap = 0;
	struct dev_chunk *c;

	m->dev_offsets = calloc(n, sizeof *m->dev_offsets);
	m->dev_chunk = calloc(n, sizeof *m->dev_chunk);
	if (!m->dev_offsets || !m->dev_chunk || !chunk_add(m, &cap, 0))
		return err_oom();
	device_layout(mf, m->dev_offsets);
	for (size_t i = 0; i < mf->n_tensors; i++) {
		uint64_t off = m->dev_offsets[i], end = off + mf->tensors[i].size;

		if (mf->tensors[i].size > limit)
			return mc_tensor_too_large(m, i, limit);
		c = &m->chunks[m->n_chunks - 1];
		if (end - c->start > limit && c->size && !chunk_add(m, &cap, off))
			return err_oom();
		c = &m->chunks[m->n_chunks - 1];
		c->size = end - c->start;
		m->dev_chunk[i] = (uint32_t)(m->n_chunks - 1);
	}
	/* A model of no bytes still has an allocation: a pointer to give. */
	if (m->chunks[0].size == 0)
		m->chunks[0].size = 1;
	return 0;
}

int chunks_alloc(struct devcache_model *m, devcache_stream_t stream)
{
	for (size_t k = 0; k < m->n_chunks; k++) {
		int rc = devcache_alloc(m->dev, (size_t)m->chunks[k].size, stream, &m->chunks[k].base);

		if (rc) {
			chunks_release(m);
			return rc;
		}
	}
	return 0;
}

void chunks_release(struct devcache_model *m)
{
	for (size_t k = 0; k < m->n_chunks; k++) {
		if (m->chunks[k].base)
			mc_dev_free(m, m->chunks[k].base, m->chunks[k].size);
		m->chunks[k].base = NULL;
	}
}

void chunks_free(struct devcache_model *m)
{
	chunks_release(m);
	free(m->chunks);
	free(m->dev_chunk);
	free(m->dev_offsets);
	m->chunks = NULL;
	m->dev_chunk = NULL;
	m->dev_offsets = NULL;
	m->n_chunks = 0;
}

bool chunks_on_device(const struct devcache_model *m)
{
	return m->n_chunks && m->chunks[0].base;
}

void *chunks_tensor(const struct devcache_model *m, size_t index)
{
	const struct dev_chunk *c = &m->chunks[m->dev_chunk[index]];

	return (char *)c->base + (m->dev_offsets[index] - c->start);
}

int chunks_copy_out(const struct devcache_model *m, void *ram)
{
	int rc = 0;

	for (size_t k = 0; rc == 0 && k < m->n_chunks; k++)
		rc = devcache_copy_to_host(m->dev, (char *)ram + m->chunks[k].start, m->chunks[k].base,
					   (size_t)m->chunks[k].size, NULL);
	return rc;
}

int chunks_copy_in(const struct devcache_model *m, const void *ram, devcache_stream_t stream)
{
	int rc = 0;

	for (size_t k = 0; rc == 0 && k < m->n_chunks; k++)
		rc = devcache_copy_to_device(m->dev, m->chunks[k].base,
					     (const char *)ram + m->chunks[k].start,
					     (size_t)m->chunks[k].size, stream);
	return rc;
}

void *chunks_base(const struct devcache_model *m, size_t k)
{
	return m->chunks[k].base;
}

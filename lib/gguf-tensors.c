/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* gguf-tensors.c - GGUF tensor infos: checked against ggml's type table, sized, placed in the data section, and not overlapping. */
#include "gguf.h"
#include "dtype.h"

#include <stdint.h>
#include <stdlib.h>

#define GGUF_MAX_DIMS 4u /* ggml's GGML_MAX_DIMS */

/* ggml's tensor types, their blocks and their retired numbers: lib/dtype.c. */

/* ---- tensor infos ------------------------------------------------------------ */

static int tensor_name_error(struct parse *p, enum name_error fault, uint64_t index, uint64_t at,
			     uint64_t len)
{
	unsigned long long i = index, a = at;

	switch (fault) {
	case NAME_EMPTY:
		return mf_error(p->mf, _("tensor %llu at byte %llu: the name is empty"), i, a);
	case NAME_TOO_LONG:
		return mf_error(p->mf,
				_("tensor %llu at byte %llu: the name is %llu bytes long, more than "
				  "the %u allowed"),
				i, a, (unsigned long long)len, MF_MAX_NAME);
	case NAME_BAD_UTF8:
		return mf_error(p->mf, _("tensor %llu at byte %llu: the name is not valid UTF-8"), i,
				a);
	default:
		return mf_error(p->mf, _("tensor %llu at byte %llu: the name contains a NUL byte"),
				i, a);
	}
}

/* Bytes for the shape, as ggml_nbytes counts them for a contiguous tensor:
 * whole blocks along ne[0], then the other dimensions. */
static int tensor_size(struct parse *p, struct mf_tensor *t, const struct dtype_desc *ti)
{
	uint64_t elems = 1, size;

	/* ggml holds dimensions and the element count in int64_t. */
	for (uint32_t i = 0; i < t->n_dims; i++)
		if (__builtin_mul_overflow(elems, t->shape[i], &elems) || elems > INT64_MAX)
			goto overflow;
	if (t->shape[0] % ti->blck)
		return mf_error(p->mf,
				_("tensor '%s': its first dimension %llu is not a multiple of the "
				  "%s block size %u"),
				t->name, (unsigned long long)t->shape[0], ti->name,
				(unsigned)ti->blck);
	size = t->shape[0] / ti->blck;
	if (__builtin_mul_overflow(size, (uint64_t)ti->bytes, &size))
		goto overflow;
	for (uint32_t i = 1; i < t->n_dims; i++)
		if (__builtin_mul_overflow(size, t->shape[i], &size))
			goto overflow;
	t->size = size;
	return 0;
overflow:
	return mf_error(p->mf, _("tensor '%s': its element count or size overflows 64 bits"),
			t->name);
}

int read_tensor_info(struct parse *p, uint64_t index)
{
	struct cursor *c = &p->c;
	uint64_t at = c->pos, len;
	const struct dtype_desc *ti;
	enum name_error fault;
	struct mf_tensor *t;
	uint32_t n_dims, type;
	char *name;
	int rc;

	c->what = W_TENSOR_NAME;
	c->index = index;
	c->name = NULL;
	if ((rc = read_name(p, &name, &len, &fault)))
		return rc;
	if (fault)
		return tensor_name_error(p, fault, index, at, len);
	/* It fails only for memory: the count was held to MF_MAX_TENSORS. */
	if (!(t = mf_add_tensor(p->mf, name)))
		return DEVCACHE_ENOMEM;
	c->what = W_TENSOR;
	c->name = t->name;
	if ((rc = cur_u32(c, &n_dims)))
		return rc;
	/* ggml's own reader takes 1 to GGML_MAX_DIMS (4). */
	if (n_dims == 0 || n_dims > GGUF_MAX_DIMS)
		return mf_error(p->mf, _("tensor '%s': %u dimensions (only 1 to 4)"), t->name,
				(unsigned)n_dims);
	t->n_dims = n_dims;
	/* A dimension of 0 is allowed, as ggml allows it: an empty tensor of
	 * no bytes (ggml rejects only negative ones, which here are past
	 * INT64_MAX). */
	for (uint32_t i = 0; i < n_dims; i++) {
		if ((rc = cur_u64(c, &t->shape[i])))
			return rc;
		if (t->shape[i] > INT64_MAX)
			return mf_error(p->mf,
					_("tensor '%s': dimension %u is %llu, more than ggml can hold"),
					t->name, (unsigned)i, (unsigned long long)t->shape[i]);
	}
	if ((rc = cur_u32(c, &type)) || (rc = cur_u64(c, &t->offset)))
		return rc;
	ti = dtype_ggml(type);
	if (!ti)
		return mf_error(p->mf, _("tensor '%s': type %u is not a ggml type this reader knows"),
				t->name, (unsigned)type);
	if (!ti->blck)
		return mf_error(p->mf,
				_("tensor '%s': type %u (%s) has been removed from GGUF files"),
				t->name, (unsigned)type, ti->name);
	t->type = type;
	t->dtype = ti->name;
	t->dtype_id = ti->id;
	c->name = NULL;
	return tensor_size(p, t, ti);
}

/* Offsets are read relative to the data section, which starts only after
 * the last tensor info, at the next multiple of the alignment: they are
 * checked, and made absolute, here.  A file of no tensors (a vocabulary
 * alone, say) may end before that multiple, its padding left out, and
 * ggml reads it: its data section is empty, and said to start where the
 * file ends, never past it. */
int place_tensors(struct parse *p)
{
	struct devcache_model_file *mf = p->mf;
	uint64_t a = mf->alignment;

	/* No overflow: pos is within the file (an off_t), a at most 2^31. */
	uint64_t data = (p->c.pos + a - 1) / a * a;

	mf->data_offset = data < mf->size ? data : mf->size;
	for (size_t i = 0; i < mf->n_tensors; i++) {
		struct mf_tensor *t = &mf->tensors[i];
		uint64_t start, end;

		if (t->offset % a)
			return mf_error(mf, _("tensor '%s': offset %llu is not a multiple of the "
					      "alignment %llu"),
					t->name, (unsigned long long)t->offset, (unsigned long long)a);
		if (__builtin_add_overflow(data, t->offset, &start) ||
		    __builtin_add_overflow(start, t->size, &end) || end > mf->size)
			return mf_error(mf,
					_("tensor '%s': its %llu bytes at data offset %llu run past "
					  "the end of the %llu-byte file (the data starts at byte %llu)"),
					t->name, (unsigned long long)t->size,
					(unsigned long long)t->offset, (unsigned long long)mf->size,
					(unsigned long long)data);
		t->offset = start;
	}
	return 0;
}

struct span {
	uint64_t start, end;
	size_t index;
};

static int by_start(const void *x, const void *y)
{
	const struct span *a = x, *b = y;

	return a->start < b->start ? -1 : a->start > b->start;
}

/* Two tensors sharing bytes would be two views of one buffer, which a
 * loader copying each to its own device memory cannot honour. */
int check_overlaps(struct parse *p)
{
	struct devcache_model_file *mf = p->mf;
	struct span *s, far = {0, 0, 0};
	size_t n = 0;
	int rc = 0;

	if (mf->n_tensors < 2)
		return 0;
	if (!(s = malloc(mf->n_tensors * sizeof *s)))
		return err_oom();
	/* An empty tensor holds no bytes, so it overlaps nothing. */
	for (size_t i = 0; i < mf->n_tensors; i++)
		if (mf->tensors[i].size)
			s[n++] = (struct span){mf->tensors[i].offset,
					       mf->tensors[i].offset + mf->tensors[i].size, i};
	qsort(s, n, sizeof *s, by_start);
	for (size_t i = 0; i < n && !rc; i++) {
		if (i && s[i].start < far.end) {
			const struct mf_tensor *a = &mf->tensors[far.index], *b = &mf->tensors[s[i].index];

			rc = mf_error(mf,
				      _("tensors '%s' and '%s' overlap (bytes %llu to %llu and %llu to "
					"%llu)"),
				      a->name, b->name, (unsigned long long)far.start,
				      (unsigned long long)far.end, (unsigned long long)s[i].start,
				      (unsigned long long)s[i].end);
		}
		if (s[i].end > far.end)
			far = s[i];
	}
	free(s);
	return rc;
}

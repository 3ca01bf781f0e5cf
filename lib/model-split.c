/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-split.c - GGUF splits: a model in files named PREFIX-NNNNN-of-MMMMM.gguf, found from any one of them and checked as one set. */
#include "model-file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPLIT_SUFFIX_LEN 20 /* "-00001-of-00003.gguf" */

/* ---- GGUF splits: PREFIX-00001-of-00003.gguf ------------------------------------- */

/* A GGUF key's value as a whole number; false when absent. */
static bool meta_uint(const struct devcache_model_file *mf, const char *key, unsigned long long *v_p)
{
	for (size_t i = 0; i < mf->n_meta; i++)
		if (strcmp(mf->meta[i].key, key) == 0) {
			char *end;

			errno = 0;
			*v_p = strtoull(mf->meta[i].value, &end, 10);
			return !errno && end != mf->meta[i].value && !*end &&
			       mf->meta[i].value[0] != '-';
		}
	return false;
}

/* Where the name says "-NNNNN-of-MMMMM.gguf": the prefix's length and the
 * two numbers; false for a name that does not follow it. */
bool mf_split_name(const char *path, size_t *prefix_len_p, unsigned *no_p, unsigned *count_p)
{
	size_t n = strlen(path);
	unsigned no, count;
	char tail[8];

	if (n < SPLIT_SUFFIX_LEN + 1)
		return false;
	const char *s = path + n - SPLIT_SUFFIX_LEN;
	if (sscanf(s, "-%5u-of-%5u%7s", &no, &count, tail) != 3 || strcmp(tail, ".gguf") != 0 ||
	    s[1] < '0' || s[1] > '9' || s[10] < '0' || s[10] > '9' || s[6] != '-' ||
	    strncmp(s + 6, "-of-", 4) != 0)
		return false;
	*prefix_len_p = n - SPLIT_SUFFIX_LEN;
	*no_p = no;
	*count_p = count;
	return true;
}

/* A shard's split keys against its name and those of the file the split
 * was opened by (opened: its path), which gave count and tensors. */
static int check_split_keys(const struct devcache_model_file *part, unsigned k,
			    unsigned long long count, unsigned long long tensors, const char *opened)
{
	unsigned long long no, c, t;

	if (!meta_uint(part, "split.no", &no) || !meta_uint(part, "split.count", &c) ||
	    !meta_uint(part, "split.tensors.count", &t))
		return mf_error(part, _("shard %u of %llu of a GGUF split lacks split.no, "
					"split.count or split.tensors.count"),
				k + 1, count);
	if (c != count)
		return mf_error(part, _("split.count is %llu, but %s says %llu: is it a shard of "
					"another model?"),
				c, opened, count);
	if (t != tensors)
		return mf_error(part, _("split.tensors.count is %llu, but %s says %llu: is it a shard "
					"of another model?"),
				t, opened, tensors);
	if (no != k)
		return mf_error(part, _("split.no is %llu, but its name makes it shard %u (split.no "
					"%u)"),
				no, k + 1, k);
	return 0;
}

/* mf is one file of a GGUF split (split.count above 1): open the others,
 * found from its name, and check the set.  Takes mf over. */
static int open_split(struct devcache_model_file *mf, unsigned long long count,
		      struct devcache_model_file **set_p)
{
	struct devcache_model_file *set = NULL;
	unsigned long long tensors = 0;
	unsigned no = 0, name_count = 0;
	size_t prefix = 0;
	char *path = NULL;
	int rc;

	if (!mf_split_name(mf->path, &prefix, &no, &name_count)) {
		rc = mf_error(mf, _("split.count is %llu, but the name does not follow "
				    "PREFIX-NNNNN-of-MMMMM.gguf, so the other shards cannot be found"),
			      count);
		goto out;
	}
	if (name_count != count || no < 1 || no > count) {
		rc = mf_error(mf, _("split.count is %llu, but the name says shard %u of %u"), count, no,
			      name_count);
		goto out;
	}
	if (!meta_uint(mf, "split.tensors.count", &tensors)) {
		rc = mf_error(mf, _("a GGUF split shard without split.tensors.count"));
		goto out;
	}
	if ((rc = mf_new_set(mf->path, &set)) || !(path = malloc(prefix + SPLIT_SUFFIX_LEN + 1))) {
		rc = rc ? rc : err_oom();
		goto out;
	}
	for (unsigned k = 0; k < count; k++) {
		struct devcache_model_file *part = NULL;

		/* set->path: mf's, which the set takes over at its place. */
		sprintf(path, "%.*s-%05u-of-%05llu.gguf", (int)prefix, set->path, k + 1, count);
		if (k + 1 == no) {
			part = mf;
			mf = NULL;
		} else if ((rc = mf_open_file(path, &part))) {
			if (rc == DEVCACHE_EIO && (errno == EMFILE || errno == ENFILE)) {
				rc = mf_too_many_files(set->path, path, k, count, errno);
			} else if (rc == DEVCACHE_ENOENT) {
				char why[1024]; /* err_set() overwrites the last error */

				snprintf(why, sizeof why, "%s", devcache_last_error());
				rc = err_set(DEVCACHE_ENOENT, _("%s: shard %u of %llu of the GGUF split "
								"is missing: %s"),
					     set->path, k + 1, count, why);
			}
			goto out;
		}
		if ((rc = mf_add_part(set, part)))
			goto out;
		if (part->format != DEVCACHE_FORMAT_GGUF) {
			rc = mf_error(part, _("named as shard %u of the GGUF split %s, but it is not a "
					      "GGUF file"),
				      k + 1, set->path);
			goto out;
		}
		if ((rc = check_split_keys(part, k, count, tensors, set->path)))
			goto out;
	}
	mf_sum_parts(set);
	if ((rc = mf_merge_tensors(set)))
		goto out;
	if (set->n_tensors != tensors) {
		rc = mf_error(set, _("split.tensors.count is %llu, but the %llu shards hold %zu tensors"),
			      tensors, count, set->n_tensors);
		goto out;
	}
	free(set->path);
	if (!(set->path = strdup(set->parts[0]->path))) {
		rc = err_oom();
		goto out;
	}
	if ((rc = mf_copy_part_meta(set, set->parts[0])))
		goto out;
	*set_p = set;
	set = NULL;
out:
	devcache_model_file_close(mf);
	devcache_model_file_close(set);
	free(path);
	return rc;
}

/* A GGUF file that is one of a split becomes the split; anything else
 * stays itself.  A name that claims a split without the keys is bad. */
int mf_maybe_split(struct devcache_model_file *mf, struct devcache_model_file **out_p)
{
	unsigned long long count = 0;
	unsigned no, name_count;
	size_t prefix;

	*out_p = mf;
	if (mf->format != DEVCACHE_FORMAT_GGUF)
		return 0;
	if (meta_uint(mf, "split.count", &count) && count > 1) {
		*out_p = NULL;
		return open_split(mf, count, out_p);
	}
	if (mf_split_name(mf->path, &prefix, &no, &name_count) && name_count > 1) {
		bool has = meta_uint(mf, "split.count", &count);
		int rc = has ? mf_error(mf, _("its name says shard %u of %u of a GGUF split, but its "
					      "split.count is %llu"),
					no, name_count, count)
			     : mf_error(mf, _("its name says shard %u of %u of a GGUF split, but it "
					      "has no split.count"),
					no, name_count);

		*out_p = NULL;
		devcache_model_file_close(mf);
		return rc;
	}
	return 0;
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-set.c - models of several files: Hugging Face shards with an index, GGUF splits, a folder holding one model, diffusers pipelines. */
#include "model-file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

/*
 * A set is opened file by file, each shard parsed and checked alone by its
 * format's reader, and then checked as a whole: every tensor in the shard
 * that the index (or the split numbering) says, no name twice, the counts
 * and totals the set declares.  The set's own devcache_model_file holds
 * the shards (parts) in shard order and a merged tensor list pointing into
 * them: shard order, then file order within each shard.  Names are the
 * parts'; the set frees only its arrays.
 */

/* An index file larger than this is not an index (the largest real ones,
 * with tens of thousands of tensors, are a few MiB). */
#define MAX_INDEX_BYTES (64u << 20)
#define SPLIT_SUFFIX_LEN 20 /* "-00001-of-00003.gguf" */

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir);
	char *p = malloc(n + strlen(name) + 2);

	if (p)
		sprintf(p, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name);
	return p;
}

/* The folder part of path ("." for a bare name), newly allocated. */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		return strdup(".");
	if (slash == path)
		return strdup("/");
	return strndup(path, (size_t)(slash - path));
}

static int oom(void)
{
	return err_set(DEVCACHE_ENOMEM, _("out of memory"));
}

/* ---- the set ------------------------------------------------------------------ */

static int new_set(const char *path, struct devcache_model_file **set_p)
{
	struct devcache_model_file *set = calloc(1, sizeof *set);

	if (!set || !(set->path = strdup(path))) {
		free(set);
		return oom();
	}
	set->fd = -1;
	*set_p = set;
	return 0;
}

static int add_part(struct devcache_model_file *set, struct devcache_model_file *part)
{
	struct devcache_model_file **p = realloc(set->parts, (set->n_parts + 1) * sizeof *p);

	if (!p) {
		devcache_model_file_close(part);
		return oom();
	}
	set->parts = p;
	set->parts[set->n_parts++] = part;
	return 0;
}

static int by_name(const void *x, const void *y)
{
	const struct mf_tensor *a = *(struct mf_tensor *const *)x, *b = *(struct mf_tensor *const *)y;

	return strcmp(a->name, b->name);
}

/* Merge the parts' tensors, in shard then file order, and index them by
 * name; a name in two shards makes the set bad. */
static int merge_tensors(struct devcache_model_file *set)
{
	size_t n = 0, k = 0;

	for (size_t p = 0; p < set->n_parts; p++)
		n += set->parts[p]->n_tensors;
	if (n > MF_MAX_TENSORS)
		return mf_error(set, _("more than %u tensors"), MF_MAX_TENSORS);
	set->tensors = calloc(n ? n : 1, sizeof *set->tensors);
	set->by_name = calloc(n ? n : 1, sizeof *set->by_name);
	if (!set->tensors || !set->by_name)
		return oom();
	for (size_t p = 0; p < set->n_parts; p++)
		for (size_t i = 0; i < set->parts[p]->n_tensors; i++, k++) {
			set->tensors[k] = set->parts[p]->tensors[i];
			set->tensors[k].part = (uint32_t)p;
			set->by_name[k] = &set->tensors[k];
		}
	set->n_tensors = set->tensors_cap = n;
	qsort(set->by_name, n, sizeof *set->by_name, by_name);
	for (size_t i = 1; i < n; i++)
		if (strcmp(set->by_name[i - 1]->name, set->by_name[i]->name) == 0) {
			const struct mf_tensor *a = set->by_name[i - 1], *b = set->by_name[i];

			if (a->part > b->part)
				a = set->by_name[i], b = set->by_name[i - 1];
			return mf_error(set, _("tensor '%s' is in two shards: %s and %s"), a->name,
					set->parts[a->part]->path, set->parts[b->part]->path);
		}
	return 0;
}

/* The set's figures from its parts: size, format, data offset. */
static void sum_parts(struct devcache_model_file *set)
{
	struct devcache_model_file *first = set->parts[0];

	set->format = first->format;
	set->version = first->version;
	set->data_offset = first->data_offset;
	set->alignment = first->alignment;
	set->dev = first->dev;
	set->ino = first->ino;
	set->mtime = first->mtime;
	for (size_t p = 0; p < set->n_parts; p++)
		set->size += set->parts[p]->size;
}

/* A copy of a metadata pair into the set, unless the key is there. */
static int copy_meta(struct devcache_model_file *set, const char *key, const char *value)
{
	char *k, *v;

	for (size_t i = 0; i < set->n_meta; i++)
		if (strcmp(set->meta[i].key, key) == 0)
			return 0;
	if (!(k = strdup(key)) || !(v = strdup(value))) {
		free(k);
		return oom();
	}
	return mf_add_meta(set, k, v);
}

static int copy_part_meta(struct devcache_model_file *set, const struct devcache_model_file *part)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < part->n_meta; i++)
		rc = copy_meta(set, part->meta[i].key, part->meta[i].value);
	return rc;
}

/* ---- Hugging Face shards: NAME.safetensors.index.json ----------------------------- */

static int read_index(const char *path, struct json_object **root_p)
{
	struct devcache_model_file probe = {.path = (char *)path};
	struct json_tokener *tok = NULL;
	struct json_object *root = NULL;
	char *text = NULL;
	struct stat st;
	int fd, rc = 0;

	*root_p = NULL;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0 || fstat(fd, &st) != 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		return err_set(e == ENOENT ? DEVCACHE_ENOENT : DEVCACHE_EIO, _("%s: cannot open: %s"),
			       path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return err_set(DEVCACHE_EINVAL, _("%s: not a regular file"), path);
	}
	probe.fd = fd;
	probe.size = (uint64_t)st.st_size;
	if (probe.size > MAX_INDEX_BYTES)
		rc = mf_error(&probe,
			      _("%llu bytes is larger than the limit of %u bytes for a safetensors index"),
			      (unsigned long long)probe.size, MAX_INDEX_BYTES);
	else if (!(text = malloc((size_t)probe.size + 1)) || !(tok = json_tokener_new()))
		rc = oom();
	else if ((rc = mf_read(&probe, text, (size_t)probe.size, 0, _("the index"))) == 0) {
		json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
		root = json_tokener_parse_ex(tok, text, (int)probe.size);
		enum json_tokener_error jerr = json_tokener_get_error(tok);
		/* At the end of the text json-c is still waiting for the rest
		 * ("continue"): for a whole file, the text ended early. */
		if (!root && mf_json_out_of_memory(jerr, text, (size_t)probe.size))
			rc = err_set(DEVCACHE_ENOMEM, "%s: %s", path, _("out of memory"));
		else if (!root)
			rc = mf_error(&probe, _("neither a safetensors nor a GGUF file, nor a "
						"safetensors index (JSON: %s)"),
				      jerr == json_tokener_continue ? _("unexpected end of data")
								    : json_tokener_error_desc(jerr));
		else if (!json_object_is_type(root, json_type_object))
			rc = mf_error(&probe, _("a safetensors index is a JSON object"));
	}
	if (tok) /* json-c's free does not take NULL */
		json_tokener_free(tok);
	free(text);
	close(fd);
	if (rc)
		json_object_put(root);
	else
		*root_p = root;
	return rc;
}

/* The index's weight_map, checked: an object of file names in the
 * index's folder. */
static int weight_map(const char *path, struct json_object *root, struct json_object **map_p)
{
	struct devcache_model_file probe = {.path = (char *)path};
	struct json_object *map;

	if (!json_object_object_get_ex(root, "weight_map", &map) ||
	    !json_object_is_type(map, json_type_object))
		return mf_error(&probe, _("not a safetensors index: it has no \"weight_map\" object"));
	json_object_object_foreach(map, name, v) {
		const char *file = json_object_is_type(v, json_type_string) ? json_object_get_string(v)
									     : NULL;

		if (!file || !*file)
			return mf_error(&probe, _("weight_map: tensor '%s' is not mapped to a file name"),
					name);
		if (strchr(file, '/') || strcmp(file, "..") == 0 || strcmp(file, ".") == 0)
			return mf_error(&probe, _("weight_map: tensor '%s' is mapped to '%s', which is "
						  "not a file in the index's folder"),
					name, file);
	}
	*map_p = map;
	return 0;
}

static int by_string(const void *x, const void *y)
{
	return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* The distinct shard file names of a weight_map, sorted: the shard order. */
static int shard_names(struct json_object *map, const char ***names_p, size_t *n_p)
{
	size_t n = 0, cap = (size_t)json_object_object_length(map), k = 0;
	const char **names = calloc(cap ? cap : 1, sizeof *names);

	if (!names)
		return oom();
	json_object_object_foreach(map, key, v) {
		(void)key;
		names[n++] = json_object_get_string(v);
	}
	qsort(names, n, sizeof *names, by_string);
	for (size_t i = 0; i < n; i++)
		if (k == 0 || strcmp(names[k - 1], names[i]) != 0)
			names[k++] = names[i];
	*names_p = names;
	*n_p = k;
	return 0;
}

static int open_shard(const char *index, const char *dir, const char *name,
		      struct devcache_model_file **mf_p)
{
	char *path = join(dir, name);
	int rc;

	if (!path)
		return oom();
	rc = mf_open_file(path, mf_p);
	if (rc == DEVCACHE_ENOENT) {
		char why[1024]; /* err_set() overwrites the last error */

		snprintf(why, sizeof why, "%s", devcache_last_error());
		rc = err_set(DEVCACHE_ENOENT, _("%s: shard %s is missing: %s"), index, name, why);
	} else if (rc == 0 && (*mf_p)->format != DEVCACHE_FORMAT_SAFETENSORS) {
		devcache_model_file_close(*mf_p);
		*mf_p = NULL;
		rc = err_set(DEVCACHE_EFORMAT, _("%s: named as a shard by %s, but it is not a "
						 "safetensors file"),
			     path, index);
	}
	free(path);
	return rc;
}

/* Every tensor of the map in its shard, and every shard's tensor in the map
 * at that shard; the total the index declares. */
static int check_index(struct devcache_model_file *set, struct json_object *root,
		       struct json_object *map, const char **names)
{
	struct json_object *meta, *total;
	uint64_t sum = 0;

	for (size_t i = 0; i < set->n_tensors; i++) {
		const struct mf_tensor *t = &set->tensors[i];
		struct json_object *where;

		if (!json_object_object_get_ex(map, t->name, &where))
			return mf_error(set->parts[t->part],
					_("holds tensor '%s', which the weight_map of %s does not name"),
					t->name, set->path);
		if (strcmp(json_object_get_string(where), names[t->part]) != 0)
			return mf_error(set->parts[t->part],
					_("holds tensor '%s', which the weight_map of %s puts in %s"),
					t->name, set->path, json_object_get_string(where));
		sum += t->size;
	}
	/* Then the map against the shards: in this order, a tensor that one
	 * shard holds and the map puts in another is told as that, naming the
	 * shard that holds it, and not as missing from the map's. */
	json_object_object_foreach(map, name, v) {
		const char *file = json_object_get_string(v);
		size_t p = 0;

		while (strcmp(names[p], file) != 0)
			p++;
		if (mf_index(set->parts[p], name) < 0)
			return mf_error(set, _("tensor '%s' is not in %s, where the weight_map puts it"),
					name, set->parts[p]->path);
	}
	if (json_object_object_get_ex(root, "metadata", &meta) &&
	    json_object_is_type(meta, json_type_object) &&
	    json_object_object_get_ex(meta, "total_size", &total)) {
		if (!json_object_is_type(total, json_type_int) && !json_object_is_type(total, json_type_double))
			return mf_error(set, _("metadata.total_size is not a number"));
		if ((uint64_t)json_object_get_int64(total) != sum ||
		    (json_object_is_type(total, json_type_double) &&
		     json_object_get_double(total) != (double)sum))
			return mf_error(set, _("metadata.total_size is %s, but the shards' tensors hold "
					       "%llu bytes"),
					json_object_to_json_string(total), (unsigned long long)sum);
	}
	return 0;
}

/* The index's metadata members first, then the first shard's. */
static int index_meta(struct devcache_model_file *set, struct json_object *root)
{
	struct json_object *meta;
	int rc = 0;

	if (json_object_object_get_ex(root, "metadata", &meta) &&
	    json_object_is_type(meta, json_type_object)) {
		json_object_object_foreach(meta, key, v) {
			/* As the shards' __metadata__ reads: "org/model", not "org\/model". */
			if ((rc = copy_meta(set, key,
					    json_object_to_json_string_ext(
						    v, JSON_C_TO_STRING_PLAIN |
							       JSON_C_TO_STRING_NOSLASHESCAPE))))
				return rc;
		}
	}
	return set->n_parts ? copy_part_meta(set, set->parts[0]) : 0;
}

static int open_index(const char *path, struct devcache_model_file **set_p)
{
	struct devcache_model_file *set = NULL;
	struct json_object *root = NULL, *map = NULL;
	const char **names = NULL;
	char *dir = NULL;
	size_t n = 0;
	int rc;

	if ((rc = read_index(path, &root)) || (rc = weight_map(path, root, &map)) ||
	    (rc = shard_names(map, &names, &n)) || (rc = new_set(path, &set)))
		goto out;
	if (n == 0) {
		rc = mf_error(set, _("the weight_map names no tensor"));
		goto out;
	}
	if (!(dir = dir_of(path))) {
		rc = oom();
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct devcache_model_file *part;

		if ((rc = open_shard(path, dir, names[i], &part)) || (rc = add_part(set, part)))
			goto out;
	}
	sum_parts(set);
	/* The index is the set's own file: its identity is part of the set's. */
	struct stat st;
	if (stat(path, &st) == 0) {
		set->dev = st.st_dev;
		set->ino = st.st_ino;
		set->mtime = st.st_mtim;
	}
	if ((rc = merge_tensors(set)) || (rc = check_index(set, root, map, names)) ||
	    (rc = index_meta(set, root)))
		goto out;
	*set_p = set;
	set = NULL;
out:
	devcache_model_file_close(set);
	free(names);
	free(dir);
	json_object_put(root);
	return rc;
}

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
static bool split_name(const char *path, size_t *prefix_len_p, unsigned *no_p, unsigned *count_p)
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

	if (!split_name(mf->path, &prefix, &no, &name_count)) {
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
	if ((rc = new_set(mf->path, &set)) || !(path = malloc(prefix + SPLIT_SUFFIX_LEN + 1))) {
		rc = rc ? rc : oom();
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
			if (rc == DEVCACHE_ENOENT) {
				char why[1024]; /* err_set() overwrites the last error */

				snprintf(why, sizeof why, "%s", devcache_last_error());
				rc = err_set(DEVCACHE_ENOENT, _("%s: shard %u of %llu of the GGUF split "
								"is missing: %s"),
					     set->path, k + 1, count, why);
			}
			goto out;
		}
		if ((rc = add_part(set, part)))
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
	sum_parts(set);
	if ((rc = merge_tensors(set)))
		goto out;
	if (set->n_tensors != tensors) {
		rc = mf_error(set, _("split.tensors.count is %llu, but the %llu shards hold %zu tensors"),
			      tensors, count, set->n_tensors);
		goto out;
	}
	free(set->path);
	if (!(set->path = strdup(set->parts[0]->path))) {
		rc = oom();
		goto out;
	}
	if ((rc = copy_part_meta(set, set->parts[0])))
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
static int maybe_split(struct devcache_model_file *mf, struct devcache_model_file **out_p)
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
	if (split_name(mf->path, &prefix, &no, &name_count) && name_count > 1) {
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

/* ---- a folder ----------------------------------------------------------------- */

/* The models a folder holds: each index, each GGUF split (once), each
 * safetensors or GGUF file that no index or split claims. */
struct candidates {
	char **names;
	size_t n, cap;
};

static int add_candidate(struct candidates *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->names[i], name) == 0)
			return 0;
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 8;
		char **p = realloc(c->names, cap * sizeof *p);

		if (!p)
			return oom();
		c->names = p;
		c->cap = cap;
	}
	if (!(c->names[c->n] = strdup(name)))
		return oom();
	c->n++;
	return 0;
}

static void free_candidates(struct candidates *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->names[i]);
	free(c->names);
}

/* The shard file names the folder's indexes claim, each index read once
 * and lightly (only the weight_map's values); an index that does not read
 * claims nothing here, and is reported when it is opened. */
static int claimed_shards(const char *dir, char **entries, size_t n, struct candidates *claimed)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct json_object *root = NULL, *map;
		char *path;

		if (!ends_with(entries[i], ".safetensors.index.json"))
			continue;
		if (!(path = join(dir, entries[i])))
			return oom();
		if (read_index(path, &root) == 0 &&
		    json_object_object_get_ex(root, "weight_map", &map) &&
		    json_object_is_type(map, json_type_object)) {
			json_object_object_foreach(map, k, v) {
				(void)k;
				if (rc == 0 && json_object_is_type(v, json_type_string))
					rc = add_candidate(claimed, json_object_get_string(v));
			}
		}
		json_object_put(root);
		free(path);
	}
	if (rc == 0)
		err_clear();
	return rc;
}

static bool is_candidate(const struct candidates *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->names[i], name) == 0)
			return true;
	return false;
}

static int list_dir(const char *dir, char ***entries_p, size_t *n_p)
{
	DIR *d = opendir(dir);
	char **entries = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;

	if (!d)
		return err_set(errno == ENOENT ? DEVCACHE_ENOENT : DEVCACHE_EIO,
			       _("%s: cannot read the folder: %s"), dir, strerror(errno));
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 32;
			char **p = realloc(entries, cap * sizeof *p);
			if (!p)
				break;
			entries = p;
		}
		if (!(entries[n] = strdup(e->d_name)))
			break;
		n++;
	}
	closedir(d);
	if (e) {
		for (size_t i = 0; i < n; i++)
			free(entries[i]);
		free(entries);
		return oom();
	}
	if (n > 1) /* an empty folder has no array at all */
		qsort(entries, n, sizeof *entries, by_string);
	*entries_p = entries;
	*n_p = n;
	return 0;
}

static void free_entries(char **entries, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(entries[i]);
	free(entries);
}

static int folder_candidates(const char *dir, struct candidates *c)
{
	struct candidates claimed = {0};
	char **entries = NULL;
	size_t n = 0;
	int rc;

	if ((rc = list_dir(dir, &entries, &n)) || (rc = claimed_shards(dir, entries, n, &claimed))) {
		free_entries(entries, n);
		return rc;
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const char *name = entries[i];
		size_t prefix;
		unsigned no, count;

		if (ends_with(name, ".safetensors.index.json"))
			rc = add_candidate(c, name);
		else if (ends_with(name, ".safetensors") && !is_candidate(&claimed, name))
			rc = add_candidate(c, name);
		else if (ends_with(name, ".gguf") && split_name(name, &prefix, &no, &count) && count > 1) {
			char first[PATH_MAX];

			snprintf(first, sizeof first, "%.*s-00001-of-%05u.gguf", (int)prefix, name, count);
			rc = add_candidate(c, first);
		} else if (ends_with(name, ".gguf"))
			rc = add_candidate(c, name);
	}
	free_candidates(&claimed);
	free_entries(entries, n);
	return rc;
}

static bool is_pipeline(const char *dir)
{
	char *p = join(dir, "model_index.json");
	bool yes = p && access(p, F_OK) == 0;

	free(p);
	return yes;
}

static int pipeline_refusal(const char *dir)
{
	devcache_pipeline_t *pl;
	char list[1024] = "";
	size_t len = 0;
	int rc;

	if ((rc = devcache_pipeline_open(dir, &pl)))
		return rc;
	for (size_t i = 0; i < pl->n; i++)
		if (pl->comps[i].shards && len < sizeof list)
			len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "",
						pl->comps[i].name);
	devcache_pipeline_close(pl);
	return err_set(DEVCACHE_EINVAL,
		       _("%s: a diffusers pipeline, not one model: load one of: %s"), dir,
		       len ? list : _("(no component has weights)"));
}

/* The one model a folder holds, as a path to open. */
int mf_resolve_folder(const char *dir, char **path_p)
{
	struct candidates c = {0};
	int rc;

	*path_p = NULL;
	if (is_pipeline(dir))
		return pipeline_refusal(dir);
	if ((rc = folder_candidates(dir, &c)))
		goto out;
	if (c.n == 0) {
		rc = err_set(DEVCACHE_ENOENT, _("%s: the folder holds no safetensors or GGUF model"),
			     dir);
	} else if (c.n > 1) {
		char list[1024] = "";
		size_t len = 0;

		for (size_t i = 0; i < c.n && len < sizeof list; i++)
			len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
						c.names[i]);
		rc = err_set(DEVCACHE_EINVAL, _("%s: the folder holds %zu models (%s): name one"), dir,
			     c.n, list);
	} else if (!(*path_p = join(dir, c.names[0]))) {
		rc = oom();
	}
out:
	free_candidates(&c);
	return rc;
}

/* ---- diffusers pipelines --------------------------------------------------------- */

static int component_weights(devcache_component_t *comp)
{
	struct candidates c = {0};
	struct stat st;

	if (stat(comp->path, &st) != 0 || !S_ISDIR(st.st_mode))
		return 0; /* a component without a folder has no weights here */
	int rc = folder_candidates(comp->path, &c);
	/* One model: its files; several (variants): all of them. */
	for (size_t i = 0; rc == 0 && i < c.n; i++) {
		char *path = join(comp->path, c.names[i]);
		devcache_model_file_t *mf;

		if (!path) {
			rc = oom();
			break;
		}
		if (devcache_model_file_open(path, &mf) == 0) {
			comp->size += mf->size;
			comp->shards += mf->n_parts ? mf->n_parts : 1;
			devcache_model_file_close(mf);
		}
		free(path);
	}
	free_candidates(&c);
	if (rc == 0)
		err_clear(); /* a variant that does not open is not the listing's fault */
	return rc;
}

static int add_component(devcache_pipeline_t *pl, const char *dir, const char *name,
			 struct json_object *v)
{
	devcache_component_t *comp = &pl->comps[pl->n];
	struct json_object *lib = json_object_array_get_idx(v, 0), *cls = json_object_array_get_idx(v, 1);

	memset(comp, 0, sizeof *comp);
	comp->name = strdup(name);
	comp->path = join(dir, name);
	comp->library = strdup(json_object_is_type(lib, json_type_string) ? json_object_get_string(lib) : "");
	comp->class_name = strdup(json_object_is_type(cls, json_type_string) ? json_object_get_string(cls) : "");
	pl->n++;
	if (!comp->name || !comp->path || !comp->library || !comp->class_name)
		return oom();
	return component_weights(comp);
}

int devcache_pipeline_open(const char *dir, devcache_pipeline_t **pl_p)
{
	struct json_object *root = NULL;
	devcache_pipeline_t *pl = NULL;
	char *index = NULL;
	int rc;

	if (!dir || !pl_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_pipeline_open: NULL argument"));
	*pl_p = NULL;
	if (!(index = join(dir, "model_index.json")))
		return mf_name_oom(dir, oom());
	if ((rc = read_index(index, &root))) {
		if (rc == DEVCACHE_EFORMAT)
			rc = err_set(DEVCACHE_EFORMAT, _("%s: not a diffusers model_index.json"), index);
		goto out;
	}
	size_t cap = (size_t)json_object_object_length(root);
	if (!(pl = calloc(1, sizeof *pl)) || !(pl->comps = calloc(cap ? cap : 1, sizeof *pl->comps))) {
		rc = oom();
		goto out;
	}
	/* Keys starting with "_" are the pipeline's own (_class_name,
	 * _diffusers_version); components are [library, class] pairs. */
	json_object_object_foreach(root, key, v) {
		if (key[0] == '_' || !json_object_is_type(v, json_type_array) ||
		    json_object_array_length(v) != 2)
			continue;
		/* A component is a folder of the pipeline's, never a path out of it. */
		if (!key[0] || strchr(key, '/') || strcmp(key, "..") == 0 || strcmp(key, ".") == 0) {
			rc = err_set(DEVCACHE_EFORMAT,
				     _("%s: component '%s' is not the name of a folder in the "
				       "pipeline's"),
				     index, key);
			goto out;
		}
		if ((rc = add_component(pl, dir, key, v)))
			goto out;
	}
	*pl_p = pl;
	pl = NULL;
out:
	devcache_pipeline_close(pl);
	json_object_put(root);
	free(index);
	return mf_name_oom(dir, rc);
}

void devcache_pipeline_close(devcache_pipeline_t *pl)
{
	if (!pl)
		return;
	for (size_t i = 0; i < pl->n; i++) {
		free((char *)pl->comps[i].name);
		free((char *)pl->comps[i].path);
		free((char *)pl->comps[i].library);
		free((char *)pl->comps[i].class_name);
	}
	free(pl->comps);
	free(pl);
}

size_t devcache_pipeline_component_count(const devcache_pipeline_t *pl)
{
	return pl ? pl->n : 0;
}

int devcache_pipeline_component(const devcache_pipeline_t *pl, size_t index,
				devcache_component_t *comp)
{
	if (!pl || !comp)
		return err_set(DEVCACHE_EINVAL, _("devcache_pipeline_component: NULL argument"));
	if (index >= pl->n)
		return err_set(DEVCACHE_ENOENT, _("no component %zu (the pipeline has %zu)"), index,
			       pl->n);
	*comp = pl->comps[index];
	return 0;
}

/* ---- the entry point -------------------------------------------------------------- */

int devcache_model_file_open(const char *path, devcache_model_file_t **mf_p)
{
	struct devcache_model_file *mf;
	const char *given = path;
	char *resolved = NULL;
	struct stat st;
	int rc;

	if (!path || !mf_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_file_open: NULL argument"));
	*mf_p = NULL;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		if ((rc = mf_resolve_folder(path, &resolved)))
			return mf_name_oom(given, rc);
		path = resolved;
	}
	if (ends_with(path, ".json"))
		rc = open_index(path, mf_p);
	else if ((rc = mf_open_file(path, &mf)) == 0)
		rc = maybe_split(mf, mf_p);
	free(resolved);
	return mf_name_oom(given, rc);
}

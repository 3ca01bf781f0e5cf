/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-set.c - models of several files: the set and its checks, and Hugging Face shards with an index. */
#include "model-file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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
 *
 * The files: model-set.c the set and Hugging Face indexes, model-split.c
 * GGUF splits, model-folder.c the one model a folder holds and diffusers
 * pipelines; model-open.c opens one file and, through these, any model.
 */

/* An index file larger than this is not an index (the largest real ones,
 * with tens of thousands of tensors, are a few MiB). */
#define MAX_INDEX_BYTES (64u << 20)

bool mf_ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

char *mf_join(const char *dir, const char *name)
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

int mf_by_string(const void *x, const void *y)
{
	return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* ---- the set ------------------------------------------------------------------ */

int mf_new_set(const char *path, struct devcache_model_file **set_p)
{
	struct devcache_model_file *set = calloc(1, sizeof *set);

	if (!set || !(set->path = strdup(path))) {
		free(set);
		return err_oom();
	}
	set->fd = -1;
	*set_p = set;
	return 0;
}

int mf_add_part(struct devcache_model_file *set, struct devcache_model_file *part)
{
	struct devcache_model_file **p = realloc(set->parts, (set->n_parts + 1) * sizeof *p);

	if (!p) {
		devcache_model_file_close(part);
		return err_oom();
	}
	set->parts = p;
	set->parts[set->n_parts++] = part;
	return 0;
}

/* Merge the parts' tensors, in shard then file order, and index them by
 * name; a name in two shards makes the set bad. */
int mf_merge_tensors(struct devcache_model_file *set)
{
	size_t n = 0, k = 0;

	for (size_t p = 0; p < set->n_parts; p++)
		n += set->parts[p]->n_tensors;
	if (n > MF_MAX_TENSORS)
		return mf_error(set, _("more than %u tensors"), MF_MAX_TENSORS);
	if (!(set->tensors = calloc(n ? n : 1, sizeof *set->tensors)))
		return err_oom();
	for (size_t p = 0; p < set->n_parts; p++)
		for (size_t i = 0; i < set->parts[p]->n_tensors; i++, k++) {
			set->tensors[k] = set->parts[p]->tensors[i];
			set->tensors[k].part = (uint32_t)p;
		}
	set->n_tensors = set->tensors_cap = n;
	return mf_index_tensors(set);
}

/* The set's figures from its parts: size, format, data offset. */
void mf_sum_parts(struct devcache_model_file *set)
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

static int copy_meta(struct devcache_model_file *set, const struct mf_meta *from)
{
	char *k = strdup(from->key), *v = strdup(from->value), *str = NULL;
	int rc;

	if (from->str && (str = malloc(from->count + 1)))
		memcpy(str, from->str, from->count + 1);
	if (!k || !v || (from->str && !str)) {
		free(k);
		free(v);
		free(str);
		return err_oom();
	}
	if ((rc = mf_add_meta(set, k, v))) {
		free(str);
		return rc;
	}
	/* Typed as in the part, whose file holds an array's elements. */
	struct mf_meta *m = &set->meta[set->n_meta - 1];
	m->type = from->type;
	m->elem = from->elem;
	m->count = from->count;
	m->v = from->v;
	m->str = str;
	m->at = from->at;
	m->src = from->src;
	return 0;
}

/* The part's keys are distinct (its reader refuses a key given twice);
 * the set's are looked up sorted, so that a set of a million keys costs
 * n log n, not n^2. */
int mf_copy_part_meta(struct devcache_model_file *set, const struct devcache_model_file *part)
{
	size_t n = set->n_meta;
	const char **have = malloc((n ? n : 1) * sizeof *have);
	int rc = 0;

	if (!have)
		return err_oom();
	for (size_t i = 0; i < n; i++)
		have[i] = set->meta[i].key;
	qsort(have, n, sizeof *have, mf_by_string);
	for (size_t i = 0; rc == 0 && i < part->n_meta; i++) {
		const char *key = part->meta[i].key;

		if (!bsearch(&key, have, n, sizeof *have, mf_by_string))
			rc = copy_meta(set, &part->meta[i]);
	}
	free(have);
	return rc;
}

/* ---- Hugging Face shards: NAME.safetensors.index.json ----------------------------- */

/*
 * Before json-c builds its tree of an index, one pass over the text
 * bounds what the tree will cost: json-c's objects cost about 800 bytes
 * each, its arrays 150, its other values and keys about 100, so that
 * 10 MB of "{}" would need 2.6 GB.  A real index (tensor names mapped to
 * file names) needs about 3.5 bytes a byte of its text; the pass refuses
 * one that would need more than 64 MiB and 8 bytes a byte.  It also
 * refuses what json-c would change without a word: a key that holds
 * U+0000 (json-c cuts it there) and an integer past 2^64 - 1 (json-c
 * clamps it).  The text is not yet known to be JSON: the pass only tells
 * strings from the rest, and json-c judges the grammar after it.
 */
#define INDEX_BUDGET_BASE ((uint64_t)64 << 20)
#define INDEX_BUDGET_PER_BYTE 8

struct index_counts {
	uint64_t objects, arrays, values;
};

/* The string whose opening quote is at s[i]: the index of its closing
 * quote (or len), and whether it holds a \u0000. */
static size_t index_string(const char *s, size_t len, size_t i, bool *nul)
{
	*nul = false;
	for (i++; i < len && s[i] != '"'; i++)
		if (s[i] == '\\' && i + 1 < len) {
			if (s[++i] == 'u' && len - i > 4 && memcmp(s + i + 1, "0000", 4) == 0)
				*nul = true;
		}
	return i;
}

static int index_number(const struct devcache_model_file *probe, const char *s, size_t len,
			size_t *i)
{
	size_t b = *i, e = b;
	bool integer = b == 0 || s[b - 1] != '-';

	while (e < len && s[e] >= '0' && s[e] <= '9')
		e++;
	size_t digits = e - b;
	for (; e < len && s[e] && strchr("0123456789.eE+-", s[e]); e++)
		integer = integer && s[e] != '.' && s[e] != 'e' && s[e] != 'E';
	*i = e - 1;
	if (integer && (digits > 20 || (digits == 20 && memcmp(s + b, "18446744073709551615", 20) > 0)))
		return mf_error(probe, _("the number %.*s%s at byte %llu is larger than 2^64 - 1"),
				(int)(digits < 64 ? digits : 64), s + b, digits > 64 ? "..." : "",
				(unsigned long long)b);
	return 0;
}

static int index_precheck(const struct devcache_model_file *probe, const char *s, size_t len)
{
	struct index_counts c = {0, 0, 0};
	bool nul;
	int rc;

	for (size_t i = 0; i < len; i++) {
		switch (s[i]) {
		case '"': {
			size_t b = i, k;

			i = index_string(s, len, i, &nul);
			for (k = i + 1; k < len && strchr(" \t\n\r", s[k]) && s[k]; k++)
				;
			if (nul && k < len && s[k] == ':')
				return mf_error(probe, _("the key at byte %llu holds a NUL character (\\u0000)"),
						(unsigned long long)b);
			c.values++;
			break;
		}
		case '{':
			c.objects++;
			break;
		case '[':
			c.arrays++;
			break;
		case '0': case '1': case '2': case '3': case '4':
		case '5': case '6': case '7': case '8': case '9':
			if ((rc = index_number(probe, s, len, &i)))
				return rc;
			/* fall through */
		case 't': case 'f': case 'n':
			c.values++;
			break;
		}
	}
	uint64_t need = c.objects * 800 + c.arrays * 150 + c.values * 100;
	uint64_t budget = INDEX_BUDGET_BASE + INDEX_BUDGET_PER_BYTE * (uint64_t)len;
	if (need > budget)
		return mf_error(probe, _("%llu objects, %llu arrays and %llu other values in %llu bytes: "
					 "reading them would take about %llu MiB, more than the %llu MiB "
					 "the reader allows a file of this size"),
				(unsigned long long)c.objects, (unsigned long long)c.arrays,
				(unsigned long long)c.values, (unsigned long long)len,
				(unsigned long long)(need >> 20), (unsigned long long)(budget >> 20));
	return 0;
}

int mf_read_index(const char *path, struct json_object **root_p)
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
		rc = err_oom();
	else if ((rc = mf_read(&probe, text, (size_t)probe.size, 0, _("the index"))) == 0 &&
		 (rc = index_precheck(&probe, text, (size_t)probe.size)) == 0) {
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
	struct json_object *map, *meta;

	if (!json_object_object_get_ex(root, "weight_map", &map) ||
	    !json_object_is_type(map, json_type_object))
		return mf_error(&probe, _("not a safetensors index: it has no \"weight_map\" object"));
	if (json_object_object_get_ex(root, "metadata", &meta) &&
	    !json_object_is_type(meta, json_type_object))
		return mf_error(&probe, _("the index's \"metadata\" is not an object"));
	json_object_object_foreach(map, name, v) {
		const char *file = json_object_is_type(v, json_type_string) ? json_object_get_string(v)
									     : NULL;

		if (!file || !*file)
			return mf_error(&probe, _("weight_map: tensor '%s' is not mapped to a file name"),
					name);
		/* json-c keeps the whole string; a C string would end early. */
		if (strlen(file) != (size_t)json_object_get_string_len(v))
			return mf_error(&probe, _("weight_map: tensor '%s' is mapped to a file name that "
						  "holds a NUL character (\\u0000)"),
					name);
		if (strchr(file, '/') || strcmp(file, "..") == 0 || strcmp(file, ".") == 0)
			return mf_error(&probe, _("weight_map: tensor '%s' is mapped to '%s', which is "
						  "not a file in the index's folder"),
					name, file);
	}
	*map_p = map;
	return 0;
}

/* The distinct shard file names of a weight_map, sorted: the shard order. */
static int shard_names(struct json_object *map, const char ***names_p, size_t *n_p)
{
	size_t n = 0, cap = (size_t)json_object_object_length(map), k = 0;
	const char **names = calloc(cap ? cap : 1, sizeof *names);

	if (!names)
		return err_oom();
	json_object_object_foreach(map, key, v) {
		(void)key;
		names[n++] = json_object_get_string(v);
	}
	qsort(names, n, sizeof *names, mf_by_string);
	for (size_t i = 0; i < n; i++)
		if (k == 0 || strcmp(names[k - 1], names[i]) != 0)
			names[k++] = names[i];
	*names_p = names;
	*n_p = k;
	return 0;
}

int mf_too_many_files(const char *index, const char *name, size_t i, size_t n, int e)
{
	struct rlimit rl;
	char limit[32] = "?";

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		snprintf(limit, sizeof limit, "%llu", (unsigned long long)rl.rlim_cur);
	return err_set(DEVCACHE_EIO, _("%s: cannot open shard %zu of %zu (%s): %s; an open model "
				       "holds one file descriptor for each shard, and this process may "
				       "hold %s (RLIMIT_NOFILE, ulimit -n)"),
		       index, i + 1, n, name, strerror(e), limit);
}

static int open_shard(const char *index, const char *dir, const char *name, size_t i, size_t n,
		      struct devcache_model_file **mf_p)
{
	char *path = mf_join(dir, name);
	int rc;

	if (!path)
		return err_oom();
	rc = mf_open_file(path, mf_p);
	if (rc == DEVCACHE_EIO && (errno == EMFILE || errno == ENFILE))
		rc = mf_too_many_files(index, name, i, n, errno);
	else if (rc == DEVCACHE_ENOENT) {
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
		const char **at = bsearch(&file, names, set->n_parts, sizeof *names, mf_by_string);
		size_t p = (size_t)(at - names); /* every file of the map is a shard */

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

/* An index's metadata member, typed as JSON types it: a string, an
 * integer, a number, a boolean; an object, an array or null has only its
 * JSON text. */
static int copy_json_meta(struct devcache_model_file *set, const char *key, const char *json,
			  struct json_object *v)
{
	struct mf_meta m = {.key = (char *)key, .value = (char *)json, .type = MF_META_JSON,
			    .count = 1, .src = set};

	switch (json_object_get_type(v)) {
	case json_type_string:
		m.type = DEVCACHE_META_STRING;
		m.str = (char *)json_object_get_string(v);
		m.count = (uint64_t)json_object_get_string_len(v);
		break;
	case json_type_int:
		/* json-c holds an integer as int64 or, past INT64_MAX, uint64. */
		if (json_object_get_int64(v) == INT64_MAX && json_object_get_uint64(v) > INT64_MAX) {
			m.type = DEVCACHE_META_UINT64;
			m.v.u = json_object_get_uint64(v);
		} else {
			m.type = DEVCACHE_META_INT64;
			m.v.i = json_object_get_int64(v);
		}
		break;
	case json_type_double:
		m.type = DEVCACHE_META_FLOAT64;
		m.v.f = json_object_get_double(v);
		break;
	case json_type_boolean:
		m.type = DEVCACHE_META_BOOL;
		m.v.u = json_object_get_boolean(v) != 0;
		break;
	default:
		break;
	}
	return copy_meta(set, &m);
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
			const char *json = json_object_to_json_string_ext(
				v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);

			/* json-c's keys are distinct: nothing to look up. */
			if (!json || (rc = copy_json_meta(set, key, json, v)))
				return json ? rc : err_oom();
		}
	}
	return set->n_parts ? mf_copy_part_meta(set, set->parts[0]) : 0;
}

int mf_open_index(const char *path, struct devcache_model_file **set_p)
{
	struct devcache_model_file *set = NULL;
	struct json_object *root = NULL, *map = NULL;
	const char **names = NULL;
	char *dir = NULL;
	size_t n = 0;
	int rc;

	if ((rc = mf_read_index(path, &root)) || (rc = weight_map(path, root, &map)) ||
	    (rc = shard_names(map, &names, &n)) || (rc = mf_new_set(path, &set)))
		goto out;
	if (n == 0) {
		rc = mf_error(set, _("the weight_map names no tensor"));
		goto out;
	}
	if (!(dir = dir_of(path))) {
		rc = err_oom();
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct devcache_model_file *part;

		if ((rc = open_shard(path, dir, names[i], i, n, &part)) || (rc = mf_add_part(set, part)))
			goto out;
	}
	mf_sum_parts(set);
	/* The index is the set's own file: its identity is part of the set's. */
	struct stat st;
	if (stat(path, &st) == 0) {
		set->dev = st.st_dev;
		set->ino = st.st_ino;
		set->mtime = st.st_mtim;
	}
	if ((rc = mf_merge_tensors(set)) || (rc = check_index(set, root, map, names)) ||
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

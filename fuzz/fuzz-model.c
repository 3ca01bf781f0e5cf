/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fuzz-model.c - the checks the model fuzz targets make of every model file the reader accepts. */
#include "config.h"

#include "fuzz-model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#define CHECK(cond)                                                                          \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "%s:%d: the reader accepted a file where %s is false\n", \
				__FILE__, __LINE__, #cond);                                  \
			abort();                                                             \
		}                                                                            \
	} while (0)

static void check_tensor(const devcache_model_file_t *mf, const devcache_tensor_info_t *t,
			 const uint64_t *shard_size, size_t shards)
{
	devcache_tensor_info_t found;

	CHECK(t->name && t->dtype);
	CHECK(t->n_dims <= DEVCACHE_MAX_DIMS);
	CHECK(t->shard < shards);
	CHECK(t->offset <= shard_size[t->shard] && t->size <= shard_size[t->shard] - t->offset);
	CHECK(devcache_model_file_find(mf, t->name, &found) == 0);
	CHECK(found.offset == t->offset && found.size == t->size && found.shard == t->shard);
	/* Its dtype number names its dtype. */
	CHECK(devcache_dtype_name(t->dtype_id) && strcmp(devcache_dtype_name(t->dtype_id), t->dtype) == 0);
	CHECK(t->align >= 1 && t->align <= 4096 && (t->align & (t->align - 1)) == 0);
}

static int count_string(void *user, uint64_t index, const char *s, size_t len)
{
	(void)index;
	CHECK(s && s[len] == '\0');
	++*(uint64_t *)user;
	return 0;
}

/* The key leads to its entry, and its typed value reads back: an array
 * whole, from the file, where the reader said it is. */
static void check_typed(const devcache_model_file_t *mf, size_t i, const char *key)
{
	enum devcache_meta_type type, elem;
	uint64_t count, n = 0;
	size_t at;
	int rc;

	CHECK(devcache_model_file_metadata_find(mf, key, &at) == 0 && at == i);
	rc = devcache_model_file_metadata_type(mf, key, &type, &elem, &count);
	CHECK(rc == 0 || rc == DEVCACHE_ETYPE);
	if (rc || type != DEVCACHE_META_ARRAY)
		return;
	if (elem == DEVCACHE_META_STRING) {
		CHECK(devcache_model_file_get_strings(mf, key, count_string, &n) == 0 && n == count);
	} else if (elem != DEVCACHE_META_ARRAY && count <= (1u << 20)) {
		void *buf = malloc(count ? count * 8 : 1);

		if (buf)
			CHECK(devcache_model_file_get_array(mf, key, elem, 0, count, buf) == 0);
		free(buf);
	}
}

/* GGUF metadata is numbers, strings, booleans and arrays of them: each
 * value must read back as JSON. */
static void check_json(const char *text)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *v;

	if (!tok)
		return;
	/* With its NUL, so that a number at the end is known to end there;
	 * and no text after the value. */
	v = json_tokener_parse_ex(tok, text, (int)strlen(text) + 1);
	if (v && json_tokener_get_parse_end(tok) < strlen(text)) {
		json_object_put(v);
		v = NULL;
	}
	if (!v)
		fprintf(stderr, "metadata value is not JSON: %.200s\n", text);
	CHECK(v != NULL);
	json_object_put(v);
	json_tokener_free(tok);
}

void fuzz_check_model_file(const devcache_model_file_t *mf)
{
	size_t shards = devcache_model_file_shard_count(mf);
	uint64_t *shard_size = calloc(shards ? shards : 1, sizeof *shard_size), total = 0;
	unsigned version;
	int format = devcache_model_file_format(mf, &version);

	if (!shard_size)
		return;
	CHECK(format == DEVCACHE_FORMAT_SAFETENSORS || format == DEVCACHE_FORMAT_GGUF);
	CHECK(shards >= 1);
	for (size_t i = 0; i < shards; i++) {
		const char *path;

		CHECK(devcache_model_file_shard(mf, i, &path, &shard_size[i]) == 0);
		total += shard_size[i];
	}
	CHECK(devcache_model_file_shard(mf, shards, &(const char *){NULL}, &(uint64_t){0}) ==
	      DEVCACHE_ENOENT);
	CHECK(devcache_model_file_size(mf) == total);
	/* (A GGUF file of no tensor may end before its data section would
	 * start: its padding is not checked.) */
	CHECK(devcache_model_file_data_offset(mf) <= shard_size[0] ||
	      devcache_model_file_tensor_count(mf) == 0);
	for (size_t i = 0, n = devcache_model_file_tensor_count(mf); i <= n; i++) {
		devcache_tensor_info_t t;
		int rc = devcache_model_file_tensor(mf, i, &t);

		CHECK(rc == (i < n ? 0 : DEVCACHE_ENOENT));
		if (rc == 0)
			check_tensor(mf, &t, shard_size, shards);
	}
	for (size_t i = 0, n = devcache_model_file_metadata_count(mf); i < n; i++) {
		const char *key, *value;

		CHECK(devcache_model_file_metadata(mf, i, &key, &value) == 0);
		CHECK(key && value);
		check_json(value);
		check_typed(mf, i, key);
	}
	free(shard_size);
}

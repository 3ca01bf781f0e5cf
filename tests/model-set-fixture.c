/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-set-fixture.c - the helpers of the tests of models of several files (test-model-set, -split, -folder, -set-load). */
#include "tap.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <devcache.h>

#include "model-set-fixture.h"

TEST_TMPDIR_FIXTURE_SHARED("model-set");

void file_in(char *buf, size_t size, const char *folder, const char *name)
{
	int len = snprintf(buf, size, "%s/%s", folder, name);

	if (len < 0 || (size_t)len >= size)
		fail_msg("%s/%s does not fit in %zu bytes", folder, name, size);
}

void path_of(char *buf, size_t size, const char *name)
{
	file_in(buf, size, dir, name);
}

void make_dir(char *buf, size_t size, const char *name)
{
	path_of(buf, size, name);
	if (mkdir(buf, 0755) != 0)
		fail_msg("cannot create %s", buf);
}

void shard_path(char *buf, size_t size, const char *folder, const char *stem, unsigned k,
		unsigned n, const char *ext)
{
	char name[256];

	mw_shard_name(name, sizeof name, stem, k, n, ext);
	file_in(buf, size, folder, name);
}

uint64_t file_size(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
		fail_msg("cannot stat %s", path);
	return (uint64_t)st.st_size;
}

void refused(const char *path, int rc, ...)
{
	devcache_model_file_t *mf = (devcache_model_file_t *)1;
	const char *s;
	va_list ap;
	int got = devcache_model_file_open(path, &mf);

	if (got == 0)
		devcache_model_file_close(mf);
	if (got != rc)
		fail_msg("%s: %d, not %d (%s)", path, got, rc, got ? devcache_last_error() : "opened");
	assert_null(mf);
	va_start(ap, rc);
	while ((s = va_arg(ap, const char *)))
		assert_contains(devcache_last_error(), s);
	va_end(ap);
}

devcache_model_file_t *opened(const char *path)
{
	devcache_model_file_t *mf;

	if (devcache_model_file_open(path, &mf))
		fail_msg("%s: %s", path, devcache_last_error());
	return mf;
}

void expect_order(const devcache_model_file_t *mf, const struct mw_tensor *t, size_t n,
		  unsigned n_shards)
{
	size_t i = 0;

	assert_int_equal(devcache_model_file_tensor_count(mf), n);
	for (unsigned k = 0; k < n_shards; k++)
		for (size_t j = 0; j < n; j++) {
			devcache_tensor_info_t info;

			if (t[j].shard != k)
				continue;
			assert_int_equal(devcache_model_file_tensor(mf, i, &info), 0);
			if (strcmp(info.name, t[j].name) != 0)
				fail_msg("tensor %zu is '%s', not '%s'", i, info.name, t[j].name);
			assert_int_equal(info.shard, k);
			assert_int_equal(info.size, t[j].size);
			i++;
		}
	assert_int_equal(i, n);
}

void expect_bytes_in_shards(const devcache_model_file_t *mf, unsigned seed)
{
	for (size_t i = 0; i < devcache_model_file_tensor_count(mf); i++) {
		devcache_tensor_info_t info;
		const char *path;
		uint64_t size;

		assert_int_equal(devcache_model_file_tensor(mf, i, &info), 0);
		assert_int_equal(devcache_model_file_shard(mf, info.shard, &path, &size), 0);
		assert_true(info.offset + info.size <= size);
		unsigned char *buf = malloc(info.size ? info.size : 1);
		int fd = open(path, O_RDONLY);

		assert_non_null(buf);
		assert_true(fd >= 0);
		assert_int_equal(pread(fd, buf, info.size, (off_t)info.offset), (ssize_t)info.size);
		close(fd);
		mw_check(info.name, buf, info.size, seed);
		free(buf);
	}
}

void expect_shards(const devcache_model_file_t *mf, const char *const *paths, size_t n)
{
	uint64_t sum = 0;

	assert_int_equal(devcache_model_file_shard_count(mf), n);
	for (size_t k = 0; k < n; k++) {
		const char *path;
		uint64_t size;

		assert_int_equal(devcache_model_file_shard(mf, k, &path, &size), 0);
		assert_string_equal(path, paths[k]);
		assert_int_equal(size, file_size(paths[k]));
		sum += size;
	}
	assert_int_equal(devcache_model_file_size(mf), sum);
}

void expect_meta(const devcache_model_file_t *mf, size_t i, const char *key,
		 const char *value_json)
{
	const char *k, *v;

	assert_int_equal(devcache_model_file_metadata(mf, i, &k, &v), 0);
	assert_string_equal(k, key);
	assert_string_equal(v, value_json);
}

uint64_t sum_sizes(const struct mw_tensor *t, size_t n)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += t[i].size;
	return sum;
}

void st_shards(char paths[][512], const char *folder, const char *stem, unsigned n)
{
	for (unsigned k = 0; k < n; k++)
		shard_path(paths[k], 512, folder, stem, k, n, "safetensors");
}

void gguf_shards(char paths[][512], const char *folder, const char *prefix, unsigned n)
{
	for (unsigned k = 0; k < n; k++)
		shard_path(paths[k], 512, folder, prefix, k, n, "gguf");
}

/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-writer.c - the model writer for cmocka tests: model-writer-core.c's files, any error a failed test. */
#include "tap.h"

#include "model-writer.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* The core's error, as a failed test. */
static void ok(int rc, const struct mw_err *err)
{
	if (rc)
		fail_msg("model-writer: %s", err->msg);
}

void mw_check(const char *name, const void *data, size_t size, unsigned seed)
{
	size_t j;

	if (size && !data)
		fail_msg("model-writer: tensor '%s': no data to check (%zu bytes expected)", name,
			 size);
	j = mw_first_wrong(name, data, size, seed);
	if (j < size)
		fail_msg("model-writer: tensor '%s' byte %zu of %zu is %u, not %u (seed %u)", name,
			 j, size, ((const unsigned char *)data)[j], mw_byte(name, j, seed), seed);
}

void mw_safetensors(const char *path, const struct mw_tensor *t, size_t n, unsigned seed,
		    const char *metadata_json)
{
	struct mw_opts o = {.seed = seed, .metadata_json = metadata_json};

	mw_safetensors_opts(path, t, n, &o);
}

void mw_safetensors_opts(const char *path, const struct mw_tensor *t, size_t n,
			 const struct mw_opts *o)
{
	struct mw_err err;

	ok(mw_st_write(path, t, n, MW_ALL_SHARDS, o, &err), &err);
}

void mw_raw(const char *path, uint64_t stated, const void *header, size_t hlen, const void *data,
	    size_t dlen)
{
	struct mw_err err;

	ok(mw_st_raw(path, stated, header, hlen, data, dlen, &err), &err);
}

void mw_sharded(const char *dir, const char *stem, const struct mw_tensor *t, size_t n,
		unsigned n_shards, unsigned seed, unsigned flags, char *index_path, size_t index_size)
{
	struct mw_opts o = {.seed = seed};
	struct mw_err err;

	ok(mw_sharded_e(dir, stem, t, n, n_shards, &o, flags, index_path, index_size, &err), &err);
}

void mw_shard_name(char *buf, size_t size, const char *stem, unsigned k, unsigned n,
		   const char *ext)
{
	struct mw_err err;

	ok(mw_shard_name_e(buf, size, stem, k, n, ext, &err), &err);
}

void mw_gguf(const char *path, const struct mw_kv *kv, size_t n_kv, const struct mw_tensor *t,
	     size_t n, unsigned seed)
{
	struct mw_opts o = {.seed = seed};
	struct mw_err err;

	ok(mw_gguf_write(path, kv, n_kv, t, n, MW_ALL_SHARDS, &o, &err), &err);
}

void mw_gguf_split(const char *dir, const char *prefix, const struct mw_tensor *t, size_t n,
		   unsigned n_splits, unsigned seed, unsigned flags, char *first_path,
		   size_t first_size)
{
	struct mw_opts o = {.seed = seed};
	struct mw_err err;

	ok(mw_gguf_split_e(dir, prefix, t, n, n_splits, &o, flags, first_path, first_size, &err),
	   &err);
}

void mw_text(const char *path, const char *text)
{
	mw_bytes(path, text, strlen(text));
}

void mw_bytes(const char *path, const void *data, size_t len)
{
	struct mw_err err;

	ok(mw_file(path, data, len, &err), &err);
}

devcache_ctx_t *mw_open_ctx(const char *options)
{
	char opts[1024];
	devcache_ctx_t *ctx;
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = opts};

	snprintf(opts, sizeof opts, "log_level:error,backend_path:%s,backends:good%s%s",
		 test_env("TEST_MODULES"), options ? "," : "", options ? options : "");
	if (devcache_open_ex(&ctx, &args))
		fail_msg("devcache_open_ex(%s): %s", opts, devcache_last_error());
	return ctx;
}

devcache_device_t *mw_device(devcache_ctx_t *ctx, const char *name)
{
	devcache_device_t *dev;

	assert_int_equal(devcache_device_get(ctx, name, &dev), 0);
	return dev;
}

/* Opening path in a child process: its result, and the memory it took
 * beyond what it started with (its peak resident size less ours at the
 * fork, which it shares at first).  nofile: its RLIMIT_NOFILE, or 0. */
int mw_open_in_child(const char *path, rlim_t nofile, uint64_t *extra_p, char *msg, size_t size)
{
	long pages = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	struct rusage ru;
	int status, fds[2];

	assert_non_null(f);
	assert_int_equal(fscanf(f, "%ld %ld", &pages, &resident), 2);
	fclose(f);
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = {nofile, nofile};
		devcache_model_file_t *mf = NULL;

		close(fds[0]);
		if (nofile && setrlimit(RLIMIT_NOFILE, &rl) != 0)
			_exit(99);
		int rc = devcache_model_file_open(path, &mf);
		devcache_model_file_close(mf);
		if (write(fds[1], devcache_last_error(), strlen(devcache_last_error())) < 0)
			_exit(98);
		_exit(-rc);
	}
	close(fds[1]);
	/* Read even when msg is not wanted: a closed pipe would kill the child. */
	char discard[1024];
	if (!msg || !size)
		msg = discard, size = sizeof discard;
	ssize_t got = read(fds[0], msg, size - 1);
	msg[got > 0 ? got : 0] = '\0';
	close(fds[0]);
	assert_int_equal(wait4(pid, &status, 0, &ru), pid);
	if (!WIFEXITED(status))
		fail_msg("%s: the child process ended by signal %d", path, WTERMSIG(status));
	uint64_t peak = (uint64_t)ru.ru_maxrss * 1024,
		 base = (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
	*extra_p = peak > base ? peak - base : 0;
	return -WEXITSTATUS(status);
}

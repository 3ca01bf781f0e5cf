/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* static-client.c - a program linked with the static library that has functions of its own named like libdevcache's internals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <devcache.h>

/* Names that libdevcache uses inside (lib/internal.h, lib/alloc.h,
 * lib/model-file.h, lib/tunables.h): a program may well have its own.
 * Linked with an archive that exports them, the link fails with "multiple
 * definition", or the library calls the program's function instead of its
 * own.  Each counts its calls, so that the second case shows too. */
static unsigned own_calls;

int log_msg(const char *msg);
int err_set(int code);
int gguf_parse(const char *path);
int index_insert(int key);
int tunable_find(const char *name);
void format_size(char *buf, size_t size);

int log_msg(const char *msg)
{
	own_calls++;
	return msg != NULL;
}

int err_set(int code)
{
	own_calls++;
	return code;
}

int gguf_parse(const char *path)
{
	own_calls++;
	return path == NULL;
}

int index_insert(int key)
{
	own_calls++;
	return key + 1;
}

int tunable_find(const char *name)
{
	own_calls++;
	return name ? (int)strlen(name) : -1;
}

void format_size(char *buf, size_t size)
{
	own_calls++;
	snprintf(buf, size, "mine");
}

static int fail(const char *what)
{
	fprintf(stderr, "static-client: %s: %s\n", what, devcache_last_error());
	return 1;
}

int main(void)
{
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	devcache_device_info_t info;
	devcache_model_file_t *mf;
	const char *tmpdir = getenv("TMPDIR");
	char buf[16], path[4096];
	/* A GGUF header and nothing else: the library's GGUF parser reads it. */
	static const unsigned char gguf[24] = { 'G', 'G', 'U', 'F', 3 };
	unsigned expected;
	void *p;
	int fd, rc = 0;

	/* The program's own functions work... */
	format_size(buf, sizeof buf);
	if (log_msg("x") != 1 || err_set(7) != 7 || gguf_parse(NULL) != 1 || index_insert(1) != 2 ||
	    tunable_find("ab") != 2 || strcmp(buf, "mine") != 0) {
		fprintf(stderr, "static-client: the program's own functions went wrong\n");
		return 1;
	}
	expected = own_calls;

	/* ...and the library's, which use their namesakes inside. */
	if (devcache_version() != DEVCACHE_VERSION)
		return fail("devcache_version");
	if (devcache_open(&ctx, "log_level:error"))
		return fail("devcache_open");
	if (devcache_device_get(ctx, "host", &dev) || devcache_device_info(dev, &info)) {
		devcache_close(ctx);
		return fail("host device");
	}
	if (devcache_alloc(dev, 4096, NULL, &p) || devcache_free(dev, p)) {
		devcache_close(ctx);
		return fail("devcache_alloc");
	}
	/* An error: the library's err_set() makes the message. */
	if (devcache_device_get(ctx, "no-such-device", &dev) == 0 || !*devcache_last_error()) {
		fprintf(stderr, "static-client: no error for a device that is not there\n");
		rc = 1;
	}
	devcache_close(ctx);

	snprintf(path, sizeof path, "%s/static-client-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
	fd = mkstemp(path);
	if (fd < 0 || write(fd, gguf, sizeof gguf) != (ssize_t)sizeof gguf) {
		perror("static-client: a temporary file");
		return 1;
	}
	close(fd);
	if (devcache_model_file_open(path, &mf) == 0)
		devcache_model_file_close(mf);
	unlink(path);

	if (own_calls != expected) {
		fprintf(stderr, "static-client: libdevcache called the program's functions "
				"(%u calls) instead of its own\n", own_calls - expected);
		rc = 1;
	}
	if (rc == 0)
		printf("static-client: libdevcache %s, device %s\n", devcache_version_string(), info.id);
	return rc;
}
